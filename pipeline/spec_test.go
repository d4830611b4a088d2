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
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

// Speculative decoding through a route: verify steps cross every hop, the
// last stage returns its greedy choice after each position, and the next
// step drops the rejected positions on every stage. The answer is the
// route's plain greedy answer, with a draft that agrees (the same model)
// and one that does not (other weights, same vocabulary), over 2 and 3
// stages, for each architecture; after it the stages hold exactly the
// accepted positions (a plain step then goes on as on the plain route).
func TestSpeculativeRoute(t *testing.T) {
	for _, arch := range []string{"qwen3", "qwen2", "llama", "gemma3", "mistral3", "qwen3moe", "gptoss", "gemma2", "olmo3", "deepseek2", "glm4moelite", "llama4"} {
		routes := [][]int{{0, 2, 4}, {0, 1, 3, 4}}
		if arch == "gemma3" { // six layers, the last global: rejected drafts leave sliding-window caches
			routes = [][]int{{0, 3, 6}, {0, 1, 5, 6}}
		}
		for _, cuts := range routes {
			t.Run(fmt.Sprint(arch, cuts), func(t *testing.T) {
				full, cid := model(t, arch)
				o, ref, hops := cutRoute(t, full, cid, cuts)
				if len(hops) != len(cuts)-1 {
					t.Fatalf("route of %d hops, want %d", len(hops), len(cuts)-1)
				}
				open := func(s engine.Sampling, verify bool) *chain {
					op := o.newOpen(ref, hops, Request{DType: DTypeF32, Sampling: s})
					op.Verify = verify
					c, err := o.openChain(t.Context(), op)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(c.close)
					return c
				}
				prompt := make([]int32, 12)
				for i := range prompt {
					prompt[i] = int32(i*37%200 + 5)
				}
				const n = 24
				// plain: one position per step
				plain := open(greedy, false)
				res, _, err := plain.step(t.Context(), prompt, nil)
				if err != nil {
					t.Fatal(err)
				}
				want := []int32{res.Token}
				for len(want) < n+1 {
					if res, _, err = plain.step(t.Context(), want[len(want)-1:], nil); err != nil {
						t.Fatal(err)
					}
					want = append(want, res.Token)
				}
				other := filepath.Join(t.TempDir(), "other.gguf")
				if err := engine.Synth(context.Background(), other, engine.SynthSpec{Arch: arch, Size: "tiny", Type: "f32", Seed: 11}); err != nil {
					t.Fatal(err)
				}
				for _, d := range []struct {
					name, file string
					agree      bool
				}{{"same model", full, true}, {"other weights", other, false}} {
					dm, err := engine.Load(context.Background(), d.file, engine.Options{Threads: 1, Slots: 1, Context: 256,
						Isolated: true})
					if err != nil {
						t.Fatal(err)
					}
					ds, err := dm.NewSession()
					if err != nil {
						t.Fatal(err)
					}
					c := open(greedy, true)
					var got []int32
					st, err := engine.Speculate(t.Context(), &chainSpec{c: c}, engine.SessionSpec(ds, engine.SamplerOptions{RepeatPenalty: penalty}), prompt,
						engine.SpecOptions{K: 3, MaxK: 5, MaxTokens: n, OnToken: func(tok int32) bool { got = append(got, tok); return true }})
					ds.Close()
					dm.Close()
					if err != nil {
						t.Fatalf("%s: %v", d.name, err)
					}
					if !sameTokens(got, want[:n]) {
						t.Fatalf("%s: speculative %v\nplain %v", d.name, got, want[:n])
					}
					if d.agree && st.Accepted*10 < st.Proposed*9 {
						t.Fatalf("%s: %d of %d accepted", d.name, st.Accepted, st.Proposed)
					}
					if !d.agree && st.Accepted*2 > st.Proposed {
						t.Fatalf("%s: %d of %d accepted", d.name, st.Accepted, st.Proposed)
					}
					// The stages hold the prompt and the answer but its last
					// token: a plain step of that token gives plain's next.
					if c.pos != len(prompt)+n-1 {
						t.Fatalf("%s: route at position %d, want %d", d.name, c.pos, len(prompt)+n-1)
					}
					r, _, err := c.step(t.Context(), got[n-1:], nil)
					if err != nil || r.Token != want[n] {
						t.Fatalf("%s: the step after the answer gave %v (%v), plain %d", d.name, r, err, want[n])
					}
					t.Logf("%s: %d of %d drafts accepted, %d route steps for %d tokens", d.name, st.Accepted, st.Proposed, st.Rounds+1, n)
					c.close() // a stage holds few sessions per peer: free its place
				}
				// A verify step longer than a draft can make is refused (the
				// last hop would hold every position's logits), and the
				// session stays usable.
				long := open(greedy, true)
				_, _, err = long.verify(t.Context(), make([]int32, engine.MaxSpecK+2), nil)
				var se *StageError
				if !errors.As(err, &se) || se.Code != CodeBadFrame {
					t.Fatalf("verify of %d positions: %v", engine.MaxSpecK+2, err)
				}
				if _, _, err := long.step(t.Context(), prompt, nil); err != nil {
					t.Fatalf("the session after the refused verify step: %v", err)
				}
				long.close() // a stage holds few sessions per peer: free its place
				// A session not opened for verify steps refuses them, and
				// stays usable; a greedy one refuses draft distributions.
				_, _, err = plain.verify(t.Context(), want[n:n+1], nil)
				if !errors.As(err, &se) || se.Code != CodeBadFrame {
					t.Fatalf("verify on a plain session: %v", err)
				}
				if _, _, err := plain.step(t.Context(), want[n:n+1], nil); err != nil {
					t.Fatalf("the plain session after the refused verify step: %v", err)
				}
				g := open(greedy, true)
				_, _, err = g.verify(t.Context(), prompt[:2], []engine.Dist{{IDs: []int32{prompt[1]}, P: []float32{1}}})
				if !errors.As(err, &se) || se.Code != CodeBadFrame {
					t.Fatalf("draft distributions on a greedy verify session: %v", err)
				}
				if _, _, err := g.step(t.Context(), prompt, nil); err != nil {
					t.Fatalf("the session after the refused verify step: %v", err)
				}
			})
		}
	}
}

