package moa

import (
	"strings"
	"testing"
	"time"

	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/nettest"
	"github.com/llmswarm/llmswarm/swarm"
)

// behindProxy makes a freezable proxy the only way origin reaches p.
func behindProxy(t *testing.T, origin, p *testPeer) *nettest.Proxy {
	t.Helper()
	for _, a := range p.h.Addrs() {
		na, err := manet.ToNetAddr(a)
		if err != nil {
			continue
		}
		px := nettest.NewProxy(t, na.String())
		pa, err := manet.FromNetAddr(px.Addr())
		if err != nil {
			t.Fatal(err)
		}
		origin.h.Peerstore().ClearAddrs(p.h.ID())
		origin.h.Peerstore().AddAddr(p.h.ID(), pa, time.Hour)
		return px
	}
	t.Fatal("no TCP address to proxy")
	return nil
}

// TestHungAgentMovesToNextHolder: the reasoner measured fastest hangs
// (its link freezes, as under SIGSTOP). The originator finds it by its
// progress deadline and a ping, and the other holder answers, well before
// any fixed timeout.
func TestHungAgentMovesToNextHolder(t *testing.T) {
	origin := newTestPeer(t, 4)
	hung, live := newTestPeer(t, 4, Reasoner), newTestPeer(t, 4, Reasoner)
	px := behindProxy(t, origin, hung)
	tr := swarm.NewTrust()
	v := swarm.NewView(origin.h.ID(), swarm.Liveness{}, swarm.WithTrust(tr))
	for i, p := range []*testPeer{origin, hung, live} {
		verifyRoles(tr, p)
		if p != hung {
			origin.h.Peerstore().AddAddrs(p.h.ID(), p.h.Addrs(), time.Hour)
		}
		v.Observe(&gossip.Capability{PeerID: p.h.ID().String(), Seq: uint64(i + 1), Roles: p.srv.Roles(), Load: gossip.Load{Capacity: 4}}, time.Now())
	}
	px.Freeze()
	o := &Originator{Host: origin.h, View: v, Progress: swarm.Progress{Floor: 500 * time.Millisecond, ProbeTimeout: 500 * time.Millisecond}}
	o.stats.observe(hung.h.ID(), 0, 1000) // measured fastest earlier: ranks first
	o.stats.observe(live.h.ID(), 0, 4)    // a slow Pi, ranked second
	var agents []answer.Agent
	o.Log = nil
	start := time.Now()
	res, err := o.Ask(t.Context(), Query{Prompt: "What is the capital of Australia?", MaxTokens: 8,
		OnAgent: func(a answer.Agent) { agents = append(agents, a) }})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	var reasoner *answer.Agent
	for i := range res.AgentResponses {
		if res.AgentResponses[i].Role == Reasoner {
			reasoner = &res.AgentResponses[i]
		}
	}
	if reasoner == nil || reasoner.Peer != live.h.ID().String() {
		t.Fatalf("reasoner answered by %+v, want the live holder %s", reasoner, live.h.ID())
	}
	if took > 8*time.Second {
		t.Fatalf("answered after %s with a hung holder (detection is about 1 s here)", took)
	}
	t.Logf("a hung holder cost %s end to end", took)
	if len(reasoner.Skipped) != 1 || !strings.Contains(reasoner.Skipped[0], "hung") || !strings.Contains(reasoner.Skipped[0], shortPeer(hung.h.ID().String())) {
		t.Fatalf("skipped holders %q, want the hung one named as hung", reasoner.Skipped)
	}
}
