package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	// audit is the accepted draft token the answer's audit asks about
	// (auditVerify), drawn uniformly among those not spot-checked; seen
	// counts them.
	audit *auditPick
	seen  int
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
			g.lost.compared = true
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
	g.lost.compared = true
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
	g.lost.why = "the check route failed: " + err.Error()
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
// step (a near tie rounds within it). Its last hop, which chose the
// token, is asked again on its own (convictVerify): caught contradicting
// itself, it alone is convicted; otherwise the route's peers are avoided,
// nobody convicted.
func (g *generation) judgeVerify(ctx context.Context, k int, res *Result) {
	d := g.sc.disagreed
	if d == nil || d.k != k || len(res.Logits) == 0 {
		return
	}
	g.sc.disagreed = nil
	hist := append(slices.Clone(g.prompt), g.res.Tokens[:k]...)
	l := penalized(res.Logits, hist, g.req.Sampling.Options())
	best := engine.Greedy(l)
	tol := g.routesTolerance(d.hops, d.other)
	for _, side := range []struct {
		tok  int32
		hops []Hop
	}{{d.main, d.hops}, {d.second, d.other}} {
		if side.tok < 0 || int(side.tok) >= len(l) {
			continue
		}
		gap := logitGap(l, best, side.tok)
		if gap <= tol {
			continue
		}
		reason := fmt.Sprintf("a verify step chose token %d at token %d where the checked logits prefer %d by %.3g (tolerance %g)",
			side.tok, k, best, gap, tol)
		f := g.convictVerify(ctx, k, side.tok, side.hops)
		if f == nil {
			f = &fault{code: "mismatch", evidence: EvidenceUndecided, suspects: remotePeers(side.hops, g.o.Host.ID().String()),
				reason: reason}
		} else {
			f.reason = reason + "; " + f.reason
		}
		g.apply(f)
		if g.sc.distrust == nil {
			g.sc.distrust = map[string]bool{}
		}
		for _, p := range append(slices.Clone(f.suspects), f.peer) { // no credit for this generation's checks
			if p == "" {
				continue
			}
			g.sc.distrust[p] = true
			for h := range g.passed {
				if h.Peer == p {
					delete(g.passed, h)
				}
			}
		}
		g.res.Mismatches++
		g.trace(answer.Trace{Kind: "mismatch", AtToken: k, Failed: f.peer, Layers: f.layers, Reason: f.reason, Proven: f.proven,
			Evidence: f.evidence, Suspects: f.suspects})
	}
}

// EvidenceVerify: the peer, asked by this peer on its own stream, chose a
// verify token that its own logits for the same input contradict beyond
// the tolerance (convictVerify).
const EvidenceVerify = "verify_probe"