// Sampled speculation through a route: the last hop decides each draft
// token by the speculative sampling rule with the session's seed, so the
// route's answer is exactly what the same target deciding locally gives
// for the same draft (whose distribution tests in the engine show to be
// the target's). The draft is the same model sampling colder: it agrees
// often, not always. Through Originator.Generate, a sampled speculative
// answer repeats with its seed.
func TestSpeculativeSampled(t *testing.T) {
	const n = 32
	full, cid := model(t, "qwen3")
	o, ref, hops := cutRoute(t, full, cid, []int{0, 2, 4})
	m, err := engine.Load(context.Background(), full, engine.Options{Threads: 1, Slots: 2, Context: 256, Isolated: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	prompt := make([]int32, 10)
	for i := range prompt {
		prompt[i] = int32(i*53%200 + 3)
	}
	s := engine.Sampling{Temperature: 1.2, TopK: 30, RepeatPenalty: 1.1, Seed: 21}
	run := func(target engine.SpecModel) ([]int32, engine.SpecStats) {
		ds, err := m.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer ds.Close()
		var got []int32
		st, err := engine.Speculate(t.Context(), target, engine.SessionDraft(ds, engine.SamplerOptions{Temperature: 0.7, TopK: 10, Seed: 4}),
			prompt, engine.SpecOptions{K: 3, MaxK: 5, MaxTokens: n, OnToken: func(tok int32) bool { got = append(got, tok); return true }})
		if err != nil {
			t.Fatal(err)
		}
		return got, st
	}
	op := o.newOpen(ref, hops, Request{DType: DTypeF32, Sampling: s})
	op.Verify = true
	c, err := o.openChain(t.Context(), op)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	routed, rst := run(&chainSpec{c: c})
	ls, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	local, lst := run(engine.SessionSpec(ls, s.Options()))
	if !sameTokens(routed, local) || rst != lst {
		t.Fatalf("route %v (%+v)\nlocal %v (%+v)", routed, rst, local, lst)
	}
	if rst.Accepted == 0 || rst.Accepted == rst.Proposed {
		t.Fatalf("%d of %d proposals accepted: the test needs a draft that agrees sometimes", rst.Accepted, rst.Proposed)
	}
	t.Logf("%d of %d drafts accepted in %d rounds", rst.Accepted, rst.Proposed, rst.Rounds)

	o.Drafter = drafterOf(full, nil)
	think := false
	var answers [][]int32
	for range 2 {
		res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: s, Speculate: true, DraftMin: 4, DraftMax: 4})
		if err != nil {
			t.Fatal(err)
		}
		if res.DraftRounds == 0 || res.Drafted == 0 || len(res.Tokens) != n {
			t.Fatalf("%d tokens, %d draft rounds, %d drafted", len(res.Tokens), res.DraftRounds, res.Drafted)
		}
		answers = append(answers, res.Tokens)
	}
	if !sameTokens(answers[0], answers[1]) {
		t.Fatalf("the same seed gave\n%v\n%v", answers[0], answers[1])
	}
}

