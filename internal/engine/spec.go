package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Speculative decoding. A draft model (small, fast, with the target's
// vocabulary) proposes k tokens one by one; the target runs the last
// accepted token and the k proposals as one step and chooses its own token
// after each position. The proposals are accepted up to the first that
// differs from the target's choice, and the target's token there comes
// free: each round yields between 1 and k+1 tokens for one target step.
// Both models are then truncated past what was accepted.
//
// Greedy, the target's choice is its argmax: the tokens are the target's
// greedy tokens. A step of several positions rounds differently from
// single-position steps (as a batch does, see batch.go), so they are those
// of plain greedy decoding except where the target's two best logits are
// within that rounding. Sampling, the target decides each proposal by the
// speculative sampling rule (specsample.go), so the answer follows the
// target's distribution exactly.
//
// The target may be a local session (SessionSpec) or a pipeline whose last
// stage chooses the token of every position of a step.

// SpecModel is one side of speculative decoding: a model's session.
type SpecModel interface {
	// Pos is how many positions the session holds.
	Pos() int
	// Prefill runs tokens at the positions after Pos and returns the token
	// its sampler chose after the last (a prompt, or a draft's proposal)
	// and, when it sampled, the distribution it drew that token from.
	Prefill(ctx context.Context, tokens []int32) (int32, Dist, error)
	// Next runs tokens (at most MaxSpecK+1: the token before a draft and
	// the draft) at the positions after Pos and returns the token chosen
	// after each (len(tokens) tokens), as Sampler.VerifyDraft does: q[i]
	// is the distribution tokens[i+1] was drawn from (nil, or an empty
	// entry: a proposal certain to its draft).
	Next(ctx context.Context, tokens []int32, q []Dist) ([]int32, error)
	// Truncate drops the positions from n on.
	Truncate(n int) error
}

// Proposer is a draft that proposes a round at once: a remote draft, one
// round trip a round. Propose runs tokens at the positions after Pos and
// proposes up to n tokens, each after the one before, with the
// distributions they were drawn from (nil: certain to the draft); the
// draft then holds tokens and every proposal but the last.
type Proposer interface {
	Propose(ctx context.Context, tokens []int32, n int) ([]int32, []Dist, error)
}

// MaxSpecK bounds a draft's length: a verify step is the token before the
// draft and the draft, at most MaxSpecK+1 positions, whose logits the
// target's last stage holds at once.
const MaxSpecK = 32

// SpecOptions tune Speculate. The zero value is usable.
type SpecOptions struct {
	// K is the first round's draft length (default 4); it adapts by
	// acceptance (NewSpecK) within [1, MaxK].
	K int
	// MaxK bounds the draft length (default 8, at most MaxSpecK).
	MaxK int
	// MaxTokens ends the answer after this many tokens (default 256).
	MaxTokens int
	// Context is the target's capacity in positions (0: not known). With
	// it, drafts shrink to what still fits and Speculate returns
	// ErrContextFull once the answer has filled it; without it, the
	// target's own ErrContextFull ends the answer, possibly a round early.
	// A draft that runs out of room stops drafting; the target goes on.
	Context int
	// OnToken sees each accepted token in order; returning false ends the
	// answer after it (an end-of-generation token, a stop string).
	OnToken func(tok int32) bool
	// OnRound sees each round: how many tokens were proposed and how many
	// of them the target accepted.
	OnRound func(proposed, accepted int)
}

// SpecStats sums up a speculative answer.
type SpecStats struct {
	Tokens   int // tokens produced
	Rounds   int // target steps after the prompt
	Proposed int // draft tokens proposed
	Accepted int // of them accepted
}

// ErrSpec wraps a model that broke SpecModel's contract.
var ErrSpec = errors.New("engine: speculative decoding")

// ErrDraft marks a failure of the draft model in a round: the target is
// untouched, and its caller may go on without drafting.
var ErrDraft = errors.New("engine: draft model")

// SpecRound is one round after hist (the prompt and the answer so far):
// the target holds hist but its last token and the draft a prefix of hist.
// The draft proposes up to n tokens (fewer where it runs out of room), the
// target verifies them with hist's last token in one step, and both are
// truncated past what it accepted. It returns the tokens the round adds
// (the accepted drafts and the target's own next token, at least one) and
// the drafts proposed; the target then holds hist and all of add but its
// last. A draft failure is ErrDraft, with the target consistent.
func SpecRound(ctx context.Context, target, draft SpecModel, hist []int32, n int) (add, drafts []int32, err error) {
	add, drafts, _, err = specRound(ctx, target, draft, hist, n)
	return add, drafts, err
}

// specRound is SpecRound, also returning how long the draft took.
func specRound(ctx context.Context, target, draft SpecModel, hist []int32, n int) (add, drafts []int32, took time.Duration, err error) {
	if draft.Pos() > len(hist)-1 {
		return nil, nil, took, fmt.Errorf("%w: %w: the draft holds %d positions, the answer so far %d", ErrDraft, ErrSpec, draft.Pos(), len(hist)-1)
	}
	if len(hist) == 0 || target.Pos() != len(hist)-1 || n < 0 || n > MaxSpecK {
		return nil, nil, took, fmt.Errorf("%w: a round after %d tokens with the target at %d, the draft at %d, %d drafts",
			ErrSpec, len(hist), target.Pos(), draft.Pos(), n)
	}
	t0 := time.Now()
	drafts, qs, err := propose(ctx, draft, hist[draft.Pos():], n)
	took = time.Since(t0)
	if err != nil {
		return nil, nil, took, err
	}
	base := len(hist) - 1
	toks := append([]int32{hist[base]}, drafts...)
	got, err := target.Next(ctx, toks, qs)
	if err == nil && len(got) != len(toks) {
		err = fmt.Errorf("%w: %d tokens in, %d greedy tokens back", ErrSpec, len(toks), len(got))
	}
	if err != nil {
		// The target failed (its caller recovers it, or gives up): the
		// draft forgets its proposals, to start the next round after hist.
		// Should that fail too, the next round finds the draft ahead of
		// hist and reports it then; the error now is the target's.
		_ = draft.Truncate(min(draft.Pos(), base))
		return nil, drafts, took, err
	}
	j := 0
	for j < len(drafts) && drafts[j] == got[j] {
		j++
	}
	// Keep the target's positions of hist's last token and the accepted
	// drafts; the draft keeps what it ran of those.
	if err := target.Truncate(base + 1 + j); err != nil {
		return nil, drafts, took, err
	}
	if err := draft.Truncate(min(draft.Pos(), base+1+j)); err != nil {
		return nil, drafts, took, fmt.Errorf("%w: %w", ErrDraft, err)
	}
	return append(drafts[:j:j], got[j]), drafts, took, nil
}

// propose has draft propose up to n tokens after in.
func propose(ctx context.Context, draft SpecModel, in []int32, n int) (drafts []int32, qs []Dist, err error) {
	if p, ok := draft.(Proposer); ok {
		if n == 0 {
			return nil, nil, nil
		}
		drafts, qs, err = p.Propose(ctx, in, n)
		switch {
		case errors.Is(err, ErrContextFull):
			return nil, nil, nil // the draft is full: the target goes on with what it has
		case err != nil:
			return nil, nil, fmt.Errorf("%w: %w", ErrDraft, err)
		case len(drafts) == 0 || len(drafts) > n || (qs != nil && len(qs) != len(drafts)):
			return nil, nil, fmt.Errorf("%w: %w: %d proposals with %d distributions for %d asked", ErrDraft, ErrSpec, len(drafts), len(qs), n)
		}
		return drafts, qs, nil
	}
	drafts = make([]int32, 0, n)
	for len(drafts) < n {
		d, q, err := draft.Prefill(ctx, in)
		if errors.Is(err, ErrContextFull) {
			break // the draft is full: the target goes on with what it has
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrDraft, err)
		}
		if len(q.IDs) > 0 && qs == nil {
			qs = make([]Dist, len(drafts), n)
		}
		if qs != nil {
			qs = append(qs, q)
		}
		drafts = append(drafts, d)
		in = []int32{d}
	}
	return drafts, qs, nil
}

