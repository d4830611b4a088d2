package pipeline

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
//   - with none, an originator that requires checked routes refuses the
//     route before the liar sees a step; one that does not answers, each
//     answer naming the liar's layers as unchecked, and its audit (one
//     accepted draft token asked about again) convicts the liar.
//
// A liar proven first (by its challenges) is not spot-checked at once:
// the audit of its first answer catches it.
//
// Honest speculating routes, with a draft that disagrees often and one
// that agrees, ban nobody: ten answers all spot-checked, then ten not
// spot-checked, each audited.
func TestSpeculativeLiarConvicted(t *testing.T) {
	t.Parallel()
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
					touched, caught, audit := false, false, false
					for _, ev := range events {
						touched = touched || usesPeer(ev.Route, l.h.ID().String())
						if ev.Kind == "mismatch" && ev.Failed == l.h.ID().String() && ev.Proven && ev.Evidence == EvidenceVerify {
							caught, audit = true, strings.HasPrefix(ev.Reason, "the answer's audit")
							t.Logf("ask %d: %s", i, ev.Reason)
						}
					}
					if len(res.Unchecked) != 0 {
						t.Fatalf("ask %d: unchecked %v although other peers hold every layer", i, res.Unchecked)
					}
					if touched && !sameTokens(res.Tokens, want.Tokens) {
						poisoned++
					}
					if caught {
						caughtAt = i
						// A spot check catches the liar before it adds a
						// token: the answer is the honest one.
						if typ == "f32" && !audit && !sameTokens(res.Tokens, want.Tokens) {
							t.Fatalf("ask %d: the answer that caught the liar is not the honest one:\n got %v\nwant %v", i, res.Tokens, want.Tokens)
						}
						t.Logf("%s, another holder (proven first: %v): caught by %s at ask %d of %d and banned, %d answers poisoned",
							typ, proven, map[bool]string{false: "a spot check", true: "the answer's audit"}[audit], i, asks, poisoned)
					}
				}
				if caughtAt == 0 || caughtAt > 3 || poisoned > 3 {
					t.Fatalf("caught at ask %d, %d poisoned: want caught within 3 asks, no more poisoned", caughtAt, poisoned)
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
			t.Run("another holder, proven first", func(t *testing.T) { anotherHolder(t, true) })

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
				// Required checked: refused before the liar sees a step.
				o.RequireChecked = true
				_, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy, Speculate: true})
				var ue *UncheckedError
				if !errors.Is(err, ErrUnchecked) || !errors.As(err, &ue) || len(ue.Ranges) != 1 || ue.Ranges[0] != wantRange {
					t.Fatalf("require_checked: %v, want the range %v refused", err, wantRange)
				}
				if got := l.steps.Load(); got != 0 {
					t.Fatalf("the refused route's last hop ran %d steps", got)
				}
				t.Logf("%s, no other holder, require_checked: %v", typ, err)
				// Not required: the answer says which layers nobody checked;
				// its audit convicts the liar, which no route then has.
				o.RequireChecked = false
				for i := 1; ; i++ {
					res, events, err := ask(o, true)
					if err != nil {
						banned, _ := tr.Banned(l.h.ID())
						var gap *GapError
						if !banned || !errors.As(err, &gap) {
							t.Fatalf("ask %d: %v (liar banned: %v)", i, err, banned)
						}
						t.Logf("%s, no other holder: the liar convicted by an answer's audit at ask %d; then: %v", typ, i-1, err)
						break
					}
					traced, caught := false, false
					for _, ev := range events {
						traced = traced || ev.Kind == "unchecked" && len(ev.Route) == 1 && ev.Route[0] == wantRange
						caught = caught || ev.Kind == "mismatch" && ev.Failed == l.h.ID().String() && ev.Proven && ev.Evidence == EvidenceVerify
					}
					if len(res.Unchecked) != 1 || res.Unchecked[0] != wantRange || !traced {
						t.Fatalf("ask %d: unchecked %v (traced %v), want %v", i, res.Unchecked, traced, wantRange)
					}
					if !caught && i >= 3 {
						t.Fatalf("the liar not caught within %d answers", i)
					}
				}
				assertBans(t, tr, []peer.ID{l.h.ID()}, first[0], first[1], origin)
			})

			t.Run("honest", func(t *testing.T) {
				origin := newStagePeer(t)
				peers := servingPeers(t, full, cid, [2]int{0, c}, [2]int{c, layers}, [2]int{0, c2}, [2]int{c2, layers})
				tr := measured(cid, peers)
				o := originatorTrusting(t, full, tr, origin, peers...)
				o.SpotCheck = SpotCheck{Probability: 1}
				// Not a test of hang detection: on a loaded machine a ping
				// late by half a second would call an honest peer hung and
				// leave its route out of the checks.
				o.Progress = swarm.Progress{ProbeTimeout: 10 * time.Second}
				// Ten answers spot-checked, then (every peer proven by
				// them) ten at no spot check at all, each audited.
				checks, rounds, audits := 0, 0, 0
				var lost []string // why drawn answers went uncompared
				for i := 1; i <= 20; i++ {
					if i == 11 {
						o.SpotCheck = SpotCheck{Probability: -1}
					}
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
					if i > 10 && res.DraftAccepted > 0 && (res.SpotChecked != 0 || res.VerifyAudits != 1) {
						t.Fatalf("ask %d: %d steps checked, %d audits of %d accepted drafts", i, res.SpotChecked, res.VerifyAudits, res.DraftAccepted)
					}
					if i <= 10 && res.SpotChecked == 0 && res.CheckLost == nil {
						t.Fatalf("ask %d: drawn for a check, nothing compared, and the answer does not say so", i)
					}
					if res.CheckLost != nil {
						lost = append(lost, fmt.Sprintf("ask %d: %d steps: %s", i, res.CheckLost.Steps, res.CheckLost.Reason))
					}
					checks, rounds, audits = checks+res.SpotChecked, rounds+res.DraftRounds, audits+res.VerifyAudits
				}
				o.Audit = -1 // none: nothing asked again
				o.Drafter = drafterOf(full, nil)
				res, _, err := ask(o, true)
				if err != nil {
					t.Fatal(err)
				}
				if res.DraftAccepted == 0 || res.VerifyAudits != 0 {
					t.Fatalf("no audits: %d audits of %d accepted", res.VerifyAudits, res.DraftAccepted)
				}
				assertBans(t, tr, nil, append(peers, origin)...)
				if checks == 0 || rounds == 0 || audits == 0 {
					t.Fatalf("%d checks over %d draft rounds, %d audits; checks lost: %v", checks, rounds, audits, lost)
				}
				t.Logf("%s, honest: %d checked steps over %d draft rounds and %d audits in 20 answers, nobody banned; checks lost: %v",
					typ, checks, rounds, audits, lost)
			})
		})
	}
}
