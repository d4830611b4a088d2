package engine

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestBatchedSameTokens: four sessions whose prompts and decode steps run
// batched in one graph pick the tokens each picks alone, with logits that
// differ by rounding only (ggml multiplies one row with other kernels than
// several, and batched sequences' cells interleave). Where a random
// synthetic model's two best logits are within that rounding, a step may
// pick the other: allowed, and no more, in at most a tenth of the steps.
// Both runs are fed the lone run's tokens, so every step is compared.
func TestBatchedSameTokens(t *testing.T) {
	cases := []struct{ arch, typ string }{
		{"qwen3", "q8_0"}, {"qwen2", "q8_0"}, {"llama", "q8_0"}, {"qwen3", "q4_k"}, {"llama", "f32"},
	}
	for _, c := range cases {
		t.Run(c.arch+"-"+c.typ, func(t *testing.T) {
			size := "small"
			if c.typ == "f32" {
				size = "tiny"
			}
			m := loadT(t, synthFile(t, c.arch, size, c.typ), Options{Slots: 4, Context: 256})
			const seqs, steps = 4, 16
			prompts := make([][]int32, seqs)
			for i := range prompts {
				prompts[i] = splitPrompt[:6+2*i] // 6, 8, 10 and 12 positions
			}
			// alone: each session by itself
			alone := make([][][]float32, seqs)
			toks := make([][]int32, seqs)
			for i := range seqs {
				s, err := m.NewSession()
				if err != nil {
					t.Fatal(err)
				}
				in := prompts[i]
				for range steps {
					l, err := s.RunRange(context.Background(), 0, m.Info().Layers, in, nil)
					if err != nil {
						t.Fatal(err)
					}
					alone[i] = append(alone[i], l)
					in = []int32{Greedy(l)}
					toks[i] = append(toks[i], in[0])
				}
				s.Close()
			}
			// batched: every step of the four at once
			r0, n0 := m.Batching()
			sess := make([]*Session, seqs)
			for i := range sess {
				s, err := m.NewSession()
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				sess[i] = s
			}
			together := make([][][]float32, seqs)
			for k := range steps {
				outs := make([][]float32, seqs)
				errs := make([]error, seqs)
				var wg sync.WaitGroup
				// Hold the compute lock until all four steps are queued: they
				// run in two rounds at most (the leader's, which took what
				// was queued when it began, and the rest's).
				q0 := m.queued.Load()
				computeMu.Lock()
				for i := range seqs {
					in := prompts[i]
					if k > 0 {
						in = []int32{toks[i][k-1]}
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						outs[i], errs[i] = sess[i].RunRange(context.Background(), 0, m.Info().Layers, in, nil)
					}()
				}
				waitQueued(t, m, q0+seqs)
				computeMu.Unlock()
				wg.Wait()
				for i := range seqs {
					if errs[i] != nil {
						t.Fatal(errs[i])
					}
					together[i] = append(together[i], outs[i])
				}
			}
			if r, n := m.Batching(); r-r0 > 2*steps || n-n0 != seqs*steps {
				t.Fatalf("%d rounds ran %d steps, want at most %d rounds of %d steps", r-r0, n-n0, 2*steps, seqs*steps)
			}
			same, worst := 0, 0.0
			for i := range seqs {
				for k := range steps {
					want, got := alone[i][k], together[i][k]
					d := maxAbsDiff(got, want)
					worst = max(worst, d/maxAbs(want))
					g, w := Greedy(got), Greedy(want)
					if d > 0.1*maxAbs(want) || (g != w && float64(want[w]-want[g]) > 2*d) {
						t.Fatalf("session %d step %d: batched token %d (alone's logit %g), alone %d (%g); max |logit d| %g of %g",
							i, k, g, want[g], w, want[w], d, maxAbs(want))
					}
					if g == w {
						same++
					}
				}
			}
			if same < seqs*steps*9/10 {
				t.Fatalf("only %d of %d steps pick the lone run's token", same, seqs*steps)
			}
			t.Logf("%d of %d batched steps pick the lone run's token (the others near ties); max |logit d| / max |logit| %.2g",
				same, seqs*steps, worst)
		})
	}
}

// waitQueued waits until n steps have been queued on m in all.
func waitQueued(t *testing.T, m *Model, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for m.queued.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d steps queued", m.queued.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestIsolatedBitIdentical: with Options.Isolated, two sessions whose
// steps interleave (each prompt, then decode steps in turn) give logits
// bit-identical to each run alone, and their steps are never batched.
func TestIsolatedBitIdentical(t *testing.T) {
	m := loadT(t, synthFile(t, "qwen3", "small", "q8_0"), Options{Slots: 2, Context: 256, Isolated: true})
	L := m.Info().Layers
	prompts := [][]int32{splitPrompt[:7], splitPrompt[2:]}
	run := func(s *Session, in []int32) []float32 {
		l, err := s.RunRange(context.Background(), 0, L, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	alone := make([][][]float32, 2)
	for i, p := range prompts {
		s, err := m.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		l := run(s, p)
		alone[i] = append(alone[i], l)
		for range 8 {
			l = run(s, []int32{Greedy(l)})
			alone[i] = append(alone[i], l)
		}
		s.Close()
	}
	r0, n0 := m.Batching()
	ss := make([]*Session, 2)
	last := make([][]float32, 2)
	for i := range ss {
		s, err := m.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ss[i] = s
	}
	for k := range 9 {
		var wg sync.WaitGroup
		for i := range ss {
			in := prompts[i]
			if k > 0 {
				in = []int32{Greedy(last[i])}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				last[i] = run(ss[i], in)
			}()
		}
		wg.Wait()
		for i := range ss {
			if !bitEqual(last[i], alone[i][k]) {
				t.Fatalf("session %d step %d: logits differ from its run alone (max |d| %g)", i, k, maxAbsDiff(last[i], alone[i][k]))
			}
		}
	}
	if r, n := m.Batching(); r-r0 != n-n0 {
		t.Fatalf("isolated sessions were batched: %d steps in %d rounds", n-n0, r-r0)
	}
}
