package engine

import (
	"fmt"
	"math"
	"testing"
)

// chiSquare compares counts of n draws against the distribution p (over
// ids), pooling ids expected fewer than 5 times; it fails t when the
// statistic is beyond its mean by 6 standard deviations (a chance of
// about 1e-6 for a right distribution).
func chiSquare(t *testing.T, what string, counts map[int32]int, p map[int32]float64, n int) {
	t.Helper()
	var stat, restE float64
	restO, df := 0, -1
	for id, pi := range p {
		e := pi * float64(n)
		if e < 5 {
			restE += e
			restO += counts[id]
			continue
		}
		d := float64(counts[id]) - e
		stat += d * d / e
		df++
	}
	for id, c := range counts {
		if _, ok := p[id]; !ok {
			restO += c // drawn though the target gives it no chance
		}
	}
	if restO > 0 || restE > 0 {
		e := max(restE, 0.5)
		d := float64(restO) - restE
		stat += d * d / e
		df++
	}
	limit := float64(df) + 6*math.Sqrt(2*float64(max(df, 1)))
	t.Logf("%s: chi-square %.1f over %d degrees of freedom (limit %.1f)", what, stat, df, limit)
	if stat > limit {
		t.Errorf("%s: the draws do not follow the target's distribution: chi-square %.1f > %.1f (counts %v)", what, stat, limit, counts)
	}
}

// targetDist is the distribution a sampler with o draws from after logits.
func targetDist(t *testing.T, o SamplerOptions, logits []float32, hist []int32) map[int32]float64 {
	t.Helper()
	s := NewSampler(o)
	_, c, sum, err := s.prepare(logits, hist)
	if err != nil {
		t.Fatal(err)
	}
	p := map[int32]float64{}
	for _, x := range c {
		p[x.id] = x.p / sum
	}
	return p
}

// Accept's token follows the target's distribution whatever the draft's:
// a draft close to the target, one far from it, one certain of a token the
// target finds unlikely, and one certain of a token the target never
// draws. Accepted means the proposal; rejected, another token.
func TestAcceptFollowsTarget(t *testing.T) {
	logits := []float32{2, 1.5, 0.3, -1, 0.9, -0.2, 1.1, 0}
	o := SamplerOptions{Temperature: 1, TopK: 6, Seed: 11}
	p := targetDist(t, o, logits, nil)
	cases := []struct {
		name string
		q    Dist
	}{
		{"close", Dist{IDs: []int32{0, 1, 6, 4}, P: []float32{0.4, 0.3, 0.2, 0.1}}},
		{"far", Dist{IDs: []int32{2, 5, 1}, P: []float32{0.6, 0.3, 0.1}}},
		{"certain", Dist{}},
	}
	const n = 200000
	for _, c := range cases {
		for _, certain := range []int32{2, 3} { // 3 is outside the top 6
			if c.name != "certain" && certain == 3 {
				continue
			}
			name := c.name
			if c.name == "certain" {
				name = fmt.Sprintf("certain of %d", certain)
			}
			t.Run(name, func(t *testing.T) {
				draft, target := NewSampler(SamplerOptions{Temperature: 1, Seed: 5}), NewSampler(o)
				counts := map[int32]int{}
				accepted := 0
				for range n {
					tok := certain
					if len(c.q.IDs) > 0 {
						ps := make([]cand, len(c.q.IDs))
						for i, id := range c.q.IDs {
							ps[i] = cand{id: id, p: float64(c.q.P[i])}
						}
						tok = draft.draw(ps, 1)
					}
					got, ok, err := target.Accept(logits, nil, tok, c.q)
					if err != nil {
						t.Fatal(err)
					}
					if ok != (got == tok) {
						t.Fatalf("proposal %d: got %d, accepted %v", tok, got, ok)
					}
					if ok {
						accepted++
					}
					counts[got]++
				}
				chiSquare(t, name, counts, p, n)
				// The chance of acceptance is the overlap of p and q.
				var want float64
				q := c.q
				if len(q.IDs) == 0 {
					q = Dist{IDs: []int32{certain}, P: []float32{1}}
				}
				for i, id := range q.IDs {
					want += min(p[id], float64(q.P[i]))
				}
				if got := float64(accepted) / n; math.Abs(got-want) > 0.01 {
					t.Errorf("accepted %.3f of proposals, the overlap of the distributions is %.3f", got, want)
				}
			})
		}
	}
}

