package pipeline

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// Speculative decoding through a route: verify steps cross every hop, the
// last stage returns its greedy choice after each position, and the next
// step drops the rejected positions on every stage. The answer is the
// route's plain greedy answer, with a draft that agrees (the same model)
// and one that does not (other weights, same vocabulary), over 2 and 3
// stages, for each architecture; after it the stages hold exactly the
// accepted positions (a plain step then goes on as on the plain route).
func TestSpeculativeRoute(t *testing.T) {
	for _, arch := range []string{"qwen3", "qwen2", "llama"} {
		for _, cuts := range [][]int{{0, 2, 4}, {0, 1, 3, 4}} {
			t.Run(fmt.Sprint(arch, cuts), func(t *testing.T) {
				full, cid := model(t, arch)
				o, ref, hops := cutRoute(t, full, cid, cuts)
				if len(hops) != len(cuts)-1 {
					t.Fatalf("route of %d hops, want %d", len(hops), len(cuts)-1)
				}
				open := func(s Sampling, verify bool) *chain {
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
					st, err := engine.Speculate(t.Context(), &chainSpec{c}, engine.SessionSpec(ds, engine.SamplerOptions{RepeatPenalty: penalty}), prompt,
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
				}
				// A verify step longer than a draft can make is refused (the
				// last hop would hold every position's logits), and the
				// session stays usable.
				long := open(greedy, true)
				_, _, err = long.verify(t.Context(), make([]int32, engine.MaxSpecK+2))
				var se *StageError
				if !errors.As(err, &se) || se.Code != CodeBadFrame {
					t.Fatalf("verify of %d positions: %v", engine.MaxSpecK+2, err)
				}
				if _, _, err := long.step(t.Context(), prompt, nil); err != nil {
					t.Fatalf("the session after the refused verify step: %v", err)
				}
				// A session not opened for verify steps refuses them, and
				// stays usable; a sampling session cannot be opened for them.
				_, _, err = plain.verify(t.Context(), want[n:n+1])
				if !errors.As(err, &se) || se.Code != CodeBadFrame {
					t.Fatalf("verify on a plain session: %v", err)
				}
				if _, _, err := plain.step(t.Context(), want[n:n+1], nil); err != nil {
					t.Fatalf("the plain session after the refused verify step: %v", err)
				}
				op := o.newOpen(ref, hops, Request{DType: DTypeF32, Sampling: Sampling{Temperature: 0.8, Seed: 1}})
				op.Verify = true
				if _, err := o.openChain(t.Context(), op); !errors.As(err, &se) || se.Code != CodeBadFrame {
					t.Fatalf("a sampling session opened for verify steps: %v", err)
				}
			})
		}
	}
}