// Speculate answers prompt with target's greedy tokens, drafted by draft.
// Both sessions must be empty (Pos 0).
func Speculate(ctx context.Context, target, draft SpecModel, prompt []int32, o SpecOptions) (SpecStats, error) {
	var st SpecStats
	if len(prompt) == 0 {
		return st, fmt.Errorf("%w: empty prompt", ErrBadInput)
	}
	if target.Pos() != 0 || draft.Pos() != 0 {
		return st, fmt.Errorf("%w: sessions must start empty (target at %d, draft at %d)", ErrBadInput, target.Pos(), draft.Pos())
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 256
	}
	k := NewSpecK(o.K, o.MaxK)
	first, _, err := target.Prefill(ctx, prompt)
	if err != nil {
		return st, err
	}
	hist := append(append(make([]int32, 0, len(prompt)+o.MaxTokens+MaxSpecK), prompt...), first)
	emit := func(tok int32) bool {
		st.Tokens++
		keep := o.OnToken == nil || o.OnToken(tok)
		return keep && st.Tokens < o.MaxTokens
	}
	if !emit(first) {
		return st, nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		n := o.MaxTokens - st.Tokens - 1 // with the target's own token, the end
		if o.Context > 0 {
			// The step adds the last token and the drafts.
			room := o.Context - len(hist)
			if room < 0 {
				return st, fmt.Errorf("%w: the answer filled the target's %d positions", ErrContextFull, o.Context)
			}
			n = min(n, room)
		}
		add, drafts, err := k.Round(ctx, target, draft, hist, n)
		proposed := len(drafts)
		if err != nil {
			if errors.Is(err, ErrDraft) {
				return st, fmt.Errorf("draft: %w", err)
			}
			return st, err
		}
		st.Rounds++
		st.Proposed += proposed
		st.Accepted += len(add) - 1
		if o.OnRound != nil {
			o.OnRound(proposed, len(add)-1)
		}
		for _, tok := range add {
			hist = append(hist, tok)
			if !emit(tok) {
				// Ended inside the round: neither session keeps a
				// position past the answer's last token.
				if err := target.Truncate(min(target.Pos(), len(hist)-1)); err != nil {
					return st, err
				}
				return st, draft.Truncate(min(draft.Pos(), len(hist)-1))
			}
		}
	}
}

