package moa

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/swarm"
)

// countRequests counts the MoA streams p is opened (real questions).
func countRequests(p *testPeer) *atomic.Int32 {
	var n atomic.Int32
	for _, id := range []protocol.ID{ProtocolID, ReasoningProtocolID} {
		p.h.SetStreamHandler(id, func(st network.Stream) {
			n.Add(1)
			p.srv.handle(st)
		})
	}
	return &n
}

// boast re-announces p's roles at tokPerSec, as a liar's own validly
// signed record would.
func boast(v *swarm.View, p *testPeer, tokPerSec float64) {
	roles := p.srv.Roles()
	for i := range roles {
		roles[i].TokPerSec = tokPerSec
	}
	v.Observe(&gossip.Capability{PeerID: p.h.ID().String(), Seq: 100, Roles: roles, Load: gossip.Load{Capacity: 4}}, time.Now())
}

// roleVet is a Vet hook for these tests: peers in fail fail their check
// (the ledger bans them, as the real checker does), peers in unknown
// cannot be checked (nil, nothing recorded), the others pass.
type roleVet struct {
	trust         *swarm.Trust
	fail, unknown map[peer.ID]bool
	mu            sync.Mutex
	asked         []peer.ID
}

func (v *roleVet) vet(_ context.Context, id peer.ID, c swarm.Claim) error {
	v.mu.Lock()
	v.asked = append(v.asked, id)
	fail, unknown := v.fail[id], v.unknown[id]
	v.mu.Unlock()
	switch {
	case fail:
		v.trust.Fail(id, "test: wrong numbers")
		return errors.New("failed its check")
	case unknown:
		return nil
	}
	v.trust.Pass(id, c)
	return nil
}

// TestBoastingPeerDoesNotWinTheFanOut: a peer announcing 1e6 tok/s does
// not take the role from a holder this peer verified and measured: it is
// not asked, and challenged once, in the background, not once per
// question.
func TestBoastingPeerDoesNotWinTheFanOut(t *testing.T) {
	origin := newTestPeer(t, 4)
	honest, liar := newTestPeer(t, 4, Reasoner), newTestPeer(t, 4, Reasoner)
	asked := countRequests(liar)
	tr := swarm.NewTrust()
	v := viewTrusting(tr, origin, honest, liar)
	boast(v, liar, 1e6)
	cid := honest.srv.Roles()[0].ModelCID
	tr.Pass(honest.h.ID(), swarm.RoleClaim(cid))
	tr.Measure(honest.h.ID(), swarm.TokPerSecKey(Reasoner), 30)
	rv := &roleVet{trust: tr}
	o := &Originator{Host: origin.h, View: v, Vet: rv.vet}
	for range 3 {
		res, err := o.Direct(t.Context(), Reasoner, Query{Prompt: "What is the capital of France?", MaxTokens: 4})
		if err != nil {
			t.Fatal(err)
		}
		if a := res.AgentResponses[0]; a.Peer != honest.h.ID().String() || a.Unverified {
			t.Fatalf("answered by %s (unverified %v), want the verified honest peer", a.Peer, a.Unverified)
		}
	}
	o.Close() // the background check has ended
	if asked.Load() != 0 || len(rv.asked) > 1 {
		t.Fatalf("the boaster got %d questions and %d challenges", asked.Load(), len(rv.asked))
	}
	if w := o.candidates(Reasoner); w[0].peer.ID != honest.h.ID() || w[1].weight > 0.1 {
		t.Fatalf("weights: %+v", w)
	}
}

// TestUnverifiedPeerVettedBeforeUse: holders not yet verified are vetted
// before their first question: a liar fails and is never asked (now or
// later: it is banned); an honest peer passes and answers; a peer that
// cannot be checked is not asked by default, and under UnverifiedAsk
// answers marked unverified.
func TestUnverifiedPeerVettedBeforeUse(t *testing.T) {
	origin := newTestPeer(t, 4)
	honest, liar := newTestPeer(t, 4, Reasoner), newTestPeer(t, 4, Reasoner)
	asked := countRequests(liar)
	tr := swarm.NewTrust()
	v := viewTrusting(tr, origin, liar) // the liar alone holds the role at first
	boast(v, liar, 1e6)
	rv := &roleVet{trust: tr, fail: map[peer.ID]bool{liar.h.ID(): true}}
	o := &Originator{Host: origin.h, View: v, Vet: rv.vet}
	q := Query{Prompt: "What is the capital of France?", MaxTokens: 4}
	if _, err := o.Direct(t.Context(), Reasoner, q); err == nil {
		t.Fatal("the liar's role answered")
	}
	if banned, _ := tr.Banned(liar.h.ID()); !banned || len(rv.asked) != 1 {
		t.Fatalf("liar banned %v after %d challenges", banned, len(rv.asked))
	}
	v.Observe(&gossip.Capability{PeerID: honest.h.ID().String(), Seq: 1, Roles: honest.srv.Roles(), Load: gossip.Load{Capacity: 4}}, time.Now())
	origin.h.Peerstore().AddAddrs(honest.h.ID(), honest.h.Addrs(), time.Hour)
	for range 3 {
		res, err := o.Direct(t.Context(), Reasoner, q)
		if err != nil {
			t.Fatal(err)
		}
		if a := res.AgentResponses[0]; a.Peer != honest.h.ID().String() || a.Unverified {
			t.Fatalf("answered by %s (unverified %v), want the honest peer, verified", a.Peer, a.Unverified)
		}
	}
	if asked.Load() != 0 {
		t.Fatalf("the liar got %d questions", asked.Load())
	}
	if !slices.Equal(rv.asked, []peer.ID{liar.h.ID(), honest.h.ID()}) {
		t.Fatalf("vetted %v: want the liar once (then banned), the honest peer once (then verified)", rv.asked)
	}

	// A holder this peer cannot check answers, and says so.
	other := newTestPeer(t, 4, Writer)
	v.Observe(&gossip.Capability{PeerID: other.h.ID().String(), Seq: 1, Roles: other.srv.Roles(), Load: gossip.Load{Capacity: 4}}, time.Now())
	origin.h.Peerstore().AddAddrs(other.h.ID(), other.h.Addrs(), time.Hour)
	rv.mu.Lock()
	rv.unknown = map[peer.ID]bool{other.h.ID(): true}
	rv.mu.Unlock()
	wq := Query{Prompt: "Write a line about the sea.", MaxTokens: 4}
	if _, err := o.Direct(t.Context(), Writer, wq); !errors.Is(err, ErrNoAgents) || !strings.Contains(err.Error(), "none verified") {
		t.Fatalf("direct to an unverifiable writer: %v, want ErrNoAgents saying it is not verified", err)
	}
	o.Unverified = UnverifiedAsk
	res, err := o.Direct(t.Context(), Writer, wq)
	if err != nil {
		t.Fatal(err)
	}
	if a := res.AgentResponses[0]; a.Peer != other.h.ID().String() || !a.Unverified {
		t.Fatalf("answer %+v: want it marked unverified", a)
	}
}
