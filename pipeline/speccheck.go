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

// Spot checks of speculative answers. A checked generation with a draft
// speculates on both routes: the check route is fed the same verify steps
// (and the same plain ones) as the primary, both opened for verify steps
// without logits, so a hop cannot tell a checked session from another,
// and a hop that lies only in verify sessions is checked as well as one
// that lies in any. The routes' tokens are compared up to the first
// proposal the primary refused. Where they differ (a liar, or a near tie
// that rounds apart), drafting stops, the tokens both agree on are kept,
// both routes are opened again with logits and replay the answer, and the
// next step is compared by logits as in any checked generation: a liar
// that goes on lying is found there (spotcheck.go); a route whose verify
// token those agreed logits contradict beyond the tolerance lied in its
// verify step, and its peers are avoided from then on.

// specCheck is where a generation's speculative spot checks stand.
type specCheck struct {
	settling  *disagreement   // to settle by logits at the next step
	disagreed *disagreement   // the last settled, for judgeVerify
	resync    bool            // both routes to be opened again alike
	recheck   bool            // a check route to start before the next step
	distrust  map[string]bool // peers a check found lying: never credited
}

// feedAt queues a step of a speculating check route: tokens at position
// at, a verify step or not.
func (s *standby) feedAt(tokens []int32, step, at int, verify bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.err != nil {
		return
	}
	s.push(standbyItem{tokens: slices.Clone(tokens), step: step, at: at, verify: verify})
}

// checking reports whether a check route runs beside a speculating
// primary (fed verify and plain steps at their positions).
func (g *generation) checking() bool {
	return g.sb != nil && g.sb.check && g.chain != nil && g.chain.open.Verify
}

// disagreement is where the two routes of a speculative spot check chose
// different tokens: the tokens both agreed on before it, and each route's
// choice there.
type disagreement struct {
	k            int     // the answer's length at the disagreement
	agreed       []int32 // the round's tokens both routes chose first
	main, second int32
	hops, other  []Hop
}

func (d *disagreement) Error() string {
	return fmt.Sprintf("the spot check's route chose token %d where this route chose %d, %d tokens into the round",
		d.second, d.main, len(d.agreed))
}

