package node

import (
	"time"

	"github.com/llmswarm/llmswarm/internal/engine"

	"github.com/libp2p/go-libp2p/core/host"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/swarm"
)

func addrStrings(h host.Host) []string {
	out := []string{}
	for _, a := range h.Addrs() {
		out = append(out, a.String())
	}
	return out
}

func platformOut(p gossip.Platform) client.Platform {
	out := client.Platform{OS: p.OS, Arch: p.Arch, Device: p.Device, Cores: p.Cores, RAMBytes: p.RAMBytes, FreeRAM: p.FreeRAM}
	for _, g := range p.GPUs {
		out.GPUs = append(out.GPUs, client.GPU(g))
	}
	return out
}

func peerOut(p swarm.Peer, now time.Time, connected bool) client.Peer {
	c := p.Cap
	out := client.Peer{
		PeerID: p.ID.String(), Self: p.Self, Alive: p.Alive, Connected: connected,
		LastSeenMS: now.Sub(p.LastSeen).Milliseconds(), Version: c.Version, Addrs: c.Addrs,
		Platform: platformOut(c.Platform), Active: c.Load.Active, Capacity: c.Load.Capacity, Queued: c.Load.Queued, Thermal: c.Thermal,
	}
	if !p.Alive {
		out.DeadForMS = now.Sub(p.DeadSince).Milliseconds()
	}
	for _, r := range c.Roles {
		out.Roles = append(out.Roles, client.Role(r))
	}
	for _, s := range c.Shards {
		out.Shards = append(out.Shards, client.Shard(s))
	}
	if c.Battery != nil {
		b := client.Battery(*c.Battery)
		out.Battery = &b
	}
	return out
}

func queueOut(q engine.QueueStats) client.Queue {
	out := client.Queue{Waiting: q.Waiting, Limit: q.Limit, Waited: q.Waited, MaxWaitMS: float64(q.MaxWait.Microseconds()) / 1000}
	if q.Waited > 0 {
		out.MeanWaitMS = float64(q.WaitTime.Microseconds()) / 1000 / float64(q.Waited)
	}
	return out
}
