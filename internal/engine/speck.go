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
//	E(k) / (vb + k·vp + db + k·dp),  E(k) = (1 − α^(k+1)) / (1 − α)
//
// where α is the chance that a proposal is accepted (decayed counts of
// accepted proposals and rejections, from a prior of 2 to 1), vb + n·vp a
// verify step of n+1 positions and db + n·dp a draft of n proposals (its
// round trip, or its catching up, and each proposal): least-squares lines
// through the last 16 rounds. Plain decoding is k = 0, one token per vb.
// Where no k > 0 beats it (a draft that rarely agrees, or one as costly as
// the target with no round trip to save) k is 0, with a one-token probe
// after 8 plain rounds, 16 after the next, and so on (at most 256) while
// drafting keeps not paying; k never leaves [min, max].
type SpecK struct {
	k, min, max int
	costs       bool

	acc, rej float64      // decayed accepted proposals and rejections
	obs      [16]roundObs // the last rounds
	nobs     int
	// The per-token costs last measured, for a window of rounds that
	// measures none (no drafting in it, or one length only).
	vp, db, dp float64
	plain      int // rounds since the last that drafted
	probe      int // plain rounds before the next probe
}

type roundObs struct {
	n             int // proposals
	draft, verify time.Duration
}

// specDecay is how much a round's acceptance counts against the last.
const specDecay = 0.9

// Probing while drafting does not pay: after specProbe plain rounds, then
// twice as many after each probe that did not pay either, up to
// specProbeMax.
const (
	specProbe    = 8
	specProbeMax = 256
)

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
	return &SpecK{k: max(minK, min(4, maxK)), min: minK, max: maxK, costs: true, acc: 2, rej: 1, probe: specProbe}
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
		s.Observe(len(drafts), len(add)-1, took, time.Since(t0)-took)
	} else {
		s.Update(len(drafts), len(add)-1)
	}
	return add, drafts, nil
}

// Observe learns from a round that proposed and accepted so many tokens,
// the draft taking draft and the target's step verify, and chooses the
// next k by cost.
func (s *SpecK) Observe(proposed, accepted int, draft, verify time.Duration) {
	if proposed > 0 {
		s.acc = specDecay*s.acc + float64(accepted)
		rej := 0.0
		if accepted < proposed {
			rej = 1
		}
		s.rej = specDecay*s.rej + rej
	}
	s.obs[s.nobs%len(s.obs)] = roundObs{n: proposed, draft: draft, verify: verify}
	s.nobs++
	s.k = s.choose(proposed > 0)
}

// Alpha is the estimated chance that a proposal is accepted.
func (s *SpecK) Alpha() float64 {
	if s.acc+s.rej == 0 {
		return 0
	}
	return s.acc / (s.acc + s.rej)
}

// choose is the k of the best expected rate, after a round that drafted
// or not.
func (s *SpecK) choose(drafted bool) int {
	vb, vp, okV := s.fit(false)
	if vb <= 0 {
		return s.k // nothing measured yet
	}
	db, dp, okD := s.fit(true)
	if okV {
		s.vp = vp
	}
	if okD {
		s.db, s.dp = db, dp
	}
	vp, db, dp = s.vp, s.db, s.dp
	a := min(s.Alpha(), 0.999)
	best, bestRate := 0, 1/vb
	for k := 1; k <= s.max; k++ {
		e := (1 - math.Pow(a, float64(k+1))) / (1 - a)
		if r := e / (vb + db + float64(k)*(vp+dp)); r > bestRate {
			best, bestRate = k, r
		}
	}
	switch {
	case best > 0:
		s.plain, s.probe = 0, specProbe
	case drafted: // a probe (or the first rounds) did not pay: probe later
		s.plain = 0
		if s.nobs > 1 {
			s.probe = min(2*s.probe, specProbeMax)
		}
	default:
		if s.plain++; s.plain >= s.probe {
			best = 1
		}
	}
	return max(s.min, min(best, s.max))
}

// fit fits a line a + n·b (nanoseconds) to the last rounds' verify times
// against their proposals, or to their draft times over the rounds that
// drafted. With one length only, a verify step's time is taken as fixed
// (a their mean, b 0) and a draft's as per proposal (a 0): the costlier
// reading of each for a longer draft.
// ok says whether b was measured (two lengths or more; a draft's too
// with one).
func (s *SpecK) fit(draft bool) (a, b float64, ok bool) {
	var sx, sy, sxx, sxy, cnt float64
	for _, o := range s.obs[:min(s.nobs, len(s.obs))] {
		x, y := float64(o.n), float64(o.verify)
		if draft {
			if o.n == 0 {
				continue
			}
			y = float64(o.draft)
		}
		sx, sy, sxx, sxy, cnt = sx+x, sy+y, sxx+x*x, sxy+x*y, cnt+1
	}
	if cnt == 0 {
		return 0, 0, false
	}
	v := sxx - sx*sx/cnt
	if v <= 1e-9 {
		if draft {
			return 0, sy / sx, true
		}
		return sy / cnt, 0, false
	}
	b = max(0, (sxy-sx*sy/cnt)/v)
	a = sy/cnt - b*sx/cnt
	if a < 0 {
		a, b = 0, sy/sx // through the origin
	}
	return a, b, true
}
