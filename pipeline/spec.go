package pipeline

import (
	"context"
	"errors"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// chainSpec is an open route as the target of speculative decoding
// (engine.Speculate): a draft of k tokens and the token before it cross
// every hop as one verify step, and the last stage returns the token it
// chose after each position; positions past what was accepted are dropped
// on every stage by the next step, which starts where the answer goes on
// (chain.rewind). The session must be opened with Open.Verify.
type chainSpec struct{ c *chain }

func (s *chainSpec) Pos() int { return s.c.pos }

func (s *chainSpec) Truncate(n int) error {
	if n < 0 || n > s.c.pos {
		return errors.New("pipeline: truncate past the route's end")
	}
	s.c.rewind(n)
	return nil
}

func (s *chainSpec) Prefill(ctx context.Context, tokens []int32) (int32, error) {
	res, _, err := s.c.step(ctx, tokens, nil)
	if err != nil {
		return -1, err
	}
	return res.Token, nil
}

func (s *chainSpec) Next(ctx context.Context, tokens []int32) ([]int32, error) {
	res, _, err := s.c.verify(ctx, tokens)
	if err != nil {
		return nil, err
	}
	return res.Tokens, nil
}

var _ engine.SpecModel = (*chainSpec)(nil)
