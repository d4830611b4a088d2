package engine

import (
	"fmt"
	"math"
)

// Speculative sampling (Leviathan et al. 2023; Chen et al. 2023). A
// sampling draft draws each proposal x from its distribution q; the target,
// whose distribution at that position is p, accepts x with probability
// min(1, p(x)/q(x)) and otherwise draws from the residual max(0, p−q),
// renormalised, and stops there. Whatever q is, the token that comes out
// follows p exactly, so a sampled speculative answer has the distribution
// of a plain sampled one. A proposal chosen by other means (a greedy
// draft, a peer not trusted to report its q) is taken as certain to its
// draft, q = 1 at x: accepted with probability p(x), which is exact too as
// long as x does not depend on the target's random draws.

// Dist is a sparse distribution over token ids: the one a draft drew a
// proposal from.
type Dist struct {
	IDs []int32
	P   []float32 // summing to 1
}

// MaxDistCands bounds a Dist: a sampling draft draws from its MaxDistCands
// most likely tokens, renormalised, so that its distributions cross the
// network in a few hundred bytes a position.
const MaxDistCands = 64

// distTolerance is how far from 1 a Dist's probabilities may sum.
const distTolerance = 1e-3

// Check validates d as a distribution over vocab token ids under which tok
// could have been drawn.
func (d Dist) Check(vocab int, tok int32) error {
	n := len(d.IDs)
	if n == 0 || n > MaxDistCands || len(d.P) != n {
		return fmt.Errorf("%w: a draft distribution of %d ids and %d probabilities (1..%d)", ErrBadInput, n, len(d.P), MaxDistCands)
	}
	var sum float64
	has := false
	for i, id := range d.IDs {
		p := float64(d.P[i])
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("%w: draft distribution id %d outside the vocabulary of %d", ErrBadInput, id, vocab)
		}
		if math.IsNaN(p) || p <= 0 || p > 1 {
			return fmt.Errorf("%w: draft distribution probability %g for id %d", ErrBadInput, p, id)
		}
		for _, o := range d.IDs[:i] {
			if o == id {
				return fmt.Errorf("%w: draft distribution lists id %d twice", ErrBadInput, id)
			}
		}
		sum += p
		has = has || id == tok
	}
	if math.Abs(sum-1) > distTolerance {
		return fmt.Errorf("%w: draft distribution sums to %g", ErrBadInput, sum)
	}
	if !has {
		return fmt.Errorf("%w: the draft proposed %d, which its distribution does not hold", ErrBadInput, tok)
	}
	return nil
}

func (d Dist) prob(tok int32) float64 {
	for i, id := range d.IDs {
		if id == tok {
			return float64(d.P[i])
		}
	}
	return 0
}

// Propose draws the next token as Sample does but from the MaxDistCands
// most likely candidates at most, and returns the distribution it drew
// from: a sampling draft's proposal. When greedy, the distribution is
// empty (a greedy proposal is certain to its draft).
func (s *Sampler) Propose(logits []float32, history []int32) (int32, Dist, error) {
	greedy, c, _, err := s.prepare(logits, history)
	if err != nil || c == nil {
		return greedy, Dist{}, err
	}
	c = c[:min(len(c), MaxDistCands)]
	var sum float64
	for _, x := range c {
		sum += x.p
	}
	// Draw from exactly what is reported: the float32 probabilities, less
	// those that round to 0 (a token it could never propose).
	d := Dist{IDs: make([]int32, 0, len(c)), P: make([]float32, 0, len(c))}
	kept := c[:0]
	var sumf float64
	for _, x := range c {
		if p := float32(x.p / sum); p > 0 {
			d.IDs, d.P = append(d.IDs, x.id), append(d.P, p)
			x.p = float64(p)
			kept = append(kept, x)
			sumf += x.p
		}
	}
	tok := s.draw(kept, sumf)
	for i := range d.P { // the reported distribution sums to 1
		d.P[i] = float32(float64(d.P[i]) / sumf)
	}
	return tok, d, nil
}

// Accept decides one draft position by the speculative sampling rule:
// the draft proposed tok, drawn from q (empty: certain to the draft), and
// logits are the target's after the position before it. It returns tok
// and true when accepted, else a token other than tok drawn from the
// residual and false; either way the token follows the target's
// distribution. When greedy, tok is accepted if it is the argmax, which is
// returned otherwise.
func (s *Sampler) Accept(logits []float32, history []int32, tok int32, q Dist) (int32, bool, error) {
	greedy, c, sum, err := s.prepare(logits, history)
	if err != nil {
		return -1, false, err
	}
	if c == nil {
		return greedy, greedy == tok, nil
	}
	if len(q.IDs) == 0 {
		q = Dist{IDs: []int32{tok}, P: []float32{1}}
	}
	var px float64
	for _, x := range c {
		if x.id == tok {
			px = x.p / sum
			break
		}
	}
	if qx := q.prob(tok); qx > 0 && s.rng.Float64()*qx < px {
		return tok, true, nil
	}
	qp := make(map[int32]float64, len(q.IDs))
	for i, id := range q.IDs {
		qp[id] = float64(q.P[i])
	}
	var rs float64
	for i := range c {
		r := 0.0
		if c[i].id != tok {
			r = max(0, c[i].p/sum-qp[c[i].id])
		}
		c[i].p = r
		rs += r
	}
	if rs <= 0 {
		// p is q to rounding: a rejection is then a rounding's, and the
		// proposal stands.
		return tok, true, nil
	}
	return s.draw(c, rs), false, nil
}

// VerifyDraft chooses the token after each position of a verify step: the
// token before a draft and the draft (tokens), whose logits (V per
// position) a target ran, with hist the history up to and including them
// for the repetition penalty. Position i's choice decides tokens[i+1] by
// Accept (q[i], or certain when q is short); at the first rejection the
// residual's token is chosen and repeated to the end, nothing after it
// being kept. The last position's is the target's own next token. When
// greedy every position is the argmax after the same history.
func (s *Sampler) VerifyDraft(logits []float32, V int, hist, tokens []int32, q []Dist) ([]int32, error) {
	n := len(tokens)
	if V <= 0 || len(logits) != n*V || len(hist) < n {
		return nil, fmt.Errorf("%w: %d logits of vocabulary %d for %d positions after %d tokens", ErrBadInput, len(logits), V, n, len(hist))
	}
	base := len(hist) - n
	out := make([]int32, n)
	for i := range n {
		l, h := logits[i*V:(i+1)*V], hist[:base+i+1]
		if i == n-1 || s.o.Temperature <= 0 {
			tok, err := s.Sample(l, h)
			if err != nil {
				return nil, err
			}
			out[i] = tok
			continue
		}
		var qi Dist
		if i < len(q) {
			qi = q[i]
		}
		tok, ok, err := s.Accept(l, h, tokens[i+1], qi)
		if err != nil {
			return nil, err
		}
		out[i] = tok
		if !ok {
			for j := i + 1; j < n; j++ {
				out[j] = tok
			}
			break
		}
	}
	return out, nil
}