// convictVerify asks the last hop of a route whose verify step chose tok
// at token k (against the checked logits) to run that position again,
// alone, from this peer, twice on the same input: once as a verify step
// whose proposal is tok, once for its logits. The input is the history
// run through the route's earlier hops, each a probe from this peer; it
// need not be right: an honest hop's verify token is its own logits'
// choice whatever it is fed, so a hop whose two answers contradict each
// other beyond the tolerance lied, on evidence of its own numbers, and
// an honest hop never does. The fault returned convicts it; nil: nothing
// proven (the probes failed, or the hop agrees with itself, as a hop
// before it that changed the token on its way back would leave it).
func (g *generation) convictVerify(ctx context.Context, k int, tok int32, hops []Hop) *fault {
	self := g.o.Host.ID().String()
	if len(hops) == 0 || k < 1 || k > len(g.res.Tokens) {
		return nil
	}
	last := hops[len(hops)-1]
	if last.Peer == self || last.End != g.ref.Layers {
		return nil
	}
	hist := append(slices.Clone(g.prompt), g.res.Tokens[:k]...)
	all := append(slices.Clone(hist), tok)
	var hidden []float32
	for _, h := range hops[:len(hops)-1] {
		out, err := g.probe(ctx, h, all, hidden, nil)
		if err != nil {
			if lf := badNumbers(h, err); lf != nil && h.Peer != self {
				return lf
			}
			g.o.log().Info("pipeline: a probe for a verify step's check failed", "peer", h.Peer, "err", err)
			return nil
		}
		hidden = out
	}
	rows := func(n int) []float32 { // the first n positions' hidden states
		if hidden == nil {
			return nil
		}
		return hidden[:n*g.ref.Hidden]
	}
	logits, err := g.probe(ctx, last, hist, rows(len(hist)), nil)
	if err != nil {
		if lf := badNumbers(last, err); lf != nil {
			return lf
		}
		g.o.log().Info("pipeline: a logits probe for a verify step's check failed", "peer", last.Peer, "err", err)
		return nil
	}
	choice, err := g.verifyProbe(ctx, last, all, hidden)
	if err != nil {
		if lf := badNumbers(last, err); lf != nil {
			return lf
		}
		g.o.log().Info("pipeline: a verify probe failed", "peer", last.Peer, "err", err)
		return nil
	}
	l := penalized(logits, hist, g.req.Sampling.Options())
	best := engine.Greedy(l)
	// A conviction needs a clear miss, as the referee's does: ten times
	// the tolerance (or 1%). Over quantized weights, the loose bound
	// whatever the records say: a batching stage's two runs of one input
	// may round apart by up to 3.9e-2 (q4_k, "+batch").
	margin := max(10*g.o.SpotCheck.tolerance(), 1e-2, g.tolerance(self, last.Peer))
	if !g.ref.Float {
		margin = max(margin, quantCrossArch)
	}
	if choice < 0 || int(choice) >= len(l) {
		return nil // checkResult refused it already
	}
	gap := logitGap(l, best, choice)
	if gap <= margin {
		g.o.log().Info("pipeline: the last hop's verify step agrees with its own logits; nothing proven", "peer", last.Peer,
			"layers", [2]int{last.Start, last.End}, "chose", choice, "prefers", best, "gap", gap)
		return nil
	}
	return &fault{peer: last.Peer, layers: [2]int{last.Start, last.End}, code: "mismatch", evidence: EvidenceVerify,
		proven: true, output: true, reason: fmt.Sprintf("asked again alone, its verify step chose token %d where its own logits "+
			"for the same input prefer %d by %.3g (margin %g)", choice, best, gap, margin)}
}

// verifyProbe runs tokens through hop h alone as a verify session opened
// by this peer (hidden: the hop's input, f32, every position; nil from
// layer 0): all but the last two as a plain step, then those two as a
// verify step proposing the last. It returns the token the hop chose
// after the next-to-last.
func (g *generation) verifyProbe(ctx context.Context, h Hop, tokens []int32, hidden []float32) (int32, error) {
	open := Open{Session: rand.Uint64() | 1, Model: g.ref.CID, Layers: g.ref.Layers, Hidden: g.ref.Hidden, DType: DTypeF32,
		Sampling: g.req.Sampling, Verify: true, From: h.Start,
		Route: []RouteHop{{Peer: h.Peer, Start: h.Start, End: h.End}}}
	if h.Start == 0 {
		hidden = nil
	}
	n := len(tokens) - 2
	var rows func(a, b int) []float32
	rows = func(a, b int) []float32 {
		if hidden == nil {
			return nil
		}
		return hidden[a*g.ref.Hidden : b*g.ref.Hidden]
	}
	choice := int32(-1)
	err := g.watched(ctx, []Hop{h}, g.expect(tokens, nil), func(ctx context.Context) error {
		c, err := g.o.openChain(ctx, open)
		if err != nil {
			return err
		}
		defer c.close()
		c.vocab = g.tok.VocabSize()
		if _, _, err := c.stepHidden(ctx, tokens[:n], rows(0, n), nil); err != nil {
			return err
		}
		st := &Step{Session: open.Session, Pos: c.pos, Tokens: tokens[n:], Verify: true}
		if hidden != nil {
			st.DType, st.Hidden = dtF32, f32Bytes(rows(n, n+2))
		}
		res, _, err := c.send(ctx, st)
		if err != nil {
			return err
		}
		choice = res.Tokens[0]
		return nil
	})
	return choice, err
}

