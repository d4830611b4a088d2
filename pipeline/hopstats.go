package pipeline

import (
	"time"

	"github.com/llmswarm/llmswarm/answer"
)

// account adds one decode step's per-hop times. Result hops come last hop
// first; hop i's transfer is what its upstream waited beyond hop i's own
// compute and downstream wait.
func (g *generation) account(res *Result, took time.Duration) {
	n := len(g.hops)
	if len(res.Hops) != n {
		return
	}
	ht := make([]HopTiming, n)
	for i, h := range res.Hops {
		ht[n-1-i] = h
	}
	upstream := float64(took.Microseconds()) / 1000
	for i := 0; i < n; i++ {
		c, d := float64(ht[i].ComputeMS), float64(ht[i].DownstreamMS)
		g.compute[i] += c
		g.xfer[i] += max(upstream-c-d, 0)
		upstream = d
	}
	if g.conns == nil {
		g.conns = g.connKinds(g.hops)
	}
	g.decodes++
}

// stats folds the current route's accounting into the result.
func (g *generation) stats() {
	for i, h := range g.hops {
		hs := answer.HopStat{Peer: h.Peer, Start: h.Start, End: h.End, Backend: g.backendOf(h)}
		if i < len(g.conns) {
			hs.Conn = g.conns[i]
		}
		if g.decodes > 0 {
			hs.ComputeMS = g.compute[i] / float64(g.decodes)
			hs.TransferMS = g.xfer[i] / float64(g.decodes)
			g.o.costs.note(h, 0, hs.TransferMS)
		}
		g.res.Hops = append(g.res.Hops, hs)
	}
	g.decodes = 0
}

// backendOf is where hop h's peer says it runs the hop's layers (the
// backend of its announced shard holding them: "CPU", "Vulkan 4/4+head");
// "" where its record names none.
func (g *generation) backendOf(h Hop) string {
	for _, sh := range g.holders {
		if sh.Peer.ID.String() == h.Peer && sh.Shard.Start <= h.Start && h.End <= sh.Shard.End {
			return sh.Shard.Backend
		}
	}
	return ""
}
