package pipeline

import (
	"fmt"
	"math"
	"testing"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// TestReplayRepeatsBatchShapes: after a replay frame (the prompt in one
// batch, then each generated token alone, run inside each stage), the
// last stage's logits are bit-identical to the original run's, for every
// weight type. For comparison it logs how far a replay in one batch lands.
func TestReplayRepeatsBatchShapes(t *testing.T) {
	for _, typ := range []string{"f32", "f16", "q8_0", "q4_k"} {
		for _, cuts := range [][]int{{0, 8}, {0, 4, 8}} {
			t.Run(fmt.Sprint(typ, cuts), func(t *testing.T) {
				full, cid := modelOf(t, "qwen3", "small", typ)
				o, ref, hops := cutRoute(t, full, cid, cuts)
				open := func() *chain {
					c, err := o.openChain(t.Context(), o.newOpen(ref, hops, Request{DType: DTypeF32, Logits: true}))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(c.close)
					return c
				}
				step := func(c *chain, tokens []int32, batches []int) []float32 {
					res, _, err := c.step(t.Context(), tokens, batches)
					if err != nil {
						t.Fatal(err)
					}
					return res.Logits
				}
				prompt := make([]int32, 51)
				for i := range prompt {
					prompt[i] = int32(i*37%4000 + 5)
				}
				const n, more = 24, 8
				c := open()
				logits := step(c, prompt, nil)
				var gen []int32
				for range n {
					tok := engine.Greedy(logits)
					gen = append(gen, tok)
					logits = step(c, []int32{tok}, nil)
				}
				// The original run goes on; its logits are what every replay
				// must reproduce, at the replay and at each step after it.
				want := [][]float32{logits}
				cont := []int32{}
				for range more {
					tok := engine.Greedy(want[len(want)-1])
					cont = append(cont, tok)
					want = append(want, step(c, []int32{tok}, nil))
				}
				replay := append(append([]int32{}, prompt...), gen...)
				batches := []int{len(prompt)}
				for range gen {
					batches = append(batches, 1)
				}
				follow := func(batches []int) float64 {
					r := open()
					defer r.close() // a stage gives one peer two sessions at once
					d := maxDiff(step(r, replay, batches), want[0])
					for i, tok := range cont {
						d = max(d, maxDiff(step(r, []int32{tok}, nil), want[i+1]))
					}
					return d
				}
				if d := follow(batches); d != 0 {
					t.Fatalf("logits after a replay in the original batch shapes differ by %g", d)
				}
				t.Logf("%s %v: replay in the original shapes: identical; in one batch: max |Δlogit| %g", typ, cuts, follow(nil))
			})
		}
	}
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}