// checkRound compares a step's result with the check route's (fed the
// same step before it): nil when they agree on every token up to the
// first proposal the primary refused (a verify step: tokens[1:] are the
// proposals; a plain one: its token); a *disagreement otherwise. A check
// route that fails is replaced, the step going unchecked.
func (g *generation) checkRound(ctx context.Context, k int, tokens []int32, res *Result) error {
	s := g.sb
	var sres *Result
	err := g.watched(ctx, s.hops, g.expect(tokens, nil), func(ctx context.Context) (err error) {
		sres, err = s.result(ctx, k)
		return err
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	mine, theirs := chosen(res), []int32(nil)
	if err != nil {
		// Mid-round, a new check route could not replay what this round
		// adds: it starts before the next step.
		g.checkFailed(err)
		g.sc.recheck = true
		return nil
	}
	if theirs = chosen(sres); len(theirs) != len(mine) || len(sres.Logits) != len(res.Logits) {
		// The routes do not run alike (one was opened again without
		// verify steps): both are opened again before the next step.
		g.sc.resync = true
		return nil
	}
	for i, t := range mine {
		if theirs[i] != t {
			return &disagreement{k: k, agreed: slices.Clone(tokens[1 : i+1]), main: t, second: theirs[i],
				hops: slices.Clone(g.hops), other: slices.Clone(s.hops)}
		}
		if i+1 >= len(tokens) || tokens[i+1] != t {
			break // the primary refused the next proposal: nothing after counts
		}
	}
	g.passCheck(s)
	return nil
}

// chosen is the tokens a result chose: a verify step's, or a step's one.
func chosen(r *Result) []int32 {
	if len(r.Tokens) > 0 {
		return r.Tokens
	}
	return []int32{r.Token}
}

// passCheck counts a step both routes agreed on, crediting their hops
// but those a check found lying.
func (g *generation) passCheck(s *standby) {
	g.res.SpotChecked++
	for _, h := range append(slices.Clone(g.hops), s.hops...) {
		if !g.sc.distrust[h.Peer] {
			g.passed[h] = true
		}
	}
}

// checkFailed leaves out a check route that failed, blaming a hop its
// error proves.
func (g *generation) checkFailed(err error) {
	g.o.log().Info("pipeline: the spot-check route failed; checking on another", "err", err)
	g.closeShadow()
	var se *StageError
	if errors.As(err, &se) && se.Evidence != "" && se.Evidence != EvidenceStall {
		g.apply(&fault{peer: se.Peer, layers: se.Layers, reason: se.Err.Error(), evidence: se.Evidence, proven: true,
			output: se.Evidence == EvidenceCheck})
	}
}

// restartCheck starts the check route a round left out, now that the
// answer so far can be replayed on it.
func (g *generation) restartCheck(ctx context.Context) {
	if g.sc.recheck {
		g.sc.recheck = false
		if g.sb == nil && g.check {
			g.sb = g.startStandby(ctx, true)
		}
	}
}

// modesDiffer reports whether the check route runs otherwise than the
// primary (logits against verify steps): they must be opened again alike.
func (g *generation) modesDiffer() bool {
	return g.sb != nil && g.sb.check && g.chain != nil &&
		(g.sb.c.open.Logits != g.chain.open.Logits || g.sb.c.open.Verify != g.chain.open.Verify)
}

// plainAgain goes on without the draft after a round failed (why): a
// checked generation opens both routes again by logits (settle); another
// takes a plain step where the round began on this route, or, when a hop
// had no room for the round (full), opens the route again plain.
func (g *generation) plainAgain(ctx context.Context, input []int32, why error, full bool) (*Result, time.Duration, bool, error) {
	g.dropDraft(why)
	switch {
	case g.check:
		res, took, err := g.settle(ctx, nil)
		return res, took, false, err
	case full:
		res, took, err := g.reopenPlain(ctx)
		return res, took, false, err
	}
	g.chain.rewind(len(g.prompt) + len(g.res.Tokens) - 1) // where input goes
	res, took, err := g.step(ctx, g.chain, g.hops, input, nil)
	return res, took, err == nil, err
}

// settle goes on after a disagreement (d; nil: after drafting stopped,
// or when the routes run otherwise): drafting stops, and both routes are
// opened again with logits, replaying the answer so far (the caller has
// added the agreed tokens); the step's result comes back, to be compared
// by logits (confirm), after which judgeVerify weighs the verify tokens.
func (g *generation) settle(ctx context.Context, d *disagreement) (*Result, time.Duration, error) {
	var why error = errors.New("the spot check goes on by logits")
	if d != nil {
		g.o.log().Warn("pipeline: spot check of a speculative answer disagrees; checking by logits", "at_token", d.k+len(d.agreed), "err", d)
		d.k += len(d.agreed)
		g.sc.disagreed, why = d, d
	}
	g.dropDraft(why)
	g.closeShadow()
	res, took, err := g.reopenPlain(ctx)
	if err != nil {
		return nil, took, err
	}
	g.sb = g.startStandby(ctx, true)
	return res, took, nil
}

// judgeVerify, once the step after a disagreement has been confirmed by logits
// (res, agreed by both routes), finds which route's verify token those
// logits contradict beyond the tolerance: that route lied in its verify
// step (a near tie rounds within it), and its peers are avoided.
func (g *generation) judgeVerify(k int, res *Result) {
	d := g.sc.disagreed
	if d == nil || d.k != k || len(res.Logits) == 0 {
		return
	}
	g.sc.disagreed = nil
	l := res.Logits
	best := engine.Greedy(l)
	scale := 1.0
	for _, v := range l {
		scale = max(scale, float64(v), -float64(v))
	}
	tol := g.routesTolerance(d.hops, d.other)
	for _, side := range []struct {
		tok  int32
		hops []Hop
	}{{d.main, d.hops}, {d.second, d.other}} {
		if side.tok < 0 || int(side.tok) >= len(l) {
			continue
		}
		if gap := float64(l[best]-l[side.tok]) / scale; gap > tol {
			f := &fault{code: "mismatch", evidence: EvidenceUndecided, suspects: remotePeers(side.hops, g.o.Host.ID().String()),
				reason: fmt.Sprintf("a verify step chose token %d at token %d where the checked logits prefer %d by %.3g (tolerance %g)",
					side.tok, k, best, gap, tol)}
			g.apply(f)
			if g.sc.distrust == nil {
				g.sc.distrust = map[string]bool{}
			}
			for _, p := range f.suspects { // no credit for this generation's checks
				g.sc.distrust[p] = true
				for h := range g.passed {
					if h.Peer == p {
						delete(g.passed, h)
					}
				}
			}
			g.res.Mismatches++
			g.trace(answer.Trace{Kind: "mismatch", AtToken: k, Reason: f.reason, Evidence: f.evidence, Suspects: f.suspects})
		}
	}
}
