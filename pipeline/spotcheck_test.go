package pipeline

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/swarm"
)

// TestSpotCheckHonestRoutes: a generation through peers this originator
// has not proven runs on a second route too; two honest routes agree on
// every step (f32 and f16 hidden states, routes cut at other layers), the
// text is one machine's, and afterwards every peer is proven, so the next
// generation is not checked.
func TestSpotCheckHonestRoutes(t *testing.T) {
	const n = 16
	full, cid := modelOf(t, "qwen3", "small", "q8_0")
	want := referenceFile(t, full, question, n)
	for _, dt := range []string{DTypeF32, DTypeF16} {
		t.Run(dt, func(t *testing.T) {
			origin := newStagePeer(t)
			peers := servingPeers(t, full, cid, [2]int{0, 3}, [2]int{3, 8}, [2]int{0, 5}, [2]int{5, 8}) // two routes, cut at other layers
			o := originatorTrusting(t, full, measured(cid, peers), origin, peers...)
			think := false
			var checks []answer.Trace
			req := Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy, DType: dt, OnTrace: func(ev answer.Trace) {
				if ev.Kind == "spot_check" || ev.Kind == "mismatch" {
					checks = append(checks, ev)
				}
			}}
			res, err := o.Generate(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if dt == DTypeF32 && !sameTokens(res.Tokens, want) {
				t.Fatalf("tokens differ from one machine:\n got %v\nwant %v", res.Tokens, want)
			}
			if res.SpotChecked != len(res.Tokens) || res.Mismatches != 0 || len(res.Reroutes) != 0 || len(checks) != 1 {
				t.Fatalf("%d of %d steps checked, %d mismatches, re-routes %+v, trace %+v", res.SpotChecked, len(res.Tokens),
					res.Mismatches, res.Reroutes, checks)
			}
			t.Logf("%s: %d steps checked; the routes' logits differ by at most %.3g", dt, res.SpotChecked, res.SpotMaxDiff)
			if dt == DTypeF32 && res.SpotMaxDiff != 0 {
				t.Fatalf("two f32 routes differ by %g: they should agree bit for bit", res.SpotMaxDiff)
			}
			for _, p := range peers {
				if !o.View.Trust().Proven(p.h.ID()) {
					t.Fatalf("%s is not proven after a checked generation", short(p.h.ID().String()))
				}
			}
			checks = nil
			res, err = o.Generate(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if res.SpotChecked != 0 || len(checks) != 0 {
				t.Fatalf("a generation through proven peers was checked: %d steps, %+v", res.SpotChecked, checks)
			}
		})
	}
}

// TestSpotCheckFindsWrongHiddenStates: a liar returns finite, plausible,
// wrong hidden states (q8_0 weights). The check route disagrees; the
// originator runs the history through both routes layer range by layer
// range and finds the range where they part. With its own copy of the
// layers, a referee, or a third holder of them, it proves the liar, who is
// banned; with none it bans nobody and avoids both disagreeing hops. The
// text is one machine's in every case.
func TestSpotCheckFindsWrongHiddenStates(t *testing.T) {
	const n = 24
	full, cid := modelOf(t, "qwen3", "small", "q8_0")
	want := referenceFile(t, full, question, n)
	for _, judge := range []string{"local", "referee", "third-holder", "undecided"} {
		t.Run(judge, func(t *testing.T) {
			origin := newStagePeer(t)
			if judge == "local" {
				origin.serveFile(t, full, cid, 2, 6)
				origin.srv.Local()[0].MsPerLayer = 1000 // used to referee, never to route unless it must
			}
			var honest []*stagePeer
			ranges := [][2]int{{0, 2}, {0, 2}, {2, 6}, {6, 8}, {6, 8}}
			if judge == "third-holder" {
				ranges = append(ranges, [2]int{2, 6})
			}
			for _, r := range ranges {
				p := newStagePeer(t)
				p.serveFile(t, full, cid, r[0], r[1])
				honest = append(honest, p)
			}
			l := newLiar(t, full, cid, 2, 6)
			l.from, l.hidden = 6, wrongHidden
			o := originatorTrusting(t, full, swarm.NewTrust(), origin, append(honest, l.stagePeer)...)
			slowDown(o, cid, [2]int{2, 6}, honest...) // the primary route takes the liar's hop
			if judge == "referee" {
				o.Referee = refereeFor(t, o, full)
			}
			var mismatches []answer.Trace
			think := false
			res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy,
				OnTrace: func(ev answer.Trace) {
					if ev.Kind == "mismatch" {
						mismatches = append(mismatches, ev)
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			if !sameTokens(res.Tokens, want) {
				t.Fatalf("tokens differ from one machine:\n got %v\nwant %v", res.Tokens, want)
			}
			if len(mismatches) == 0 || res.Mismatches != len(mismatches) {
				t.Fatalf("mismatches: %+v (result says %d)", mismatches, res.Mismatches)
			}
			for _, rr := range res.Reroutes {
				t.Logf("re-route at %d: %s %v proven=%v %s suspects=%d: %s", rr.AtToken, short(rr.Failed), rr.Layers, rr.Proven,
					rr.Evidence, len(rr.Suspects), rr.Reason)
			}
			// Undecided, the liar and the hop it disagreed with are all
			// that hold [2,6): one of them is used again.
			last := res.Reroutes[len(res.Reroutes)-1].NewRoute
			if judge != "undecided" && usesPeer(last, l.h.ID().String()) {
				t.Fatalf("the generation ended on a route through the liar: %v", last)
			}
			liar := l.h.ID().String()
			switch judge {
			case "local", "referee", "third-holder":
				wantEv := map[string]string{"local": EvidenceLocal, "referee": EvidenceReferee, "third-holder": EvidenceMajority}[judge]
				m := mismatches[0]
				if len(mismatches) != 1 || m.Failed != liar || !m.Proven || m.Evidence != wantEv || m.Layers != [2]int{2, 6} {
					t.Fatalf("mismatch %+v: want the liar proven by %s on [2,6)", mismatches, wantEv)
				}
				assertBans(t, o.View.Trust(), []peer.ID{l.h.ID()}, honest...)
			case "undecided":
				for _, m := range mismatches {
					if m.Proven || m.Evidence != EvidenceUndecided || !contains(m.Suspects, liar) || len(m.Suspects) != 2 {
						t.Fatalf("mismatch %+v: want it undecided between the liar and the hop it disagreed with", m)
					}
				}
				assertBans(t, o.View.Trust(), nil, append(honest, l.stagePeer)...)
			}
			t.Logf("%s: %d steps checked, %d mismatches: %s", judge, res.SpotChecked, res.Mismatches, mismatches[0].Reason)
		})
	}
}