// penalized is logits with the repetition penalty o applies after history,
// as the sampler applies it before a greedy choice.
func penalized(logits []float32, history []int32, o engine.SamplerOptions) []float32 {
	l := slices.Clone(logits)
	p := o.RepeatPenalty
	if p <= 0 || p == 1 {
		return l
	}
	h := history
	if n := o.RepeatLastN; n == 0 && len(h) > 64 {
		h = h[len(h)-64:]
	} else if n > 0 && len(h) > n {
		h = h[len(h)-n:]
	}
	seen := map[int32]bool{}
	for _, id := range h {
		if id < 0 || int(id) >= len(l) || seen[id] {
			continue
		}
		seen[id] = true
		if l[id] > 0 {
			l[id] /= p
		} else {
			l[id] *= p
		}
	}
	return l
}

// logitGap is how far token tok's logit falls below best's, relative to
// the largest magnitude (at least 1).
func logitGap(l []float32, best, tok int32) float64 {
	scale := 1.0
	for _, v := range l {
		scale = max(scale, float64(v), -float64(v))
	}
	return float64(l[best]-l[tok]) / scale
}

// Auditing unchecked speculative answers. A greedy speculative answer that
// no second route checked has one of its accepted draft tokens, drawn at
// random, asked about again once it is complete: the route's last hop is
// asked alone to verify that proposal and, on the same input, for its
// logits (convictVerify). A last hop that accepts drafts it should have
// rejected contradicts itself there, needs no second holder of its layers
// to be caught, and is convicted and banned before it poisons another
// answer. It costs a probe of the history through the route's layers and
// two through the last hop's, after the last token was sent; it does not
// catch a hop that tells such probes from real sessions (for that, spot
// checks, and where nobody else holds the layers the answer says so).

// auditPick is an accepted draft token: its place in the answer and the
// route that accepted it.
type auditPick struct {
	k    int
	hops []Hop
}

// noteAccepted counts the draft tokens a round on hops accepted at answer
// positions k..k+n-1, keeping one of all of them, uniformly, for the audit.
func (g *generation) noteAccepted(k, n int, hops []Hop) {
	for i := range n {
		g.sc.seen++
		if rand.IntN(g.sc.seen) == 0 {
			g.sc.audit = &auditPick{k: k + i, hops: slices.Clone(hops)}
		}
	}
}

// auditVerify audits a complete greedy speculative answer (see above): a
// last hop caught is convicted, and the trace says from which token the
// answer is its word.
func (g *generation) auditVerify(ctx context.Context) {
	a := g.sc.audit
	g.sc.audit = nil
	if a == nil || g.req.Sampling.Temperature > 0 || a.k < 1 || a.k >= len(g.res.Tokens) || ctx.Err() != nil ||
		len(a.hops) == 0 || a.hops[len(a.hops)-1].Peer == g.o.Host.ID().String() {
		return // nothing to ask: a sampled answer, or this peer chose the tokens itself
	}
	if p := g.o.Audit; p < 0 || p > 0 && p < 1 && rand.Float64() >= p {
		return
	}
	g.res.VerifyAudits++
	f := g.convictVerify(ctx, a.k, g.res.Tokens[a.k], a.hops)
	if f == nil {
		return
	}
	f.reason = fmt.Sprintf("the answer's audit, at token %d: %s", a.k, f.reason)
	g.apply(f)
	g.res.Mismatches++
	g.o.log().Warn("pipeline: a speculative answer's last hop accepted a draft it should have refused; banned", "peer", f.peer,
		"layers", f.layers, "at_token", a.k, "err", f.reason)
	g.trace(answer.Trace{Kind: "mismatch", AtToken: a.k, Failed: f.peer, Layers: f.layers, Reason: f.reason, Proven: f.proven,
		Evidence: f.evidence})
}