// A speculating generation gives one machine's greedy tokens: the draft's
// rounds show in the trace and the result; a stage killed mid-answer is
// re-routed around (a replay of the answer so far), and the answer goes on
// speculating on the new route, still the same tokens.
func TestSpeculativeGenerate(t *testing.T) {
	for _, arch := range []string{"qwen3", "llama"} {
		t.Run(arch, func(t *testing.T) {
			const n = 32
			full, cid := model(t, arch)
			want := reference(t, arch, question, n)
			origin := newStagePeer(t)
			ps := servingPeers(t, full, cid, [2]int{0, 1}, [2]int{1, 3}, [2]int{3, 4}, [2]int{1, 3})
			a, mid, b, spare := ps[0], ps[1], ps[2], ps[3]
			fail := failable(t, "kill", mid, spare)
			o := originatorForFile(t, full, origin, a, mid, b, spare)
			drafters := 0
			o.Drafter = drafterOf(full, func(d engine.SpecModel) engine.SpecModel { drafters++; return d })
			for _, kill := range []bool{false, true} {
				var failing map[string]func()
				if kill {
					failing = fail
				}
				req, events := tracedSpec(n, failing)
				res, err := o.Generate(t.Context(), req)
				if err != nil {
					t.Fatal(err)
				}
				if !sameTokens(res.Tokens, want) {
					t.Fatalf("kill %v: speculative tokens differ from one machine:\n got %v\nwant %v", kill, res.Tokens, want)
				}
				rounds, after := 0, 0
				for _, ev := range *events {
					if ev.Kind == "draft" {
						rounds++
						if len(res.Reroutes) > 0 && ev.AtToken > res.Reroutes[0].AtToken {
							after++
						}
					}
				}
				if rounds == 0 || rounds != res.DraftRounds || res.DraftAccepted*10 < res.Drafted*8 {
					t.Fatalf("kill %v: %d draft events, result: %d rounds, %d of %d accepted", kill, rounds, res.DraftRounds,
						res.DraftAccepted, res.Drafted)
				}
				if res.DraftRounds*2 > n {
					t.Fatalf("kill %v: %d verify steps for %d tokens", kill, res.DraftRounds, n)
				}
				// The first token, then each round's accepted drafts and the
				// route's own: no token counted past the answer's end.
				if !kill && 1+res.DraftAccepted+res.DraftRounds != len(res.Tokens) {
					t.Fatalf("%d tokens from the prompt's step and %d rounds accepting %d drafts", len(res.Tokens),
						res.DraftRounds, res.DraftAccepted)
				}
				// Verify rounds count in each hop's per-token times.
				for _, h := range res.Hops {
					if h.ComputeMS <= 0 {
						t.Fatalf("kill %v: hop %+v has no compute time", kill, h)
					}
				}
				if kill && (len(res.Reroutes) != 1 || after == 0) {
					t.Fatalf("after a killed stage: %d re-routes, %d draft rounds after it", len(res.Reroutes), after)
				}
				t.Logf("kill %v: %d of %d drafts accepted in %d rounds; re-routes %d", kill, res.DraftAccepted, res.Drafted,
					res.DraftRounds, len(res.Reroutes))
			}
			if drafters != 2 {
				t.Fatalf("%d drafts for 2 generations", drafters)
			}
		})
	}
}

