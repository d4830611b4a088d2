package engine

import (
	"math/rand/v2"
	"testing"
	"time"
)

// runCost feeds a cost controller rounds where each proposal is accepted
// with chance alpha (the first rejection ending the round), a draft costs
// dbase plus draft a proposal and a verify step base plus perPos a
// position; it returns the draft lengths chosen over the last rounds.
func runCost(c *SpecK, alpha float64, dbase, draft, base, perPos time.Duration) []int {
	r := rand.New(rand.NewPCG(1, 2))
	var ks []int
	for i := range 60 {
		k := c.K()
		acc := 0
		for acc < k && r.Float64() < alpha {
			acc++
		}
		d := time.Duration(0)
		if k > 0 {
			d = dbase + time.Duration(k)*draft
		}
		c.Observe(k, acc, d, base+time.Duration(k)*perPos)
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
// and not at all (but for probes, ever rarer) where drafting does not
// pay: a draft that never agrees, one as costly as the target with no
// round trip to save, a remote drafter whose own round trip costs more
// than the verifier's steps. It keeps within [min, max].
func TestSpecCost(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name                       string
		min, max                   int
		alpha                      float64
		dbase, draft, base, perPos time.Duration
		wantLo, wantHi             int
	}{
		{"round trips, cheap draft that agrees", 0, 8, 1, 0, ms, 45 * ms, ms / 2, 8, 8},
		{"round trips, draft agrees 70%", 0, 8, 0.7, 0, 2 * ms, 45 * ms, ms / 2, 4, 7},
		{"draft never agrees", 0, 8, 0, 0, ms, 45 * ms, ms / 2, 0, 0},
		{"no round trip, draft as costly as target", 0, 8, 0.95, 0, 2 * ms, 2 * ms, ms / 2, 0, 0},
		{"no round trip, but draft at least 2", 2, 8, 0.95, 0, 2 * ms, 2 * ms, ms / 2, 2, 2},
		{"bounded by max", 0, 3, 1, 0, ms, 45 * ms, ms / 2, 3, 3},
		// A remote drafter: its round trip (20 ms) is paid once a round,
		// against a slow verifier (100 ms a step): worth drafting long.
		{"remote drafter, slow verifier", 0, 8, 0.8, 20 * ms, ms, 100 * ms, ms, 6, 8},
		// The same drafter for a fast verifier: its round trip costs more
		// than the verifier's own steps.
		{"remote drafter, fast verifier", 0, 8, 0.8, 20 * ms, ms, 5 * ms, ms / 4, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ks := runCost(NewSpecCost(c.min, c.max), c.alpha, c.dbase, c.draft, c.base, c.perPos)
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
	// The least-squares lines recover each fixed and per-token cost.
	c := NewSpecCost(0, 8)
	for n := range 8 {
		c.Observe(n, n, 7*ms+time.Duration(n)*2*ms, 40*ms+time.Duration(n)*3*ms)
	}
	vb, vp, _ := c.fit(false)
	db, dp, _ := c.fit(true)
	if time.Duration(vb) != 40*ms || time.Duration(vp) != 3*ms || time.Duration(db) != 7*ms || time.Duration(dp) != 2*ms {
		t.Fatalf("verify %v + n·%v, draft %v + n·%v", time.Duration(vb), time.Duration(vp), time.Duration(db), time.Duration(dp))
	}
	// Probes back off while drafting keeps not paying: over 200 rounds
	// of a draft that never agrees, fewer probes in the last 100 than
	// in the first.
	c = NewSpecCost(0, 8)
	r := rand.New(rand.NewPCG(3, 4))
	probes := [2]int{}
	for i := range 200 {
		k := c.K()
		d := time.Duration(0)
		if k > 0 {
			probes[i/100]++
			d = time.Duration(k) * ms
		}
		c.Observe(k, 0, d, 45*ms+time.Duration(r.IntN(3))*ms)
	}
	if probes[1] >= probes[0] || probes[1] > 2 {
		t.Fatalf("rounds drafting in the first and last 100: %v", probes)
	}
	t.Logf("rounds drafting in the first and last 100 of a draft that never agrees: %v", probes)
}
