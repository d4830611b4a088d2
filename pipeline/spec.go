package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/internal/engine"
)

// chainSpec is an open route as the target of speculative decoding
// (engine.Speculate): a draft of k tokens and the token before it cross
// every hop as one verify step, and the last stage returns the token it
// chose after each position; positions past what was accepted are dropped
// on every stage by the next step, which starts where the answer goes on
// (chain.rewind). The session must be opened with Open.Verify.
type chainSpec struct {
	c *chain
	// run sends a verify step (nil: c.verify); a generation's also
	// watches the route's progress.
	run func(ctx context.Context, tokens []int32, q []engine.Dist) (*Result, error)
}

func (s *chainSpec) Pos() int { return s.c.pos }

func (s *chainSpec) Truncate(n int) error {
	if n < 0 || n > s.c.pos {
		return errors.New("pipeline: truncate past the route's end")
	}
	s.c.rewind(n)
	return nil
}

func (s *chainSpec) Prefill(ctx context.Context, tokens []int32) (int32, engine.Dist, error) {
	res, _, err := s.c.step(ctx, tokens, nil)
	if err != nil {
		return -1, engine.Dist{}, err
	}
	return res.Token, engine.Dist{}, nil
}

func (s *chainSpec) Next(ctx context.Context, tokens []int32, q []engine.Dist) ([]int32, error) {
	for i, d := range q {
		if d.Check(s.c.vocab, tokens[i+1]) != nil || len(q) != len(tokens)-1 || s.c.open.Sampling.Temperature <= 0 {
			// Not a distribution the first hop would take (and blame
			// itself for): the proposals go as certain to the draft.
			q = nil
			break
		}
	}
	var res *Result
	var err error
	if s.run != nil {
		res, err = s.run(ctx, tokens, q)
	} else {
		res, _, err = s.c.verify(ctx, tokens, q)
	}
	if err != nil {
		return nil, err
	}
	return res.Tokens, nil
}

// drafting is a generation's draft: none while model is nil.
type drafting struct {
	model  engine.SpecModel
	close  func()
	ready  chan error // the draft's run of the prompt, beside the route's
	cancel func()     // ends that run
	k      *engine.SpecK
}

// speculating reports whether the next step is a speculative round: a
// draft, a route opened for verify steps, and no standby beside it (a
// standby is fed plain steps; a check route verifies the same rounds,
// speccheck.go).
func (g *generation) speculating() bool {
	return g.dr.model != nil && g.chain != nil && g.chain.open.Verify && (g.sb == nil || g.sb.check)
}

// startDraft gives the generation its draft, where it may speculate.
func (g *generation) startDraft(ctx context.Context) {
	if !g.req.Speculate || g.o.Drafter == nil || g.req.Logits || g.req.Standby || (g.check && g.req.Sampling.Temperature > 0) {
		return // a standby is fed plain steps; a sampled answer is checked by logits
	}
	if why := engine.NoRewind(g.tok.Arch()); why != "" {
		// A rejected draft rolls the route's sessions back.
		g.o.log().Info("pipeline: no draft; decoding plainly", "model", g.ref.CID, "why", why)
		return
	}
	d, closeDraft, err := g.o.Drafter(ctx, g.ref, g.tok, g.req.Sampling)
	if err != nil {
		g.o.log().Info("pipeline: no draft; decoding plainly", "err", err)
		return
	}
	g.dr.model, g.dr.close, g.dr.k = d, closeDraft, engine.NewSpecCost(g.req.DraftMin, g.req.DraftMax)
	// The draft runs the prompt while the route does: its first round then
	// costs its proposals only. Dropping the draft cancels the run.
	pctx, cancel := context.WithCancel(ctx)
	ready := make(chan error, 1)
	g.dr.ready, g.dr.cancel = ready, cancel
	go func() {
		_, _, err := d.Prefill(pctx, g.prompt)
		ready <- err
	}()
}

