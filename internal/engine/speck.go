package engine

import (
	"context"
	"math"
	"time"
)

// SpecK chooses each speculative round's draft length k.
//
// By acceptance alone (NewSpecK): k grows by one after a round that
// accepts every proposal and shrinks by one after one that accepts fewer
// than half, within [1, max].
//
// By cost (NewSpecCost, rounds run with Round): each round's draft time
// and verify time are measured, and the next k maximises the expected
// tokens per second
//
//	E(k) / (base + k·(draft + perPos)),  E(k) = (1 − α^(k+1)) / (1 − α)
//
// where α is the chance that a proposal is accepted (decayed counts of
// accepted proposals and rejections, from a prior of 2 to 1), draft the
// time per proposal, and base + n·perPos a verify step of n+1 positions
// (a least-squares line through the last 16 steps). Plain decoding is
// k = 0, one token per base. Where no k > 0 beats it (a draft that
// rarely agrees, or costs as much as the target when no round trip is
// saved) k is 0, with a one-token probe every 8th round to notice a
// change; k never leaves [min, max].
type SpecK struct {
	k, min, max int
	costs       bool

	acc, rej float64       // decayed accepted proposals and rejections
	draftPer time.Duration // per proposal, moving average
	obs      [16]verifyObs // the last verify steps
	nobs     int
	rounds   int
}

type verifyObs struct {
	n int // positions
	d time.Duration
}

// specDecay is how much a round's acceptance counts against the last.
const specDecay = 0.9

// specProbe: with k at 0 by cost, every specProbe-th round drafts one
// token.
const specProbe = 8

// NewSpecK starts at k (default 4) and adapts by acceptance, bounded by
// max (default 8, at most MaxSpecK).
func NewSpecK(k, max int) *SpecK {
	max = specMax(max)
	if k <= 0 {
		k = 4
	}
	return &SpecK{k: min(k, max), min: 1, max: max}
}

// NewSpecCost adapts by cost within [min, max] (max default 8, at most
// MaxSpecK; min at most max), starting at 4 within them.
func NewSpecCost(minK, maxK int) *SpecK {
	maxK = specMax(maxK)
	minK = max(0, min(minK, maxK))
	// The prior (2 accepted, 1 rejected) decays with the evidence.
	return &SpecK{k: max(minK, min(4, maxK)), min: minK, max: maxK, costs: true, acc: 2, rej: 1}
}

func specMax(m int) int {
	if m <= 0 {
		m = 8
	}
	return min(m, MaxSpecK)
}

// K is the next round's draft length.
func (s *SpecK) K() int { return s.k }

// Update learns from a round that proposed and accepted so many tokens,
// by acceptance alone.
func (s *SpecK) Update(proposed, accepted int) {
	switch {
	case proposed == 0: // nothing drafted: no news
	case accepted == proposed:
		s.k = min(s.k+1, s.max)
	case 2*accepted < proposed:
		s.k = max(s.k-1, s.min)
	}
}

// Round runs one speculative round (SpecRound) of at most room proposals
// and learns from it.
func (s *SpecK) Round(ctx context.Context, target, draft SpecModel, hist []int32, room int) (add, drafts []int32, err error) {
	n := max(0, min(s.k, room))
	t0 := time.Now()
	add, drafts, took, err := specRound(ctx, target, draft, hist, n)
	if err != nil {
		return add, drafts, err
	}
	if s.costs {
		s.Observe(len(drafts), len(add)-1, took.per, time.Since(t0)-took.draft)
	} else {
		s.Update(len(drafts), len(add)-1)
	}
	return add, drafts, nil
}

// Observe learns from a round that proposed and accepted so many tokens,
// a proposal taking per (0: not measured) and the target's step verify,
// and chooses the next k by cost.
func (s *SpecK) Observe(proposed, accepted int, per, verify time.Duration) {
	s.rounds++
	if proposed > 0 {
		s.acc = specDecay*s.acc + float64(accepted)
		rej := 0.0
		if accepted < proposed {
			rej = 1
		}
		s.rej = specDecay*s.rej + rej
	}
	if per > 0 {
		if s.draftPer == 0 {
			s.draftPer = per
		} else {
			s.draftPer = (3*s.draftPer + per) / 4
		}
	}
	s.obs[s.nobs%len(s.obs)] = verifyObs{n: proposed + 1, d: verify}
	s.nobs++
	s.k = s.choose()
}

// Alpha is the estimated chance that a proposal is accepted.
func (s *SpecK) Alpha() float64 {
	if s.acc+s.rej == 0 {
		return 0
	}
	return s.acc / (s.acc + s.rej)
}

// choose is the k of the best expected rate.
func (s *SpecK) choose() int {
	base, perPos := s.verifyCost()
	if base <= 0 {
		return s.k // nothing measured yet
	}
	a := min(s.Alpha(), 0.999)
	cost := float64(s.draftPer) + perPos
	best, bestRate := 0, 1/base
	for k := 1; k <= s.max; k++ {
		e := (1 - math.Pow(a, float64(k+1))) / (1 - a)
		if r := e / (base + float64(k)*cost); r > bestRate {
			best, bestRate = k, r
		}
	}
	if best == 0 && s.rounds%specProbe == 0 {
		best = 1
	}
	return max(s.min, min(best, s.max))
}

// verifyCost fits base + n·perPos (nanoseconds) to the verify steps seen;
// with one length only, base is their mean and perPos 0.
func (s *SpecK) verifyCost() (base, perPos float64) {
	n := min(s.nobs, len(s.obs))
	if n == 0 {
		return 0, 0
	}
	var sx, sy, sxx, sxy float64
	for _, o := range s.obs[:n] {
		x, y := float64(o.n-1), float64(o.d)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	fn := float64(n)
	if v := sxx - sx*sx/fn; v > 1e-9 {
		perPos = max(0, (sxy-sx*sy/fn)/v)
	}
	base = sy/fn - perPos*sx/fn
	if base <= 0 {
		base, perPos = sy/fn, 0
	}
	return base, perPos
}
