package engine

import (
	"math/rand/v2"
	"testing"
	"time"
)

// runCost feeds a cost controller rounds where each proposal is accepted
// with chance alpha (the first rejection ending the round), drafting costs
// draft a proposal and a verify step base plus perPos a position; it
// returns the draft lengths chosen over the last rounds.
func runCost(c *SpecK, alpha float64, draft, base, perPos time.Duration) []int {
	r := rand.New(rand.NewPCG(1, 2))
	var ks []int
	for i := range 60 {
		k := c.K()
		acc := 0
		for acc < k && r.Float64() < alpha {
			acc++
		}
		c.Observe(k, acc, draft, base+time.Duration(k)*perPos)
		if i >= 40 {
			ks = append(ks, c.K())
		}
	}
	return ks
}

func median(ks []int) int {
	c := append([]int(nil), ks...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if c[j] < c[i] {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c[len(c)/2]
}

// The cost controller drafts long where round trips dominate and the
// draft is cheap, moderately where the draft agrees 70 % of the time,
// and not at all (but for a probe every 8th round) where drafting does
// not pay: a draft that never agrees, or one as costly as the target with
// no round trip to save. It keeps within [min, max].
func TestSpecCost(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name                string
		min, max            int
		alpha               float64
		draft, base, perPos time.Duration
		wantLo, wantHi      int
	}{
		{"round trips, cheap draft that agrees", 0, 8, 1, ms, 45 * ms, ms / 2, 8, 8},
		{"round trips, draft agrees 70%", 0, 8, 0.7, 2 * ms, 45 * ms, ms / 2, 4, 7},
		{"draft never agrees", 0, 8, 0, ms, 45 * ms, ms / 2, 0, 0},
		{"no round trip, draft as costly as target", 0, 8, 0.95, 2 * ms, 2 * ms, ms / 2, 0, 0},
		{"no round trip, but draft at least 2", 2, 8, 0.95, 2 * ms, 2 * ms, ms / 2, 2, 2},
		{"bounded by max", 0, 3, 1, ms, 45 * ms, ms / 2, 3, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ks := runCost(NewSpecCost(c.min, c.max), c.alpha, c.draft, c.base, c.perPos)
			if m := median(ks); m < c.wantLo || m > c.wantHi {
				t.Fatalf("draft lengths %v: median %d, want %d..%d", ks, m, c.wantLo, c.wantHi)
			}
			for _, k := range ks {
				if k < c.min || k > c.max || (c.wantHi == 0 && k > 1) {
					t.Fatalf("draft lengths %v out of bounds", ks)
				}
			}
			t.Logf("%v", ks)
		})
	}
	// The least-squares verify cost recovers base and per-position cost.
	c := NewSpecCost(0, 8)
	for n := range 8 {
		c.Observe(n, n, 0, 40*ms+time.Duration(n)*3*ms)
	}
	if base, per := c.verifyCost(); time.Duration(base) != 40*ms || time.Duration(per) != 3*ms {
		t.Fatalf("verify cost base %v, per position %v: want 40ms and 3ms", time.Duration(base), time.Duration(per))
	}
}