// A draft that fails mid-answer stops drafting; the answer goes on plainly
// on the same route, still one machine's tokens, and no hop is blamed.
func TestSpeculativeDraftFails(t *testing.T) {
	const n = 24
	full, cid := model(t, "qwen3")
	want := reference(t, "qwen3", question, n)
	o, _, _ := cutRoute(t, full, cid, []int{0, 2, 4})
	o.Drafter = drafterOf(full, func(d engine.SpecModel) engine.SpecModel { return &failing{SpecModel: d, after: 6} })
	think := false
	res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy, Speculate: true, DraftMin: 4, DraftMax: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !sameTokens(res.Tokens, want) || len(res.Reroutes) != 0 || res.DraftRounds == 0 || res.Drafted > 6 {
		t.Fatalf("tokens %v (want %v), %d re-routes, %d drafted in %d rounds", res.Tokens, want, len(res.Reroutes),
			res.Drafted, res.DraftRounds)
	}
}

// failing is a draft whose model fails after some proposals.
type failing struct {
	engine.SpecModel
	after int
}

func (f *failing) Prefill(ctx context.Context, tokens []int32) (int32, engine.Dist, error) {
	if f.after == 0 {
		return -1, engine.Dist{}, errors.New("the draft's device went away")
	}
	f.after--
	return f.SpecModel.Prefill(ctx, tokens)
}

// A round that a later hop has no room for (its context ends before the
// draft would) goes back to plain decoding on the same route, replaying
// the answer: the answer runs to the end the plain one reaches, with the
// same tokens, and no hop is blamed.
func TestSpeculativeContextEnd(t *testing.T) {
	const n = 20
	full, cid := model(t, "qwen3")
	want := reference(t, "qwen3", question, n)
	think := false
	// The prompt's length, from a route with room to spare.
	o, _, _ := cutRoute(t, full, cid, []int{0, 4})
	res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: 1, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	room := res.PromptTokens + n - 1 // the plain answer's positions, exactly
	origin, a, b := newStagePeer(t), newStagePeer(t), newStagePeer(t)
	a.serveFile(t, full, cid, 0, 2)
	out := filepath.Join(t.TempDir(), "tail.gguf")
	if _, err := shards.Slice(full, out, 2, 4); err != nil {
		t.Fatal(err)
	}
	sh, err := LoadShard(context.Background(), out, cid, 2, 4, engine.Options{Threads: 1, Slots: 2, Context: room, Isolated: true})
	if err != nil {
		t.Fatal(err)
	}
	b.srv.Add(sh)
	o = originatorForFile(t, full, origin, a, b)
	o.Drafter = drafterOf(full, nil)
	res, err = o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy, Speculate: true, DraftMin: 4, DraftMax: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !sameTokens(res.Tokens, want) || len(res.Reroutes) != 0 || res.DraftRounds == 0 {
		t.Fatalf("tokens %v (want %v), %d re-routes, %d draft rounds", res.Tokens, want, len(res.Reroutes), res.DraftRounds)
	}
}

// drafterOf drafts with the model file full, loaded for each generation,
// through wrap when set.
func drafterOf(full string, wrap func(engine.SpecModel) engine.SpecModel) func(context.Context, ModelRef, *engine.Tokenizer, engine.Sampling) (engine.SpecModel, func(), error) {
	return func(ctx context.Context, _ ModelRef, _ *engine.Tokenizer, s engine.Sampling) (engine.SpecModel, func(), error) {
		m, err := engine.Load(ctx, full, engine.Options{Threads: 1, Slots: 1, Context: 512, Isolated: true})
		if err != nil {
			return nil, nil, err
		}
		sess, err := m.NewSession()
		if err != nil {
			m.Close()
			return nil, nil, err
		}
		var d engine.SpecModel = engine.SessionDraft(sess, s.Options())
		if wrap != nil {
			d = wrap(d)
		}
		return d, func() { sess.Close(); m.Close() }, nil
	}
}

