package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Sampling is what a request carries of SamplerOptions to the peer that
// samples (a MoA role's server, a pipeline's last stage): the MoA and stage
// protocols' "sampling" object. Zero values mean greedy decoding.
type Sampling struct {
	Temperature   float32 `json:"temperature,omitempty"`
	TopK          int     `json:"top_k,omitempty"`
	TopP          float32 `json:"top_p,omitempty"`
	MinP          float32 `json:"min_p,omitempty"`
	RepeatPenalty float32 `json:"repeat_penalty,omitempty"`
	Seed          uint64  `json:"seed,omitempty"`
}

// Options is the sampler configuration for s.
func (s Sampling) Options() SamplerOptions {
	return SamplerOptions{Temperature: s.Temperature, TopK: s.TopK, TopP: s.TopP, MinP: s.MinP,
		RepeatPenalty: s.RepeatPenalty, Seed: s.Seed}
}

// SamplerOptions choose how the next token is picked from logits. The zero
// value is greedy decoding.
type SamplerOptions struct {
	// Temperature <= 0 is greedy (argmax, ties to the lowest id).
	Temperature float32 `json:"temperature,omitempty"`
	// TopK keeps the K most likely tokens (0: off).
	TopK int `json:"top_k,omitempty"`
	// TopP keeps the smallest set of most likely tokens whose probability
	// sums to at least TopP (0 or >= 1: off).
	TopP float32 `json:"top_p,omitempty"`
	// MinP drops tokens less likely than MinP times the most likely (0: off).
	MinP float32 `json:"min_p,omitempty"`
	// RepeatPenalty divides positive (multiplies negative) logits of tokens
	// seen in the last RepeatLastN tokens (0 or 1: off).
	RepeatPenalty float32 `json:"repeat_penalty,omitempty"`
	// RepeatLastN is the penalty window (0: 64; -1: whole history).
	RepeatLastN int `json:"repeat_last_n,omitempty"`
	// Seed makes sampling reproducible: the same seed, logits and history give
	// the same tokens. Zero is a seed like any other.
	Seed uint64 `json:"seed,omitempty"`
}

// Sampler picks tokens. It keeps a random stream, so use one per sequence.
type Sampler struct {
	o    SamplerOptions
	rng  *rand.Rand
	cand []cand
	buf  []float32
	seen map[int32]bool
}

// topK appends to c the k largest logits (by value, ties to the lower id),
// keeping a min-heap of size k: O(n log k) instead of sorting the vocabulary.
func topK(c []cand, l []float32, k int) []cand {
	less := func(a, b cand) bool { // a ranks below b
		return a.logit < b.logit || (a.logit == b.logit && a.id > b.id)
	}
	down := func(h []cand, i int) {
		for {
			m, lc, rc := i, 2*i+1, 2*i+2
			if lc < len(h) && less(h[lc], h[m]) {
				m = lc
			}
			if rc < len(h) && less(h[rc], h[m]) {
				m = rc
			}
			if m == i {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	h := c
	for i, v := range l {
		x := cand{id: int32(i), logit: v}
		if len(h) < k {
			h = append(h, x)
			if len(h) == k {
				for j := k/2 - 1; j >= 0; j-- {
					down(h, j)
				}
			}
			continue
		}
		if less(h[0], x) {
			h[0] = x
			down(h, 0)
		}
	}
	return h
}

type cand struct {
	id    int32
	logit float32
	p     float64
}

// pruneLogit drops candidates this far (after temperature) below the best:
// their probability is below e^-30 of the best, too small to change top-p
// or the draw, and skipping them saves sorting the whole vocabulary.
const pruneLogit = 30

// NewSampler returns a sampler for o.
func NewSampler(o SamplerOptions) *Sampler {
	if o.RepeatLastN == 0 {
		o.RepeatLastN = 64
	}
	return &Sampler{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15)), seen: map[int32]bool{}}
}

// Sample picks the next token from logits (not modified); history holds the
// tokens so far (prompt and generated), for the repetition penalty.
func (s *Sampler) Sample(logits []float32, history []int32) (int32, error) {
	greedy, c, sum, err := s.prepare(logits, history)
	if err != nil || c == nil {
		return greedy, err
	}
	return s.draw(c, sum), nil
}

// prepare applies the repetition penalty and, when sampling, temperature
// and the truncations: it returns the candidates, most likely first, with
// unnormalised probabilities summing to sum; when greedy, the argmax and
// no candidates.
func (s *Sampler) prepare(logits []float32, history []int32) (int32, []cand, float64, error) {
	if len(logits) == 0 {
		return -1, nil, 0, fmt.Errorf("%w: no logits", ErrBadInput)
	}
	penalty := s.o.RepeatPenalty
	if penalty <= 0 || penalty == 1 {
		penalty = 1
	}
	// Work on a copy with the repetition penalty applied once.
	s.buf = append(s.buf[:0], logits...)
	l := s.buf
	if penalty != 1 {
		clear(s.seen)
		h := history
		if s.o.RepeatLastN > 0 && len(h) > s.o.RepeatLastN {
			h = h[len(h)-s.o.RepeatLastN:]
		}
		for _, id := range h {
			if id < 0 || int(id) >= len(l) || s.seen[id] {
				continue
			}
			s.seen[id] = true
			if l[id] > 0 {
				l[id] /= penalty
			} else {
				l[id] *= penalty
			}
		}
	}
	if s.o.Temperature <= 0 {
		return Greedy(l), nil, 0, nil
	}
	inv := 1 / s.o.Temperature
	maxv := float32(math.Inf(-1))
	for i := range l {
		l[i] *= inv
		maxv = max(maxv, l[i])
	}
	if math.IsInf(float64(maxv), 0) || math.IsNaN(float64(maxv)) {
		return -1, nil, 0, fmt.Errorf("%w: logits have no finite maximum", ErrBadInput)
	}
	c := s.cand[:0]
	if k := s.o.TopK; k > 0 && k < len(l) {
		c = topK(c, l, k)
	} else {
		for i, v := range l {
			if v >= maxv-pruneLogit {
				c = append(c, cand{id: int32(i), logit: v})
			}
		}
	}
	slices.SortFunc(c, func(a, b cand) int {
		switch {
		case a.logit > b.logit:
			return -1
		case a.logit < b.logit:
			return 1
		}
		return int(a.id - b.id)
	})
	var sum float64
	for i := range c {
		c[i].p = math.Exp(float64(c[i].logit - maxv))
		sum += c[i].p
	}
	if mp := float64(s.o.MinP); mp > 0 {
		thr := mp * c[0].p
		n := 1
		for n < len(c) && c[n].p >= thr {
			n++
		}
		c = c[:n]
	}
	if tp := float64(s.o.TopP); tp > 0 && tp < 1 {
		var cum float64
		n := 0
		for n < len(c) {
			cum += c[n].p / sum
			n++
			if cum >= tp {
				break
			}
		}
		c = c[:n]
	}
	sum = 0
	for _, x := range c {
		sum += x.p
	}
	s.cand = c
	return -1, c, sum, nil
}

// draw picks one of c by its probability (unnormalised, summing to sum).
func (s *Sampler) draw(c []cand, sum float64) int32 {
	r := s.rng.Float64() * sum
	for _, x := range c {
		r -= x.p
		if r < 0 {
			return x.id
		}
	}
	return c[len(c)-1].id
}

// Greedy returns the index of the largest logit (ties: lowest index).
func Greedy(logits []float32) int32 {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return int32(best)
}
