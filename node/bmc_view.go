package node

import (
	"errors"
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/node/client"
)

// BMC is what GET /v1/swarm/bmc answers: the authoritative table, its
// signer and age, and the BMC peers this peer listens to. Without a BMC
// configured it is an answer.NotFound error.
func (n *Node) BMC() (client.BMC, error) {
	n.mu.Lock()
	s := n.bmc
	n.mu.Unlock()
	if s == nil {
		return client.BMC{}, answer.Wrap(answer.NotFound,
			errors.New("no BMC configured on this peer: set bmc_peers (--bmc-peer) to accept BMC tables, or bmc_serial (--bmc-serial) to be a bridge"))
	}
	now := time.Now()
	return bmcOut(s.snapshot(now), now), nil
}

// bmcSnapshot is the state the API reports.
type bmcSnapshot struct {
	authority peer.ID
	table     *bmcSource
	sources   map[peer.ID]bmcSource
	allowed   []peer.ID
	ignored   map[peer.ID]time.Time
	bridge    *bmcBridgeStatus
}

func (s *bmcService) snapshot(now time.Time) bmcSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := bmcSnapshot{sources: map[peer.ID]bmcSource{}, ignored: map[peer.ID]time.Time{}}
	id, src := s.authorityLocked(now)
	if src != nil {
		cp := *src
		snap.authority, snap.table = id, &cp
	}
	for id, src := range s.sources {
		snap.sources[id] = *src
	}
	for id := range s.allowed {
		snap.allowed = append(snap.allowed, id)
	}
	sort.Slice(snap.allowed, func(i, j int) bool { return snap.allowed[i].String() < snap.allowed[j].String() })
	for id, at := range s.ignored {
		snap.ignored[id] = at
	}
	if s.bridge != nil {
		st := s.bridge.status()
		snap.bridge = &st
	}
	return snap
}

func bmcOut(snap bmcSnapshot, now time.Time) client.BMC {
	out := client.BMC{FreshForMS: BMCFreshness.Milliseconds(), Peers: []client.BMCPeer{}}
	for _, id := range snap.allowed {
		p := client.BMCPeer{PeerID: id.String(), Authority: id == snap.authority, LastMS: -1}
		if src, ok := snap.sources[id]; ok {
			p.LastMS = now.Sub(src.at).Milliseconds()
			p.Live = now.Sub(src.at) <= BMCFreshness
			p.Boot, p.Seq, p.Nodes, p.Stale = src.table.Boot, src.table.Seq, len(src.table.Nodes), src.stale
		}
		out.Peers = append(out.Peers, p)
	}
	for id, at := range snap.ignored {
		out.Ignored = append(out.Ignored, client.BMCPeer{PeerID: id.String(), LastMS: now.Sub(at).Milliseconds()})
	}
	sort.Slice(out.Ignored, func(i, j int) bool { return out.Ignored[i].PeerID < out.Ignored[j].PeerID })
	if b := snap.bridge; b != nil {
		out.Bridge = &client.BMCBridge{Path: b.Path, Connected: b.Connected, Boot: b.Boot,
			RTTMS: float64(b.RTT.Microseconds()) / 1000, LastPublishMS: -1, Published: b.Published, Error: b.Err}
		if !b.LastPub.IsZero() {
			out.Bridge.LastPublishMS = now.Sub(b.LastPub).Milliseconds()
		}
	}
	if snap.table == nil {
		out.Message = "no BMC table in force: no allowed BMC published within the last " + BMCFreshness.String()
		return out
	}
	src := snap.table
	tab := src.table
	t := &client.BMCTable{
		Signer: snap.authority.String(), AgeMS: now.Sub(src.at).Milliseconds(), Boot: tab.Boot, Seq: tab.Seq,
		UptimeMS: tab.Uptime.Milliseconds(), DeadAfterMS: (tab.Period * time.Duration(tab.Misses)).Milliseconds(),
		Nodes: []client.BMCNode{}, Partitions: []client.BMCPartition{},
	}
	for _, nd := range tab.Nodes {
		h := nd.Handle.String()
		t.Nodes = append(t.Nodes, client.BMCNode{Handle: h, PeerID: src.rec.Nodes[h], Alive: nd.Live,
			AgeMS: nd.Age.Milliseconds(), Load: int(nd.Load)})
	}
	for _, p := range tab.Parts {
		t.Partitions = append(t.Partitions, client.BMCPartition{Node: p.Node.String(), PeerID: src.rec.Nodes[p.Node.String()],
			Model: p.Model.String(), ModelCID: src.rec.Models[p.Model.String()], Start: int(p.First), End: int(p.End)})
	}
	out.Authority = t
	return out
}
