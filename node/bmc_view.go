package node

import (
	"errors"
	"sort"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/bmcauth"
	"github.com/llmswarm/llmswarm/client"
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
	return bmcOut(s.Snapshot(now), now), nil
}

// bmcOut is the API's view of the BMC plane's state at now.
func bmcOut(snap bmcauth.Snapshot, now time.Time) client.BMC {
	out := client.BMC{FreshForMS: bmcauth.Freshness.Milliseconds(), Peers: []client.BMCPeer{}}
	for _, id := range snap.Allowed {
		p := client.BMCPeer{PeerID: id.String(), Authority: id == snap.Authority, LastMS: -1}
		if src, ok := snap.Sources[id]; ok {
			p.LastMS = now.Sub(src.At).Milliseconds()
			p.Live = src.Fresh(now)
			p.Boot, p.Seq, p.Nodes, p.Stale = src.Table.Boot, src.Table.Seq, len(src.Table.Nodes), src.Stale
		}
		out.Peers = append(out.Peers, p)
	}
	for id, at := range snap.Ignored {
		out.Ignored = append(out.Ignored, client.BMCPeer{PeerID: id.String(), LastMS: now.Sub(at).Milliseconds()})
	}
	sort.Slice(out.Ignored, func(i, j int) bool { return out.Ignored[i].PeerID < out.Ignored[j].PeerID })
	if b := snap.Bridge; b != nil {
		out.Bridge = &client.BMCBridge{Path: b.Path, Connected: b.Connected, Boot: b.Boot,
			RTTMS: float64(b.RTT.Microseconds()) / 1000, LastPublishMS: -1, Published: b.Published, Error: b.Err}
		if !b.LastPub.IsZero() {
			out.Bridge.LastPublishMS = now.Sub(b.LastPub).Milliseconds()
		}
	}
	if snap.Table == nil {
		out.Message = "no BMC table in force: no allowed BMC published within the last " + bmcauth.Freshness.String()
		return out
	}
	src := snap.Table
	tab := src.Table
	t := &client.BMCTable{
		Signer: snap.Authority.String(), AgeMS: now.Sub(src.At).Milliseconds(), Boot: tab.Boot, Seq: tab.Seq,
		UptimeMS: tab.Uptime.Milliseconds(), DeadAfterMS: (tab.Period * time.Duration(tab.Misses)).Milliseconds(),
		Nodes: []client.BMCNode{}, Partitions: []client.BMCPartition{},
	}
	for _, nd := range tab.Nodes {
		h := nd.Handle.String()
		t.Nodes = append(t.Nodes, client.BMCNode{Handle: h, PeerID: src.Record.Nodes[h], Alive: nd.Live,
			AgeMS: nd.Age.Milliseconds(), Load: int(nd.Load)})
	}
	for _, p := range tab.Parts {
		t.Partitions = append(t.Partitions, client.BMCPartition{Node: p.Node.String(), PeerID: src.Record.Nodes[p.Node.String()],
			Model: p.Model.String(), ModelCID: src.Record.Models[p.Model.String()], Start: int(p.First), End: int(p.End)})
	}
	out.Authority = t
	return out
}
