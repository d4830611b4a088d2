package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func randomLogits(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64() * 3)
	}
	return l
}

func sampleN(o SamplerOptions, n int) []int32 {
	s := NewSampler(o)
	var out []int32
	for i := range n {
		id, err := s.Sample(randomLogits(uint64(i), 1000), out)
		if err != nil {
			panic(err)
		}
		out = append(out, id)
	}
	return out
}

func TestSamplerDeterminism(t *testing.T) {
	o := SamplerOptions{Temperature: 1, TopK: 50, TopP: 0.9, MinP: 0.01, RepeatPenalty: 1.1, Seed: 42}
	a, b := sampleN(o, 64), sampleN(o, 64)
	if !slices.Equal(a, b) {
		t.Fatal("same seed gave different tokens")
	}
	o.Seed = 43
	if c := sampleN(o, 64); slices.Equal(a, c) {
		t.Fatal("different seeds gave the same 64 tokens")
	}
}

func TestSamplerFilters(t *testing.T) {
	logits := randomLogits(7, 1000)
	best := Greedy(logits)
	order := make([]int32, len(logits))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		if logits[a] > logits[b] {
			return -1
		}
		if logits[a] < logits[b] {
			return 1
		}
		return 0
	})
	top5 := order[:5]
	cases := []struct {
		name string
		o    SamplerOptions
		ok   func(id int32) bool
	}{
		{"greedy", SamplerOptions{}, func(id int32) bool { return id == best }},
		{"top-k 1", SamplerOptions{Temperature: 2, TopK: 1}, func(id int32) bool { return id == best }},
		{"top-k 5", SamplerOptions{Temperature: 5, TopK: 5}, func(id int32) bool { return slices.Contains(top5, id) }},
		{"min-p 1", SamplerOptions{Temperature: 5, MinP: 1}, func(id int32) bool { return id == best }},
		{"top-p tiny", SamplerOptions{Temperature: 1, TopP: 1e-6}, func(id int32) bool { return id == best }},
	}
	for _, c := range cases {
		for seed := range uint64(50) {
			c.o.Seed = seed
			id, err := NewSampler(c.o).Sample(logits, nil)
			if err != nil || !c.ok(id) {
				t.Fatalf("%s seed %d: token %d (%v)", c.name, seed, id, err)
			}
		}
	}
	// the repetition penalty moves greedy off a token already seen
	pen, _ := NewSampler(SamplerOptions{RepeatPenalty: 100}).Sample(logits, []int32{best})
	if pen == best {
		t.Fatal("repetition penalty ignored")
	}
	if _, err := NewSampler(SamplerOptions{}).Sample(nil, nil); err == nil {
		t.Fatal("empty logits accepted")
	}
	// high temperature spreads choices
	seen := map[int32]bool{}
	for _, id := range sampleN(SamplerOptions{Temperature: 1.5, Seed: 1}, 64) {
		seen[id] = true
	}
	if len(seen) < 10 {
		t.Fatalf("temperature sampling too narrow: %d distinct", len(seen))
	}
	_ = fmt.Sprint()
}
