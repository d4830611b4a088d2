package moa

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/ledger"
)

// exchangeOf gives p a ledger and the receipt protocol.
func exchangeOf(t *testing.T, p *testPeer) *ledger.Exchange {
	t.Helper()
	e, err := ledger.NewExchange(p.h, ledger.New(p.h.ID(), ledger.Options{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.Delay = 10 * time.Millisecond
	t.Cleanup(e.Close)
	return e
}

// TestContendedRoleServesContributorsFirst: a role peer with one slot
// holds, from receipts sent over the receipt protocol, 3 peers that
// served it and 6 that only took from it. With its slot busy, all 9 ask
// at once: the 3 contributors are answered first, and the 6 takers are
// answered too. With reciprocity off (no Rank) all 9 are answered alike.
func TestContendedRoleServesContributorsFirst(t *testing.T) {
	for _, reciprocity := range []bool{true, false} {
		s := newRolePeer(t, tinyModel, engine.Options{Threads: 1, Slots: 1, Queue: 16, Context: 2048}, Reasoner)
		sx := exchangeOf(t, s)
		if reciprocity {
			s.srv.Rank = sx.Ledger.Standing
		}
		var askers []*testPeer
		contributor := map[peer.ID]bool{}
		for i := range 9 {
			p := newTestPeer(t, 1)
			p.h.Peerstore().AddAddrs(s.h.ID(), s.h.Addrs(), time.Hour)
			s.h.Peerstore().AddAddrs(p.h.ID(), p.h.Addrs(), time.Hour)
			px := exchangeOf(t, p)
			if i < 3 { // it served s
				contributor[p.h.ID()] = true
				sx.Ack(p.h.ID(), ledger.Item{Kind: ledger.KindMoA, Role: Writer, Tokens: 2000})
			} else { // s served it
				px.Ack(s.h.ID(), ledger.Item{Kind: ledger.KindMoA, Role: Reasoner, Tokens: 3000})
			}
			askers = append(askers, p)
		}
		for deadline := time.Now().Add(10 * time.Second); len(sx.Ledger.Snapshot()) < 9; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the receipts did not arrive: %+v", sx.Ledger.Snapshot())
			}
		}
		// A tenth peer holds the slot while the nine line up.
		blocker := newTestPeer(t, 1)
		blocker.h.Peerstore().AddAddrs(s.h.ID(), s.h.Addrs(), time.Hour)
		bctx, release := context.WithCancel(t.Context())
		started := make(chan struct{})
		var once sync.Once
		go Call(bctx, blocker.h, s.h.ID(), &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "go on"}}, MaxTokens: 1500},
			func(string, string) { once.Do(func() { close(started) }) })
		<-started
		rm := s.srv.Models()[0]
		var mu sync.Mutex
		var order []peer.ID
		took := map[peer.ID]time.Duration{}
		var wg sync.WaitGroup
		start := time.Now()
		for _, p := range askers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := Call(t.Context(), p.h, s.h.ID(), &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "why?"}}, MaxTokens: 8}, nil)
				if err != nil {
					t.Errorf("%s: %v", p.h.ID(), err)
				}
				mu.Lock()
				order = append(order, p.h.ID())
				took[p.h.ID()] = time.Since(start)
				mu.Unlock()
			}()
		}
		for deadline := time.Now().Add(10 * time.Second); rm.Model.Queue().Waiting < 9; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of 9 requests queued", rm.Model.Queue().Waiting)
			}
		}
		release()
		wg.Wait()
		if len(order) != 9 {
			t.Fatalf("%d of 9 answered", len(order))
		}
		var c, f []float64
		for id, d := range took {
			if contributor[id] {
				c = append(c, d.Seconds()*1000)
			} else {
				f = append(f, d.Seconds()*1000)
			}
		}
		slices.Sort(c)
		slices.Sort(f)
		t.Logf("reciprocity %v: contributors answered after %.0f ms (median), free riders after %.0f ms", reciprocity, c[1], f[2])
		if first := order[:3]; reciprocity && !(contributor[first[0]] && contributor[first[1]] && contributor[first[2]]) {
			t.Fatalf("answered first: %v, want the 3 contributors", first)
		}
	}
}

// TestReceiptTokensBounded: a role peer that claims more tokens than it
// can have read or sent gets a receipt for no more than the originator
// can bound: the prompt at one token a byte plus the template's slack,
// the answer at max_tokens and at the pieces of text received.
func TestReceiptTokensBounded(t *testing.T) {
	req := &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "why?"}}, MaxTokens: 50}
	for _, c := range []struct {
		prompt, tokens, pieces int
		want                   int64
	}{
		{30, 20, 20, 50},                         // honest
		{1 << 20, 20, 20, promptSlack + 12 + 20}, // a prompt it cannot have read
		{30, 1 << 20, 40, 30 + 40},               // an answer longer than what arrived
		{30, 1 << 20, 1000, 30 + 50},             // and than max_tokens
		{-5, -5, 3, 0},                           // nonsense counts nothing
	} {
		if got := receiptTokens(req, &Done{PromptTokens: c.prompt, Tokens: c.tokens}, c.pieces); got != c.want {
			t.Errorf("claims %d in, %d out, %d pieces received: receipt for %d tokens, want %d", c.prompt, c.tokens, c.pieces, got, c.want)
		}
	}
}
