package engine

import (
	"context"
	"testing"
)

// The process keeps one pool of ggml workers between graphs, grown to the
// largest Threads a model asks for, and the pool gives the same logits as
// workers started for each graph.
func TestThreadPoolKept(t *testing.T) {
	path := synthFile(t, "qwen3", "small", "q8_0")
	pooled := loadT(t, path, Options{Slots: 1, Context: 64, Threads: 2})
	fresh := loadT(t, path, Options{Slots: 1, Context: 64, Threads: 2, NoPool: true})
	if len(pooled.cpu) == 0 {
		t.Fatal("no CPU backend found in ollama's backend (field schedBackends renamed?): graphs would start their workers each time")
	}
	run := func(m *Model) [][]float32 {
		s, err := m.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		L := m.Info().Layers
		var out [][]float32
		l, err := s.RunRange(context.Background(), 0, L, splitPrompt, nil)
		for range 6 {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
			l, err = s.RunRange(context.Background(), 0, L, []int32{Greedy(l)}, nil)
		}
		return out
	}
	a := run(pooled)
	computeMu.Lock()
	tp, n := pool.tp, pool.n
	computeMu.Unlock()
	if tp == nil || n < 2 {
		t.Fatalf("after a 2-thread model ran, the pool holds %d workers (tp %v)", n, tp)
	}
	b := run(fresh)
	for i := range a {
		if !bitEqual(a[i], b[i]) {
			t.Fatalf("step %d: pooled logits differ from per-graph workers' (max |d| %g)", i, maxAbsDiff(a[i], b[i]))
		}
	}
	wide := loadT(t, path, Options{Slots: 1, Context: 64, Threads: 3})
	c := run(wide)
	computeMu.Lock()
	n = pool.n
	computeMu.Unlock()
	if n < 3 {
		t.Fatalf("a 3-thread model ran on a pool of %d workers", n)
	}
	for i := range a {
		if Greedy(a[i]) != Greedy(c[i]) {
			t.Fatalf("step %d: 3 threads chose token %d, 2 threads %d", i, Greedy(c[i]), Greedy(a[i]))
		}
	}
	// the 2-thread model still runs after the pool was replaced
	if d := run(pooled); !bitEqual(d[0], a[0]) {
		t.Fatal("the 2-thread model's logits changed after the pool grew")
	}
}