// A sampling draft reports what it drew from: at most MaxDistCands tokens
// whose probabilities sum to 1, the drawn one among them; greedy, nothing.
func TestProposeReportsItsDistribution(t *testing.T) {
	logits := make([]float32, 300)
	for i := range logits {
		logits[i] = float32(i%17) / 8
	}
	s := NewSampler(SamplerOptions{Temperature: 2, Seed: 3})
	for range 100 {
		tok, d, err := s.Propose(logits, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Check(len(logits), tok); err != nil || len(d.IDs) != MaxDistCands {
			t.Fatalf("proposal %d from %d candidates: %v", tok, len(d.IDs), err)
		}
	}
	tok, d, err := NewSampler(SamplerOptions{}).Propose(logits, nil)
	if err != nil || len(d.IDs) != 0 || tok != Greedy(logits) {
		t.Fatalf("greedy proposal %d with %d candidates: %v", tok, len(d.IDs), err)
	}
}

// Sampled speculative decoding on a real model follows the target's
// distribution: a draft that is the same model sampling colder (so it
// agrees often, but not always) proposes three tokens from the prompt, the target verifies them in one step, and the first token of the
// round (the proposal accepted or the residual's draw) is distributed as
// the target's next token after the prompt; so is the second after the
// most frequent first. A round that keeps only one token is followed by a
// plain step for the second. Rounds of the same seeds repeat exactly.
func TestSpeculateSampledFollowsTarget(t *testing.T) {
	m := loadT(t, synthFile(t, "qwen3", "tiny", "q8_0"), Options{Slots: 2, Context: 64})
	ts, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	ds, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	prompt := splitPrompt[:6]
	o := SamplerOptions{Temperature: 1.5, TopK: 40, RepeatPenalty: 1.1}
	L := m.Info().Layers
	// The target's exact distributions.
	first, err := ts.RunRange(t.Context(), 0, L, prompt, nil)
	if err != nil {
		t.Fatal(err)
	}
	p1 := targetDist(t, o, first, prompt)
	if err := ts.Truncate(0); err != nil {
		t.Fatal(err)
	}
	round := func(seed uint64) (a, b int32, proposed, accepted int) {
		o.Seed = seed
		target, draft := SessionSpec(ts, o), SessionDraft(ds, SamplerOptions{Temperature: 0.6, TopK: 8, Seed: seed})
		if err := ts.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if err := ds.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := target.Prefill(t.Context(), prompt[:len(prompt)-1]); err != nil {
			t.Fatal(err)
		}
		add, drafts, err := SpecRound(t.Context(), target, draft, prompt, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(add) == 1 {
			hist := append(append([]int32(nil), prompt...), add[0])
			if add, _, err = SpecRound(t.Context(), target, draft, hist, 0); err != nil {
				t.Fatal(err)
			}
			return hist[len(prompt)], add[0], len(drafts), 0
		}
		return add[0], add[1], len(drafts), len(add) - 1
	}
	const n = 1200
	c1 := map[int32]int{}
	pairs := map[int32]map[int32]int{}
	var proposed, accepted int
	for i := range n {
		a, b, pr, ac := round(uint64(i) + 1)
		c1[a]++
		if pairs[a] == nil {
			pairs[a] = map[int32]int{}
		}
		pairs[a][b]++
		proposed += pr
		accepted += ac
	}
	t.Logf("%d of %d proposals accepted", accepted, proposed)
	if accepted == 0 || accepted == proposed {
		t.Fatalf("%d of %d proposals accepted: the test needs a draft that agrees sometimes", accepted, proposed)
	}
	chiSquare(t, "first token", c1, p1, n)
	var top int32
	for id, c := range c1 {
		if c > c1[top] || (c == c1[top] && id < top) {
			top = id
		}
	}
	if err := ts.Truncate(0); err != nil {
		t.Fatal(err)
	}
	second, err := ts.RunRange(t.Context(), 0, L, append(append([]int32(nil), prompt...), top), nil)
	if err != nil {
		t.Fatal(err)
	}
	chiSquare(t, fmt.Sprintf("second token after %d", top), pairs[top], targetDist(t, o, second, append(append([]int32(nil), prompt...), top)), c1[top])
	a1, b1, _, _ := round(77)
	a2, b2, _, _ := round(77)
	if a1 != a2 || b1 != b2 {
		t.Fatalf("the same seed gave %d %d, then %d %d", a1, b1, a2, b2)
	}
}
