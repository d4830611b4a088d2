package pipeline

import (
	"errors"
	"fmt"
)

// MaxActivation bounds the magnitude of every hidden state and logit a
// hop or the originator accepts. Honest models stay far below it: the
// synthetic qwen3, qwen2 and llama models of this repository (tiny f32,
// small q8_0 and q4_k, 0.6b q8_0) stay under 25 at every cut and under 100
// in their logits (measured 2026-11-23 on this project's 2-core machine),
// and published trained models reach a few thousand at most (the "massive
// activations" of Sun et al., 2024); a hop that sends f16 cannot exceed
// 65504 at all. NaN, an infinity or a value beyond it is refused at once.
// A bound relative to a position's RMS would catch nothing: no element of
// a vector of n values exceeds sqrt(n) times its RMS.
const MaxActivation = 1e6

// ErrBadNumbers: hidden states or logits hold NaN, infinities or values
// beyond MaxActivation.
var ErrBadNumbers = errors.New("pipeline: NaN, infinite or absurd numbers")

// checkNumbers reports the first value that is NaN, infinite or beyond
// MaxActivation.
func checkNumbers(xs []float32) error {
	for i, x := range xs {
		if x != x || x > MaxActivation || x < -MaxActivation {
			return fmt.Errorf("%w: %g at index %d of %d", ErrBadNumbers, x, i, len(xs))
		}
	}
	return nil
}

// checkResult checks the result of a step of n positions in a session
// opened with open, on a model of vocab tokens (0: not known): its session,
// a token inside the vocabulary, or logits (hidden states, for a probe)
// of the right count and with sane numbers; for a verify step, a token
// inside the vocabulary for each position.
func checkResult(r *Result, open *Open, vocab int, session uint64, n int, verify bool) error {
	if r.Session != session {
		return fmt.Errorf("result for session %d on session %d", r.Session, session)
	}
	if verify != (len(r.Tokens) > 0) {
		return fmt.Errorf("%d tokens of a verify step for a step of %d positions (verify %v)", len(r.Tokens), n, verify)
	}
	if verify {
		if len(r.Tokens) != n || len(r.Logits) != 0 || r.Token != r.Tokens[n-1] {
			return fmt.Errorf("a verify step of %d positions came back with %d tokens, %d logits, token %d", n, len(r.Tokens), len(r.Logits), r.Token)
		}
		for _, t := range r.Tokens {
			if t < 0 || vocab > 0 && int(t) >= vocab {
				return fmt.Errorf("token id %d outside the vocabulary of %d", t, vocab)
			}
		}
		return nil
	}
	switch {
	case open.probe():
		if want := n * open.Hidden; len(r.Logits) != want {
			return fmt.Errorf("%d hidden-state values for %d positions, want %d", len(r.Logits), n, want)
		}
	case open.Logits:
		if len(r.Logits) == 0 || vocab > 0 && len(r.Logits) != vocab {
			return fmt.Errorf("%d logits for a vocabulary of %d", len(r.Logits), vocab)
		}
	default:
		if len(r.Logits) != 0 {
			return fmt.Errorf("%d logits where a token was asked for", len(r.Logits))
		}
		if r.Token < 0 || vocab > 0 && int(r.Token) >= vocab {
			return fmt.Errorf("token id %d outside the vocabulary of %d", r.Token, vocab)
		}
		return nil
	}
	return checkNumbers(r.Logits)
}

// mayName reports whether an error frame that came back to Route[index]
// from the next hop may name the hop it names: the next hop or one after
// it, or, for bad input, the hop at index itself (whose output the next
// hop refused).
func (o *Open) mayName(index int, we *WireError) bool {
	for i := index; i < len(o.Route); i++ {
		h := o.Route[i]
		if h.Peer == we.Peer && h.Start == we.Start && h.End == we.End && (i > index || we.Code == CodeBadInput) {
			return true
		}
	}
	return false
}