// draftPrompt waits for the draft's run of the prompt.
func (g *generation) draftPrompt() error {
	if g.dr.ready == nil {
		return nil
	}
	err := <-g.dr.ready
	g.dr.cancel()
	g.dr.ready, g.dr.cancel = nil, nil
	if err != nil {
		return fmt.Errorf("%w: the prompt: %w", engine.ErrDraft, err)
	}
	return nil
}

// dropDraft goes on without drafting.
func (g *generation) dropDraft(why error) {
	if g.dr.model == nil {
		return
	}
	if why != nil {
		g.o.log().Info("pipeline: drafting stopped; decoding plainly", "err", why)
	}
	if g.dr.cancel != nil {
		g.dr.cancel() // the prompt's run, if it still goes on
	}
	g.draftPrompt() // not closed under its own run
	g.dr.close()
	g.dr.model, g.dr.close = nil, nil
}

// reopenPlain opens the current route again without verify steps and
// replays the answer so far on it, returning the result of its last token:
// a speculative round's way back to plain decoding when a hop had no room
// for it. A failure here is the route's, recovered as any other.
func (g *generation) reopenPlain(ctx context.Context) (*Result, time.Duration, error) {
	if g.chain != nil {
		g.chain.close()
		g.chain = nil
	}
	c, err := g.open(ctx, g.hops)
	if err != nil {
		return nil, 0, err
	}
	g.chain = c
	replay, shapes := g.history()
	return g.step(ctx, c, g.hops, replay, shapes)
}

// specStep runs one speculative round on the current route after the
// answer so far, whose last token the route has not run yet: the draft
// proposes, the route verifies in one step, and the tokens accepted and
// the route's own next one come back.
func (g *generation) specStep(ctx context.Context) ([]int32, time.Duration, error) {
	if err := g.draftPrompt(); err != nil {
		return nil, 0, err
	}
	hist := append(slices.Clone(g.prompt), g.res.Tokens...)
	n := engine.MaxSpecK
	if g.req.MaxTokens > 0 {
		n = min(n, g.req.MaxTokens-len(g.res.Tokens)-1) // with the route's own token, the answer's end
	}
	k := len(g.res.Tokens)
	var verified *Result // the round's verify step, for the hops' timings
	var verifyTook time.Duration
	target := &chainSpec{c: g.chain, run: func(ctx context.Context, tokens []int32, q []engine.Dist) (res *Result, err error) {
		t0 := time.Now()
		checked := g.checking()
		if checked { // both routes run the round at once
			g.sb.feedAt(tokens, k, len(hist)-1, true)
		}
		err = g.watched(ctx, g.hops, g.expect(tokens, nil), func(ctx context.Context) (err error) {
			res, _, err = g.chain.verify(ctx, tokens, q)
			return err
		})
		verified, verifyTook = res, time.Since(t0)
		if err == nil && checked {
			if err = g.checkRound(ctx, k, tokens, res); err != nil {
				return nil, err
			}
		}
		if err == nil {
			// A verify step costs about a decode step where round trips
			// dominate: the hang watch's estimate goes on from it.
			if took := time.Since(t0); g.stepEst == 0 {
				g.stepEst = took
			} else {
				g.stepEst = (3*g.stepEst + took) / 4
			}
		}
		return res, err
	}}
	t0 := time.Now()
	add, drafts, err := g.dr.k.Round(ctx, target, g.dr.model, hist, n)
	took := time.Since(t0)
	if err != nil {
		return nil, took, err
	}
	accepted := len(add) - 1
	if verified != nil {
		// The hops' compute and transfer per token count the round once,
		// spread over the tokens it gave.
		g.account(verified, verifyTook)
		g.decodes += len(add) - 1
	}
	g.res.Drafted += len(drafts)
	g.res.DraftAccepted += accepted
	if !g.checking() && accepted > 0 {
		g.noteAccepted(len(g.res.Tokens), accepted, g.hops) // a checked round was compared as it ran
	}
	g.res.DraftRounds++
	g.trace(answer.Trace{Kind: "draft", AtToken: len(g.res.Tokens), Drafted: drafts,
		Accepted: accepted})
	return add, took, nil
}

var _ engine.SpecModel = (*chainSpec)(nil)