// In the field: q8_0 weights, a middle stage that hangs mid-answer (its
// link freezes, as under SIGSTOP), and a liar that sends NaN hidden states
// on, in verify steps as in any. The hung stage is found and routed around
// and drafting goes on; the liar is proven by the next hop's checks and
// left out. Tokens are one machine's greedy ones either way. (A stage that
// predates verify steps refuses the open: the route is opened again plain,
// no hop blamed, no drafting, the same tokens.)
func TestSpeculativeInTheField(t *testing.T) {
	const n = 24
	full, cid := modelOf(t, "qwen3", "small", "q8_0")
	want := referenceFile(t, full, question, n)
	think := false
	t.Run("hung", func(t *testing.T) {
		origin := newStagePeer(t)
		ps := servingPeers(t, full, cid, [2]int{0, 2}, [2]int{2, 6}, [2]int{6, 8}, [2]int{2, 6})
		a, mid, b, spare := ps[0], ps[1], ps[2], ps[3]
		fail := failable(t, "hang", mid, spare)
		o := originatorForFile(t, full, origin, a, mid, b, spare)
		o.Progress = swarm.Progress{Floor: 500 * time.Millisecond, ProbeTimeout: 500 * time.Millisecond}
		o.Drafter = drafterOf(full, nil)
		_, onTrace, onToken := failHopAt(n/2, 1, fail)
		res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy,
			Speculate: true, DraftMin: 4, DraftMax: 4, OnTrace: onTrace, OnToken: onToken})
		if err != nil {
			t.Fatal(err)
		}
		if !sameTokens(res.Tokens, want) || len(res.Reroutes) != 1 || !strings.Contains(res.Reroutes[0].Reason, "hung") ||
			res.DraftRounds == 0 {
			t.Fatalf("tokens %v (want %v), re-routes %+v, %d draft rounds", res.Tokens, want, res.Reroutes, res.DraftRounds)
		}
		t.Logf("hung stage found in %.0f ms; %d of %d drafts accepted in %d rounds", res.Reroutes[0].DetectMS,
			res.DraftAccepted, res.Drafted, res.DraftRounds)
	})
	t.Run("liar", func(t *testing.T) {
		origin := newStagePeer(t)
		honest := servingPeers(t, full, cid, [2]int{0, 2}, [2]int{2, 6}, [2]int{6, 8}, [2]int{2, 6})
		l := newLiar(t, full, cid, 2, 6)
		l.from, l.hidden = 3, nanHidden
		o := originatorTrusting(t, full, swarm.NewTrust(), origin, append(honest, l.stagePeer)...)
		o.Drafter = drafterOf(full, nil)
		slowDown(o, cid, [2]int{2, 6}, honest...)
		res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy, Speculate: true, DraftMin: 4, DraftMax: 4})
		if err != nil {
			t.Fatal(err)
		}
		if !sameTokens(res.Tokens, want) || len(res.Reroutes) != 1 || res.Reroutes[0].Failed != l.h.ID().String() || !res.Reroutes[0].Proven {
			t.Fatalf("tokens %v (want %v), re-routes %+v", res.Tokens, want, res.Reroutes)
		}
		assertBans(t, o.View.Trust(), []peer.ID{l.h.ID()}, honest...)
		t.Logf("liar proven: %s; %d draft rounds", res.Reroutes[0].Reason, res.DraftRounds)
	})
	t.Run("old stage", func(t *testing.T) {
		origin, a := newStagePeer(t), newStagePeer(t)
		a.serveFile(t, full, cid, 0, 4)
		l := newLiar(t, full, cid, 4, 8)
		l.old, l.from = true, 1<<40 // honest, but knows no verify steps
		o := originatorForFile(t, full, origin, a, l.stagePeer)
		o.Drafter = drafterOf(full, nil)
		res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy, Speculate: true, DraftMin: 4, DraftMax: 4})
		if err != nil {
			t.Fatal(err)
		}
		if !sameTokens(res.Tokens, want) || len(res.Reroutes) != 0 || res.DraftRounds != 0 {
			t.Fatalf("tokens %v (want %v), re-routes %+v, %d draft rounds", res.Tokens, want, res.Reroutes, res.DraftRounds)
		}
	})
}

