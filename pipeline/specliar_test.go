package pipeline

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
)

// A last hop that accepts every draft in verify steps (honest in plain
// steps and logits probes: the liar speaks the real stage protocol), on
// f32, q8_0 and q4_k weights, asked up to 30 times with default spot
// checks:
//   - with another holder of its layers, it is caught within 3 answers,
//     convicted on its own numbers (asked again alone, its verify token
//     contradicts its own logits) and banned; no honest peer is banned;
//     no answer it ran is poisoned unseen;
//   - with none, every answer names its layers as unchecked, and an
//     originator that requires checked routes refuses the route before
//     the liar sees a step.
//
// Honest speculating routes, every answer checked with a draft that
// disagrees often, ban nobody.
func TestSpeculativeLiarConvicted(t *testing.T) {
	const n, asks = 16, 30
	for _, typ := range []string{"f32", "q8_0", "q4_k"} {
		t.Run(typ, func(t *testing.T) {
			size := "tiny"
			if typ != "f32" {
				size = "small" // q4_k's blocks need the wider shape
			}
			full, cid := modelOf(t, "qwen3", size, typ)
			other := filepath.Join(t.TempDir(), "draft.gguf")
			if err := engine.Synth(context.Background(), other, engine.SynthSpec{Arch: "qwen3", Size: size, Type: typ, Seed: 11}); err != nil {
				t.Fatal(err)
			}
			layers := 4
			if size == "small" {
				layers = 8
			}
			c, c2 := layers/2, layers/4
			think := false
			ask := func(o *Originator, spec bool) (*answer.Pipeline, []answer.Trace, error) {
				var events []answer.Trace
				res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy,
					Speculate: spec, DraftMin: 4, DraftMax: 4, OnTrace: func(ev answer.Trace) { events = append(events, ev) }})
				return res, events, err
			}

			anotherHolder := func(t *testing.T, proven bool) {
				origin := newStagePeer(t)
				first := servingPeers(t, full, cid, [2]int{0, c})
				l := newLiar(t, full, cid, c, layers)
				l.acceptAll = true
				rest := servingPeers(t, full, cid, [2]int{0, c2}, [2]int{c2, layers})
				peers := append(append(first, l.stagePeer), rest...)
				for i, p := range peers { // the liar's route is the cheapest
					p.srv.Local()[0].MsPerLayer = float64(1 + i/2)
				}
				// The honest answer of the liar's route: its plain steps
				// are honest, and nothing checks or credits here.
				plain := originatorTrusting(t, full, nil, origin, peers...)
				want, _, err := ask(plain, false)
				if err != nil {
					t.Fatal(err)
				}
				tr := swarm.NewTrust()
				o := originatorTrusting(t, full, tr, origin, peers...)
				o.SpotCheck = SpotCheck{} // the defaults: 0.1, and every answer through a peer not proven yet
				if proven {               // every peer passed its challenge, the liar too, as a patient liar does
					for _, p := range peers {
						sh := p.srv.Local()[0]
						tr.Pass(p.h.ID(), swarm.Claim{Model: cid, Start: sh.Start, End: sh.End})
					}
				}
				for i, p := range peers { // the liar's route is the cheapest
					o.View.Trust().Measure(p.h.ID(), swarm.MsPerLayerKey(cid), float64(1+i/2))
				}
				o.Drafter = drafterOf(other, nil)
				poisoned, caughtAt := 0, 0
				for i := 1; i <= asks && caughtAt == 0; i++ {
					res, events, err := ask(o, true)
					if err != nil {
						t.Fatalf("ask %d: %v", i, err)
					}
					touched, caught := false, false
					for _, ev := range events {
						touched = touched || usesPeer(ev.Route, l.h.ID().String())
						if ev.Kind == "mismatch" && ev.Failed == l.h.ID().String() && ev.Proven && ev.Evidence == EvidenceVerify {
							caught = true
							t.Logf("ask %d: %s", i, ev.Reason)
						}
					}
					if len(res.Unchecked) != 0 {
						t.Fatalf("ask %d: unchecked %v although other peers hold every layer", i, res.Unchecked)
					}
					if touched && !caught && !sameTokens(res.Tokens, want.Tokens) {
						poisoned++
					}
					if caught {
						caughtAt = i
						if typ == "f32" && !sameTokens(res.Tokens, want.Tokens) {
							t.Fatalf("ask %d: the answer that caught the liar is not the honest one:\n got %v\nwant %v", i, res.Tokens, want.Tokens)
						}
					}
				}
				t.Logf("%s, another holder (proven first: %v): caught and banned at ask %d of %d, %d answers poisoned before", typ,
					proven, caughtAt, asks, poisoned)
				if proven {
					// Checked at the sampling rate only (0.1): how soon
					// is evidence on real traffic's to say (spotcheck.go).
					if caughtAt == 0 {
						return
					}
				} else if caughtAt == 0 || caughtAt > 3 || poisoned > 0 {
					t.Fatalf("caught at ask %d (want ≤ 3), %d poisoned", caughtAt, poisoned)
				}
				assertBans(t, tr, []peer.ID{l.h.ID()}, append(append(first, rest...), origin)...)
				// Banned: the next answer goes around it, speculating.
				res, events, err := ask(o, true)
				if err != nil {
					t.Fatal(err)
				}
				for _, ev := range events {
					if usesPeer(ev.Route, l.h.ID().String()) {
						t.Fatalf("a route through the banned liar: %+v", ev)
					}
				}
				if res.DraftRounds == 0 {
					t.Fatalf("no draft rounds after the ban: %+v", res)
				}
			}
			t.Run("another holder", func(t *testing.T) { anotherHolder(t, false) })
			if typ == "f32" {
				t.Run("another holder, proven first", func(t *testing.T) { anotherHolder(t, true) })
			}

			t.Run("no other holder", func(t *testing.T) {
				origin := newStagePeer(t)
				first := servingPeers(t, full, cid, [2]int{0, c}, [2]int{0, c}) // its first layers have two holders
				l := newLiar(t, full, cid, c, layers)
				l.acceptAll = true
				tr := swarm.NewTrust()
				o := originatorTrusting(t, full, tr, origin, first[0], first[1], l.stagePeer)
				o.SpotCheck = SpotCheck{}
				o.Drafter = drafterOf(other, nil)
				wantRange := Hop{Peer: l.h.ID().String(), Start: c, End: layers}
				for i := 1; i <= 3; i++ {
					res, events, err := ask(o, true)
					if err != nil {
						t.Fatal(err)
					}
					traced := false
					for _, ev := range events {
						traced = traced || ev.Kind == "unchecked" && len(ev.Route) == 1 && ev.Route[0] == wantRange
					}
					if len(res.Unchecked) != 1 || res.Unchecked[0] != wantRange || !traced {
						t.Fatalf("ask %d: unchecked %v (traced %v), want %v", i, res.Unchecked, traced, wantRange)
					}
				}
				o.RequireChecked = true
				steps := l.steps.Load()
				_, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy, Speculate: true})
				var ue *UncheckedError
				if !errors.Is(err, ErrUnchecked) || !errors.As(err, &ue) || len(ue.Ranges) != 1 || ue.Ranges[0] != wantRange {
					t.Fatalf("require_checked: %v, want the range %v refused", err, wantRange)
				}
				if got := l.steps.Load(); got != steps {
					t.Fatalf("the refused route's last hop ran %d steps", got-steps)
				}
				t.Logf("%s, no other holder: every answer unchecked naming %v; require_checked: %v", typ, wantRange, err)
				assertBans(t, tr, nil, first[0], first[1], origin)
			})

			t.Run("honest", func(t *testing.T) {
				origin := newStagePeer(t)
				peers := servingPeers(t, full, cid, [2]int{0, c}, [2]int{c, layers}, [2]int{0, c2}, [2]int{c2, layers})
				tr := swarm.NewTrust()
				o := originatorTrusting(t, full, tr, origin, peers...)
				o.SpotCheck = SpotCheck{Probability: 1}
				for i, p := range peers {
					p.srv.Local()[0].MsPerLayer = float64(1 + i/2)
					o.View.Trust().Measure(p.h.ID(), swarm.MsPerLayerKey(cid), float64(1+i/2))
				}
				checks, rounds := 0, 0
				for i := 1; i <= 10; i++ {
					o.Drafter = drafterOf(other, nil) // a draft that disagrees often, and one that agrees
					if i%2 == 0 {
						o.Drafter = drafterOf(full, nil)
					}
					res, events, err := ask(o, true)
					if err != nil {
						t.Fatal(err)
					}
					for _, ev := range events {
						if ev.Kind == "mismatch" && ev.Proven {
							t.Fatalf("ask %d: an honest peer convicted: %+v", i, ev)
						}
					}
					checks, rounds = checks+res.SpotChecked, rounds+res.DraftRounds
				}
				assertBans(t, tr, nil, append(peers, origin)...)
				if checks == 0 || rounds == 0 {
					t.Fatalf("%d checks over %d draft rounds", checks, rounds)
				}
				t.Logf("%s, honest: %d checked steps over %d draft rounds in 10 answers, nobody banned", typ, checks, rounds)
			})
		})
	}
}