// SessionSpec is a local session, empty at first, as a SpecModel that
// chooses tokens as a step of a route sampling with o would: greedily
// after o's repetition penalty when o's temperature is 0, else drawn with
// o's seed (and proposals decided by the speculative sampling rule).
func SessionSpec(s *Session, o SamplerOptions) SpecModel {
	return &sessionSpec{s: s, sampler: NewSampler(o)}
}

// SessionDraft is SessionSpec for a draft: a sampling draft draws from
// its MaxDistCands best candidates, with a random stream of its own (its
// draws must not be the target's, which decide its proposals).
func SessionDraft(s *Session, o SamplerOptions) SpecModel {
	o.Seed = o.Seed*0x9e3779b97f4a7c15 + 0xd1b54a32d192ed03
	return &sessionSpec{s: s, sampler: NewSampler(o), draft: true}
}

type sessionSpec struct {
	s       *Session
	sampler *Sampler
	draft   bool
	hist    []int32 // the token at each position the session holds
}

func (p *sessionSpec) Pos() int { return p.s.Pos() }

func (p *sessionSpec) Truncate(n int) error {
	if err := p.s.Truncate(n); err != nil {
		return err
	}
	p.hist = p.hist[:min(n, len(p.hist))]
	return nil
}

func (p *sessionSpec) Prefill(ctx context.Context, tokens []int32) (int32, Dist, error) {
	if p.s.Pos() != len(p.hist) {
		return -1, Dist{}, fmt.Errorf("%w: the session holds %d positions this draft did not run", ErrSpec, p.s.Pos()-len(p.hist))
	}
	logits, err := p.s.RunRange(ctx, 0, p.s.m.info.Layers, tokens, nil)
	if err != nil {
		return -1, Dist{}, err
	}
	p.hist = append(p.hist, tokens...)
	if p.draft {
		return p.sampler.Propose(logits, p.hist)
	}
	tok, err := p.sampler.Sample(logits, p.hist)
	return tok, Dist{}, err
}

func (p *sessionSpec) Next(ctx context.Context, tokens []int32, q []Dist) ([]int32, error) {
	if p.s.Pos() != len(p.hist) {
		return nil, fmt.Errorf("%w: the session holds %d positions this draft did not run", ErrSpec, p.s.Pos()-len(p.hist))
	}
	if len(tokens) > MaxSpecK+1 {
		return nil, fmt.Errorf("%w: %d positions to verify, at most %d", ErrBadInput, len(tokens), MaxSpecK+1)
	}
	L := p.s.m.info.Layers
	logits, err := p.s.RunRangeAll(ctx, 0, L, tokens, nil)
	if err != nil {
		return nil, err
	}
	p.hist = append(p.hist, tokens...)
	return p.sampler.VerifyDraft(logits, p.s.m.info.VocabSize, p.hist, tokens, q)
}
