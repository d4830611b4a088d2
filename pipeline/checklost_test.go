package pipeline

import (
	"fmt"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/swarm"
)

// TestCheckLostIsMarked: an answer drawn for a spot check whose check
// route cannot be opened, or fails halfway, says how many of its steps went
// uncompared and why (answer.Pipeline.CheckLost), rather than reading as
// an unchecked answer that was never drawn. Its text is still one
// machine's, and the steps nobody compared credit nobody's probation.
func TestCheckLostIsMarked(t *testing.T) {
	const n = 12
	full, cid := modelOf(t, "qwen3", "small", "q8_0")
	want := referenceFile(t, full, question, n)
	think := false
	setup := func(t *testing.T) (*Originator, []*stagePeer) {
		origin := newStagePeer(t)
		peers := servingPeers(t, full, cid, [2]int{0, 3}, [2]int{3, 8}, [2]int{0, 5}, [2]int{5, 8}) // two routes, cut at other layers
		o := originatorTrusting(t, full, measured(cid, peers), origin, peers...)
		o.SpotCheck = SpotCheck{Probability: 1}
		return o, peers
	}

	t.Run("check route cannot open", func(t *testing.T) {
		o, peers := setup(t)
		peers[3].h.Close() // gone, its record still in the table: the check route's last hop
		res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy})
		if err != nil {
			t.Fatal(err)
		}
		if !sameTokens(res.Tokens, want) {
			t.Fatalf("tokens differ from one machine:\n got %v\nwant %v", res.Tokens, want)
		}
		if res.SpotChecked != 0 || res.CheckLost == nil || res.CheckLost.Steps != len(res.Tokens) ||
			!strings.Contains(res.CheckLost.Reason, "check route") {
			t.Fatalf("%d steps checked, check lost %+v, want all %d lost", res.SpotChecked, res.CheckLost, len(res.Tokens))
		}
		t.Logf("nothing checked, %d steps lost: %s", res.CheckLost.Steps, res.CheckLost.Reason)
		for _, p := range peers[:2] {
			if got := o.View.Trust().Checked(p.h.ID()); got != 0 {
				t.Fatalf("%s credited %d checked answers by an answer nobody checked", short(p.h.ID().String()), got)
			}
		}
	})

	t.Run("check route fails", func(t *testing.T) {
		o, peers := setup(t)
		tokens := 0
		res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy,
			OnToken: func(string) {
				if tokens++; tokens == 4 { // the check route's last hop goes away
					peers[3].h.Close()
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		if !sameTokens(res.Tokens, want) {
			t.Fatalf("tokens differ from one machine:\n got %v\nwant %v", res.Tokens, want)
		}
		if res.SpotChecked == 0 || res.CheckLost == nil || res.SpotChecked+res.CheckLost.Steps != len(res.Tokens) ||
			!strings.Contains(res.CheckLost.Reason, "check route") {
			t.Fatalf("%d steps checked, check lost %+v, of %d tokens: want the steps after the check route failed lost", res.SpotChecked,
				res.CheckLost, len(res.Tokens))
		}
		t.Logf("%d steps checked, then %d lost: %s", res.SpotChecked, res.CheckLost.Steps, res.CheckLost.Reason)
	})

	t.Run("checked whole", func(t *testing.T) {
		o, _ := setup(t)
		res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy})
		if err != nil {
			t.Fatal(err)
		}
		if res.SpotChecked != len(res.Tokens) || res.CheckLost != nil {
			t.Fatalf("%d of %d steps checked, check lost %+v", res.SpotChecked, len(res.Tokens), res.CheckLost)
		}
	})
}

// TestDrawnCheckTakesACheckableRoute: when the cheapest route mixes the
// holders two disjoint routes would each need ([0,3) of one pair, [3,5)
// and [5,8) of the other), no second route over other peers is left to
// check it on; a generation drawn for a check takes the cheapest route
// that leaves one instead, and is checked whole. Undrawn, it takes the
// cheapest.
func TestDrawnCheckTakesACheckableRoute(t *testing.T) {
	const n = 12
	full, cid := modelOf(t, "qwen3", "small", "q8_0")
	want := referenceFile(t, full, question, n)
	think := false
	origin := newStagePeer(t)
	peers := servingPeers(t, full, cid, [2]int{0, 3}, [2]int{3, 8}, [2]int{0, 5}, [2]int{5, 8})
	// [0,3) on the first, [3,5) and [5,8) on the others: 3+4+6 = 13 ms a
	// step, against 16 ms for the second pair alone and 253 for the first.
	tr := priced(cid, peers, 1, 50, 2, 2)
	for _, p := range peers { // proven: undrawn, nothing is checked
		sh := p.srv.Shards()[0]
		tr.Pass(p.h.ID(), swarm.Claim{Model: cid, Start: sh.Start, End: sh.End})
	}
	o := originatorTrusting(t, full, tr, origin, peers...)
	peerOf := func(hops []Hop) []string {
		var out []string
		for _, h := range hops {
			for i, p := range peers {
				if p.h.ID().String() == h.Peer {
					out = append(out, fmt.Sprintf("peer %d [%d,%d)", i, h.Start, h.End))
				}
			}
		}
		return out
	}
	for _, drawn := range []bool{false, true} {
		o.SpotCheck = SpotCheck{Probability: -1, Probation: -1}
		if drawn {
			o.SpotCheck = SpotCheck{Probability: 1}
		}
		var route []Hop
		res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy,
			OnTrace: func(ev answer.Trace) {
				if ev.Kind == "route" && route == nil {
					route = ev.Route
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		if !sameTokens(res.Tokens, want) {
			t.Fatalf("drawn %v: tokens differ from one machine:\n got %v\nwant %v", drawn, res.Tokens, want)
		}
		if !drawn {
			if len(route) != 3 || route[0].Peer != peers[0].h.ID().String() || res.SpotChecked != 0 {
				t.Fatalf("undrawn: route %v (%d steps checked), want the cheapest, over three hops", peerOf(route), res.SpotChecked)
			}
			continue
		}
		if res.CheckLost != nil || res.SpotChecked != len(res.Tokens) {
			t.Fatalf("drawn: %d of %d steps checked, check lost %+v (route %v)", res.SpotChecked, len(res.Tokens), res.CheckLost, peerOf(route))
		}
		if len(route) != 2 || route[0].Peer != peers[2].h.ID().String() || route[1].Peer != peers[3].h.ID().String() {
			t.Fatalf("drawn: route %v, want the second pair's, which leaves the first pair to check it", peerOf(route))
		}
		t.Logf("drawn for a check: route %v instead of the cheapest, %d steps checked", peerOf(route), res.SpotChecked)
	}
}
