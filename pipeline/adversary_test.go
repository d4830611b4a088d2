package pipeline

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
)

func assertBans(t *testing.T, trust *swarm.Trust, liars []peer.ID, honest ...*stagePeer) {
	t.Helper()
	for _, id := range liars {
		if banned, _ := trust.Banned(id); !banned {
			t.Errorf("the liar %s is not banned", short(id.String()))
		}
	}
	for _, p := range honest {
		if banned, why := trust.Banned(p.h.ID()); banned {
			t.Errorf("an honest peer %s is banned: %s", short(p.h.ID().String()), why)
		}
	}
}

func usesPeer(hops []Hop, p string) bool {
	for _, h := range hops {
		if h.Peer == p {
			return true
		}
	}
	return false
}

// TestBadNumbersProven: a liar sends NaN or absurd hidden states on, or a
// token outside the vocabulary back (an infinite logit to a probe).
// The honest hop next to it refuses them naming it; the originator does not
// take that hop's word for it but runs the history through the route hop
// by hop and sees the bad numbers itself (or receives them itself, from
// its first hop): the liar alone is banned, and the text is one machine's.
func TestBadNumbersProven(t *testing.T) {
	const n = 16
	full, cid := modelOf(t, "qwen3", "small", "q8_0")
	want := referenceFile(t, full, question, n)
	for _, tc := range []struct {
		name   string
		layers [2]int // the liar's
		hidden func([]float32)
		result func(*Result)
		proven bool // every peer proven already: not checked, the last hop samples
	}{
		{"nan-hidden", [2]int{2, 6}, nanHidden, nil, false},
		{"huge-hidden", [2]int{2, 6}, hugeHidden, nil, false},
		{"bad-token-behind-an-honest-hop", [2]int{6, 8}, nil, badResult, false},
		{"bad-token-from-the-first-hop-checked", [2]int{0, 8}, nil, badResult, false}, // a second route exists: checked, on tokens too
		{"bad-token-from-the-first-hop", [2]int{0, 8}, nil, badResult, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			origin := newStagePeer(t)
			var honest []*stagePeer
			for _, r := range [][2]int{{0, 2}, {2, 6}, {6, 8}, tc.layers} { // a route, and a spare for the liar's layers
				p := newStagePeer(t)
				p.serveFile(t, full, cid, r[0], r[1])
				honest = append(honest, p)
			}
			l := newLiar(t, full, cid, tc.layers[0], tc.layers[1])
			l.from, l.hidden, l.result = 3, tc.hidden, tc.result
			o := originatorTrusting(t, full, swarm.NewTrust(), origin, append(honest, l.stagePeer)...)
			slowDown(o, cid, tc.layers, honest...) // so the route takes the liar's hop
			if tc.proven {
				for _, p := range append(honest, l.stagePeer) {
					o.View.Trust().Pass(p.h.ID(), swarm.Claim{Model: cid, Start: 0, End: 8})
				}
			}
			var first []Hop
			think := false
			res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy,
				OnTrace: func(ev answer.Trace) {
					if ev.Kind == "route" {
						first = ev.Route
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			if !usesPeer(first, l.h.ID().String()) {
				t.Fatalf("the liar was not on the first route %v", first)
			}
			if !sameTokens(res.Tokens, want) {
				t.Fatalf("tokens differ from one machine:\n got %v\nwant %v", res.Tokens, want)
			}
			if len(res.Reroutes) != 1 {
				t.Fatalf("re-routes: %+v", res.Reroutes)
			}
			rr := res.Reroutes[0]
			if fromFirst := tc.result != nil && tc.layers[0] == 0; fromFirst != strings.Contains(rr.Reason, "outside the vocabulary") {
				t.Errorf("reason %q: a greedy route, checked or not, should fail on its token (behind a hop: on a probe's logits)", rr.Reason)
			}
			if rr.Failed != l.h.ID().String() || !rr.Proven || rr.Evidence != EvidenceCheck || usesPeer(rr.NewRoute, rr.Failed) {
				t.Fatalf("re-route %+v: want the liar proven by this peer's own check and left out", rr)
			}
			assertBans(t, o.View.Trust(), []peer.ID{l.h.ID()}, honest...)
			t.Logf("%s: %s", tc.name, rr.Reason)
		})
	}
}

// TestLiarBlamesHonestPeer: a liar in the middle of a route sends back an
// error frame blaming an honest peer after it, or one before it. Nobody is
// excluded or banned on its word: the originator pings the accused, which
// answers, and re-routes for this generation around the accused and the
// hops that can have made the accusation up, using the accused again
// where nobody else holds its layers; the text is one machine's. With a
// referee, the suspects are checked: the liar, which also computes wrong,
// is proven and banned, and nobody else.
func TestLiarBlamesHonestPeer(t *testing.T) {
	const n = 16
	full, cid := modelOf(t, "qwen3", "small", "q8_0")
	want := referenceFile(t, full, question, n)
	for _, target := range []string{"after", "before", "after-referee"} {
		t.Run(target, func(t *testing.T) {
			origin := newStagePeer(t)
			a, a2, l2, h := newStagePeer(t), newStagePeer(t), newStagePeer(t), newStagePeer(t)
			a.serveFile(t, full, cid, 0, 2)
			a2.serveFile(t, full, cid, 0, 2)
			l2.serveFile(t, full, cid, 2, 4)
			h.serveFile(t, full, cid, 4, 8) // the only holder of [4,8)
			for _, p := range []*stagePeer{a2, l2} {
				p.srv.Local()[0].MsPerLayer = 50 // the spares: used only if need be
			}
			l := newLiar(t, full, cid, 2, 4)
			l.from = 5
			victim := map[string]*stagePeer{"after": h, "before": a, "after-referee": h}[target]
			l.blame = func(open *Open) *WireError {
				for _, rh := range open.Route {
					if rh.Peer == victim.h.ID().String() {
						return &WireError{Code: CodeDownstream, Message: "the next hop could not be reached", Peer: rh.Peer, Start: rh.Start, End: rh.End}
					}
				}
				return nil
			}
			o := originatorTrusting(t, full, swarm.NewTrust(), origin, a, a2, l2, h, l.stagePeer)
			if target == "after-referee" {
				l.hidden = wrongHidden
				o.Referee = refereeFor(t, o, full)
			}
			var accusations []answer.Trace
			think := false
			res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy,
				OnTrace: func(ev answer.Trace) {
					if ev.Kind == "accusation" {
						accusations = append(accusations, ev)
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			if !sameTokens(res.Tokens, want) {
				t.Fatalf("tokens differ from one machine:\n got %v\nwant %v", res.Tokens, want)
			}
			if target == "after-referee" {
				if len(res.Reroutes) != 1 || len(accusations) != 0 {
					t.Fatalf("re-routes %+v, accusations %+v", res.Reroutes, accusations)
				}
				rr := res.Reroutes[0]
				if rr.Failed != l.h.ID().String() || !rr.Proven || rr.Evidence != EvidenceReferee || !usesPeer(rr.NewRoute, h.h.ID().String()) {
					t.Fatalf("re-route %+v: want the liar proven by the referee, and the accused used", rr)
				}
				assertBans(t, o.View.Trust(), []peer.ID{l.h.ID()}, a, a2, l2, h)
				return
			}
			if len(res.Reroutes) != 1 || len(accusations) != 1 {
				t.Fatalf("re-routes %+v, accusations %+v", res.Reroutes, accusations)
			}
			rr := res.Reroutes[0]
			if rr.Proven || rr.Evidence != EvidenceAccusation || !contains(rr.Suspects, l.h.ID().String()) {
				t.Fatalf("re-route %+v: want an unproven accusation with the liar among the suspects", rr)
			}
			if usesPeer(rr.NewRoute, l.h.ID().String()) || !usesPeer(rr.NewRoute, h.h.ID().String()) {
				t.Fatalf("new route %v: want it without the liar, through the only holder of [4,8)", rr.NewRoute)
			}
			if provenFailed(res, victim.h.ID().String()) {
				t.Fatal("the accused was left out")
			}
			assertBans(t, o.View.Trust(), nil, a, a2, l2, h)
			if banned, _ := o.View.Trust().Banned(l.h.ID()); banned {
				t.Fatal("the liar was banned without proof")
			}
			t.Logf("%s: %s accused %s: %s", target, short(l.h.ID().String()), short(accusations[0].Failed), accusations[0].Reason)
		})
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// provenFailed reports whether a generation left p out as proven failed.
func provenFailed(res *answer.Pipeline, p string) bool {
	for _, rr := range res.Reroutes {
		if rr.Failed == p && rr.Proven {
			return true
		}
	}
	return false
}

// TestOnePeerCannotTakeAStage: one identity opens sessions on a stage
// until its share; its further opens wait, a few of them, and beyond
// those it is refused as busy at once, while another peer still gets a
// session.
func TestOnePeerCannotTakeAStage(t *testing.T) {
	full, cid := modelOf(t, "qwen3", "small", "q8_0")
	st := newStagePeer(t)
	st.serveFile(t, full, cid, 4, 8) // 4 slots, queue 16: a share of 2, 4 waiting
	greedyPeer, other := newStagePeer(t), newStagePeer(t)
	for _, p := range []*stagePeer{greedyPeer, other} {
		p.h.Peerstore().AddAddrs(st.h.ID(), st.h.Addrs(), time.Hour)
	}
	open := func(from *stagePeer, session uint64) (network.Stream, *bufio.Reader) {
		s, err := from.h.NewStream(t.Context(), st.h.ID(), ProtocolID)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Reset() })
		o := Open{Session: session, Model: cid, Layers: 8, Hidden: 256, DType: DTypeF32, Index: 1,
			Route: []RouteHop{{Peer: from.h.ID().String(), Start: 0, End: 4}, {Peer: st.h.ID().String(), Start: 4, End: 8}}}
		if err := writeJSON(s, frameOpen, &o); err != nil {
			t.Fatal(err)
		}
		return s, newReader(s)
	}
	answer := func(r *bufio.Reader) (byte, string) {
		typ, body, err := readFrame(r, limitJSON)
		if err != nil {
			t.Fatal(err)
		}
		return typ, string(body)
	}
	st.srv.BorrowedIdle, st.srv.IdleTimeout = time.Second, 2*time.Second
	// The stage is quiet: the greedy peer gets its share and borrows the
	// free slots beyond it.
	for i := range 4 {
		_, r := open(greedyPeer, uint64(i+1))
		if typ, body := answer(r); typ != frameOpened {
			t.Fatalf("open %d on a quiet stage: %d %s", i, typ, body)
		}
	}
	// Now full: its further opens wait within its queue, then are refused.
	var waiting []*bufio.Reader
	for i := range 4 {
		_, r := open(greedyPeer, uint64(10+i))
		waiting = append(waiting, r)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st.srv.gate.mu.Lock()
		n := st.srv.gate.waiting[peerKey{greedyPeer.h.ID().String(), st.srv.Local()[0]}]
		st.srv.gate.mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d opens wait, want 4", n)
		}
	}
	_, r := open(greedyPeer, 99)
	if typ, body := answer(r); typ != frameError || codeOf(t, body) != CodeBusy {
		t.Fatalf("an open beyond the share and its queue: %d %s, want busy", typ, body)
	} else {
		t.Logf("refused: %s", body)
	}
	// Another peer's open gets a slot: the borrowed ones, idle, come back,
	// and the greedy peer's waiting opens do not take them first.
	_, r = open(other, 100)
	if typ, body := answer(r); typ != frameOpened {
		t.Fatalf("another peer's open: %d %s", typ, body)
	}
	st.srv.gate.mu.Lock()
	greedyHeld := st.srv.gate.held[peerKey{greedyPeer.h.ID().String(), st.srv.Local()[0]}]
	st.srv.gate.mu.Unlock()
	if greedyHeld > 3 {
		t.Fatalf("the greedy peer holds %d of 4 slots while another peer got one", greedyHeld)
	}
	_ = waiting
}

func codeOf(t *testing.T, body string) string {
	var we WireError
	if err := decodeJSON([]byte(body), &we); err != nil {
		t.Fatal(err)
	}
	return we.Code
}

// refereeFor is a referee of the tests' own that checks a claim for real:
// a fixed input is run through [0,Start) here, from the full model file,
// the suspect computes [Start,End) from it in a probe, and the result must
// agree with the same layers run here.
func refereeFor(t *testing.T, o *Originator, full string) func(context.Context, peer.ID, swarm.Claim) error {
	m, err := engine.Load(context.Background(), full, engine.Options{Threads: 1, Slots: 2, Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	info := m.Info()
	return func(ctx context.Context, id peer.ID, c swarm.Claim) error {
		tokens := []int32{5, 17, 99, 3, 42, 7, 11, 200}
		run := func(a, b int, hidden []float32) ([]float32, error) {
			s, err := m.NewSession()
			if err != nil {
				return nil, err
			}
			defer s.Close()
			if a == 0 {
				return s.RunRange(ctx, a, b, tokens, nil)
			}
			return s.RunRange(ctx, a, b, nil, hidden)
		}
		var in []float32
		if c.Start > 0 {
			if in, err = run(0, c.Start, nil); err != nil {
				return err
			}
		}
		ref, err := run(c.Start, c.End, in)
		if err != nil {
			return err
		}
		open := Open{Session: 77, Model: c.Model, Layers: info.Layers, Hidden: info.Hidden, DType: DTypeF32, Logits: true,
			From: c.Start, Route: []RouteHop{{Peer: id.String(), Start: c.Start, End: c.End}}}
		if c.End < info.Layers {
			open.Until = c.End
		}
		ch, err := o.openChain(ctx, open)
		if err != nil {
			return err
		}
		defer ch.close()
		res, _, err := ch.stepHidden(ctx, tokens, in, nil)
		if err != nil {
			return err
		}
		row := info.Hidden
		if c.End == info.Layers {
			row = 0
		}
		if ok, diff := agree(ref, res.Logits, row, 1e-3); !ok {
			o.View.Trust().Fail(id, fmt.Sprintf("referee: layers [%d,%d) off by %.3g", c.Start, c.End, diff))
			return fmt.Errorf("%w: layers [%d,%d) off by %.3g", ErrCheckFailed, c.Start, c.End, diff)
		}
		return nil
	}
}

// slowDown makes the originator's ledger hold the peers serving exactly
// layers as measured slow (50 ms a layer), so that routes prefer an
// unmeasured peer (priced at DefaultMsPerLayer) over them: a test's liar.
func slowDown(o *Originator, model string, layers [2]int, peers ...*stagePeer) {
	for _, p := range peers {
		for _, sh := range p.srv.Shards() {
			if sh.Start == layers[0] && sh.End == layers[1] {
				o.View.Trust().Measure(p.h.ID(), swarm.MsPerLayerKey(model), 50)
			}
		}
	}
}

// TestStepFrameBoundedByContext: a peer declaring a step frame larger than
// the session's context could hold is cut off before the stage reads (or
// allocates) any of it.
func TestStepFrameBoundedByContext(t *testing.T) {
	full, cid := modelOf(t, "qwen3", "small", "q8_0")
	st := newStagePeer(t)
	st.serveFile(t, full, cid, 4, 8) // context 1024
	from := newStagePeer(t)
	from.h.Peerstore().AddAddrs(st.h.ID(), st.h.Addrs(), time.Hour)
	s, err := from.h.NewStream(t.Context(), st.h.ID(), ProtocolID)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Reset()
	o := Open{Session: 7, Model: cid, Layers: 8, Hidden: 256, DType: DTypeF32, Index: 1,
		Route: []RouteHop{{Peer: from.h.ID().String(), Start: 0, End: 4}, {Peer: st.h.ID().String(), Start: 4, End: 8}}}
	if err := writeJSON(s, frameOpen, &o); err != nil {
		t.Fatal(err)
	}
	r := newReader(s)
	if typ, body, err := readFrame(r, limitJSON); err != nil || typ != frameOpened {
		t.Fatalf("open: %d %s %v", typ, body, err)
	}
	limit := limitStep(256, 1024)
	if limit >= limitStep(256, 0) {
		t.Fatalf("the context does not bound a step: %d vs %d", limit, limitStep(256, 0))
	}
	var hdr [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(hdr[:], limit+1)
	if _, err := s.Write(append(hdr[:n], frameStep)); err != nil {
		t.Fatal(err)
	}
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("the stage answered a step frame longer than its context allows")
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the stage waits for a frame longer than its context allows")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if active, _ := st.srv.Load(); active == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%d sessions still open", active)
		}
	}
}