// A spot-checked speculating generation speculates on both routes and
// compares their tokens round by round: honest routes agree (f32: token
// for token) and the answer is one machine's. A last hop that lies in
// verify steps only (it accepts every proposal), honest in plain ones, is
// caught at the first round the routes disagree: drafting stops, both
// routes are opened again with logits, which agree, and contradict the
// liar's verify tokens; asked again alone, its verify token contradicts
// its own logits: it alone is convicted and banned, and the answer is
// still one machine's. A primary hop killed mid-answer hands
// the answer to the check route, which ran the failed round as a verify
// step: it runs the step again plainly, and the answer is still one
// machine's. A primary stage that refuses verify steps (an older version)
// makes both routes run plainly with logits, every step checked.
func TestSpeculativeSpotCheck(t *testing.T) {
	const n = 24
	full, cid := model(t, "qwen3")
	want := reference(t, "qwen3", question, n)
	other := filepath.Join(t.TempDir(), "other.gguf")
	if err := engine.Synth(context.Background(), other, engine.SynthSpec{Arch: "qwen3", Size: "tiny", Type: "f32", Seed: 11}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"honest", "liar in verify steps", "failover", "old stage"} {
		lying := c == "liar in verify steps"
		t.Run(c, func(t *testing.T) {
			origin := newStagePeer(t)
			var peers []*stagePeer
			cuts := [][2]int{{0, 2}, {2, 4}, {0, 1}, {1, 4}} // two routes, cut at other layers
			var l *liar
			for i, r := range cuts {
				if (lying || c == "old stage") && i == 1 {
					l = newLiar(t, full, cid, r[0], r[1])
					l.acceptAll, l.old = lying, !lying
					if !lying {
						l.from = 1 << 40 // honest, but knows no verify steps
					}
					peers = append(peers, l.stagePeer)
					continue
				}
				peers = append(peers, servingPeers(t, full, cid, r)...)
			}
			o := originatorTrusting(t, full, measured(cid, peers), origin, peers...)
			draft := full
			if lying {
				draft = other // it rarely agrees: the liar's "all accepted" shows at once
			}
			o.Drafter = drafterOf(draft, nil)
			var failing map[string]func()
			if c == "failover" {
				failing = failable(t, "kill", peers[1])
			}
			req, events := tracedSpec(n, failing)
			res, err := o.Generate(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if !sameTokens(res.Tokens, want) {
				t.Fatalf("tokens differ from one machine:\n got %v\nwant %v", res.Tokens, want)
			}
			var mismatches []answer.Trace
			checked := false
			for _, ev := range *events {
				switch ev.Kind {
				case "mismatch":
					mismatches = append(mismatches, ev)
				case "spot_check":
					checked = checked || ev.Reason == ""
				}
			}
			if !checked || res.SpotChecked == 0 || (c != "failover" && res.SpotChecked <= res.DraftRounds) {
				t.Fatalf("checked %v: %d checks over %d draft rounds", checked, res.SpotChecked, res.DraftRounds)
			}
			if c == "old stage" {
				if res.SpotChecked != n || res.DraftRounds != 0 || len(mismatches) != 0 {
					t.Fatalf("%d of %d steps checked, %d draft rounds, mismatches %+v", res.SpotChecked, n, res.DraftRounds, mismatches)
				}
				return
			}
			if c == "failover" {
				if len(res.Reroutes) != 1 || !res.Reroutes[0].Standby || len(mismatches) != 0 {
					t.Fatalf("re-routes %+v, mismatches %+v", res.Reroutes, mismatches)
				}
				t.Logf("failover: the check route took over at token %d; %d draft rounds", res.Reroutes[0].AtToken, res.DraftRounds)
				return
			}
			if !lying {
				if len(mismatches) != 0 || res.DraftRounds == 0 || res.DraftAccepted*10 < res.Drafted*9 {
					t.Fatalf("honest routes: mismatches %+v, %d of %d accepted", mismatches, res.DraftAccepted, res.Drafted)
				}
				t.Logf("honest: %d checks over %d draft rounds, %d of %d accepted", res.SpotChecked, res.DraftRounds,
					res.DraftAccepted, res.Drafted)
				return
			}
			// The first round disagrees (the liar accepts every proposal):
			// it counts for nothing, and the answer goes on plainly.
			if len(mismatches) != 1 || mismatches[0].Failed != l.h.ID().String() || !mismatches[0].Proven ||
				mismatches[0].Evidence != EvidenceVerify || len(mismatches[0].Suspects) != 0 || res.DraftRounds != 0 {
				t.Fatalf("the liar in verify steps: mismatches %+v", mismatches)
			}
			assertBans(t, o.View.Trust(), []peer.ID{l.h.ID()}, append(peers[:1:1], peers[2:]...)...)
			t.Logf("liar: %s; %d draft rounds, then %d checks", mismatches[0].Reason, res.DraftRounds, res.SpotChecked)
		})
	}
}

// In the field, spot-checked speculation over quantized weights: two
// honest q4_k (and q8_0) routes cut at other layers verify the same rounds.
// Where a near tie rounds apart between them, the routes are compared again
// by logits, which agree within the quantized tolerance: nobody is
// suspected, and the answer runs to its end.
func TestSpeculativeSpotCheckQuantized(t *testing.T) {
	const n = 24
	think := false
	for _, typ := range []string{"q4_k", "q8_0"} {
		t.Run(typ, func(t *testing.T) {
			full, cid := modelOf(t, "qwen3", "small", typ)
			origin := newStagePeer(t)
			peers := servingPeers(t, full, cid, [2]int{0, 3}, [2]int{3, 8}, [2]int{0, 5}, [2]int{5, 8})
			o := originatorTrusting(t, full, measured(cid, peers), origin, peers...)
			o.Drafter = drafterOf(full, nil)
			var mismatches []answer.Trace
			res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy,
				Speculate: true, DraftMin: 4, DraftMax: 4, OnTrace: func(ev answer.Trace) {
					if ev.Kind == "mismatch" {
						mismatches = append(mismatches, ev)
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Tokens) != n || len(mismatches) != 0 || res.SpotChecked == 0 || res.DraftRounds == 0 {
				t.Fatalf("%d tokens, %d checks, %d draft rounds, mismatches %+v", len(res.Tokens), res.SpotChecked,
					res.DraftRounds, mismatches)
			}
			for _, p := range peers {
				if !o.View.Trust().Proven(p.h.ID()) {
					t.Fatalf("%s is not proven after a checked speculative answer", short(p.h.ID().String()))
				}
			}
			t.Logf("%s: %d checks, %d of %d drafts accepted in %d rounds", typ, res.SpotChecked, res.DraftAccepted,
				res.Drafted, res.DraftRounds)
		})
	}
}

// tracedSpec is a greedy speculative request for n tokens at draft length
// 4 that records its trace events; with fail, the route's second hop fails
// (fail's function for its peer) at token n/2.
func tracedSpec(n int, fail map[string]func()) (Request, *[]answer.Trace) {
	think := false
	events := new([]answer.Trace)
	req := Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy, Speculate: true, DraftMin: 4, DraftMax: 4,
		OnTrace: func(ev answer.Trace) { *events = append(*events, ev) }}
	if fail != nil {
		_, onTrace, onToken := failHopAt(n/2, 1, fail)
		req.OnTrace = func(ev answer.Trace) { onTrace(ev); *events = append(*events, ev) }
		req.OnToken = onToken
	}
	return req, events
}

// TestSpeculativeRecurrentRoute: an LFM2 route (dense or MoE), a
// Qwen3-Next or a Nemotron-H one cannot roll back a rejected draft (the
// short convolutions', the DeltaNet's or the Mamba-2's recurrent state
// drops no positions): a speculating generation does not draft on it and gives one
// machine's greedy tokens, and a stage refuses a session opened for verify
// steps, naming why, as a stage that predates them does.
func TestSpeculativeRecurrentRoute(t *testing.T) {
	for _, arch := range []string{"lfm2", "lfm2moe",
		"qwen3next",
		"nemotron_h",
		"nemotron_h_moe"} {
		t.Run(arch, func(t *testing.T) {
			const n = 24
			full, cid := model(t, arch)
			want := reference(t, arch, question, n)
			o, ref, hops := cutRoute(t, full, cid, []int{0, 2, 4})
			drafters := 0
			o.Drafter = drafterOf(full, func(d engine.SpecModel) engine.SpecModel { drafters++; return d })
			think := false
			res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy, Speculate: true, DraftMin: 4, DraftMax: 4})
			if err != nil {
				t.Fatal(err)
			}
			if !sameTokens(res.Tokens, want) || drafters != 0 || res.DraftRounds != 0 {
				t.Fatalf("%d drafts asked for, %d rounds; tokens\n got %v\nwant %v", drafters, res.DraftRounds, res.Tokens, want)
			}
			op := o.newOpen(ref, hops, Request{DType: DTypeF32, Sampling: greedy})
			op.Verify = true
			c, err := o.openChain(t.Context(), op)
			if err == nil {
				c.close()
			}
			var se *StageError
			if !errors.As(err, &se) || se.Code != CodeBadFrame || !strings.Contains(err.Error(), "recurrent state") {
				t.Fatalf("a verify open of an %s route: %v, want %s naming the recurrent state", arch, err, CodeBadFrame)
			}
		})
	}
}
