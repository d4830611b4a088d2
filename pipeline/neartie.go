package pipeline

import (
	"context"
	"math"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// Two honest routes whose peers compute with other kernels (another CPU,
// another build) give logits that differ within the tolerance, and where
// the best two tokens are that close they choose differently: a spot-check
// comparing tokens alone then sees a disagreement no one lied in. Measured
// on the synthetic q4_k models, a route of peers with ggml's repacked
// kernels against one without chose other tokens at 20 of 67 greedy steps
// of qwen3 and 40 of 56 of qwen3moe (flat random logits have many near
// ties; trained models fewer), each of them settled by probes and replays
// that found nobody and put the layers under dispute
// (TestHonestMixedKernelsNeverConvict).

// nearTie reports whether two routes that chose other tokens at one step
// (chose: this route's, the check route's) did so honestly: last holds
// each route's logits for the step, computed by its own peers from one
// input (bisect: every range agreed within tol), and each token wins its
// route's logits, or wins once they move by tol of their scale in its
// favour, under the generation's sampling (greedy, with its penalties).
// A lying last hop can so choose a token only within the tolerance, which
// the spot-check allows anyway.
func (g *generation) nearTie(last [2][]float32, chose [2]int32, tol float64) bool {
	history, _ := g.history()
	for i, logits := range last {
		if !canWin(logits, chose[i], tol, history, g.req.Sampling) {
			return false
		}
	}
	return true
}

// canWin reports whether t is what sampling picks from logits moved by up
// to tol of their largest magnitude (at least 1) in t's favour.
func canWin(logits []float32, t int32, tol float64, history []int32, s engine.Sampling) bool {
	if t < 0 || int(t) >= len(logits) || tol <= 0 {
		return false
	}
	scale := 1.0
	for _, v := range logits {
		scale = max(scale, math.Abs(float64(v)))
	}
	d := float32(tol * scale)
	moved := make([]float32, len(logits))
	for i, v := range logits {
		moved[i] = v - d
	}
	moved[t] = logits[t] + d
	got, err := engine.NewSampler(s.Options()).Sample(moved, history)
	return err == nil && got == t
}

// resume reopens route hops after a spot-check's probes ended it, and
// replays the history: the step's result is that route's again.
func (g *generation) resume(ctx context.Context, hops []Hop) (*Result, error) {
	c, err := g.open(ctx, hops)
	if err != nil {
		return nil, err
	}
	replay, shapes := g.history()
	res, _, err := g.step(ctx, c, hops, replay, shapes)
	if err != nil {
		c.st.Reset()
		return nil, err
	}
	g.chain = c
	g.switchTo(hops, c)
	if g.wantShadow() && g.sb == nil {
		g.sb = g.startStandby(ctx, true)
	}
	return res, nil
}
