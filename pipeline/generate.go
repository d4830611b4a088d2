package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
)

// generation is the state of one Generate call.
type generation struct {
	o       *Originator
	req     Request
	ref     ModelRef
	holders []swarm.ShardHolder
	failed  map[string]time.Time // peer -> when it failed
	tok     *engine.Tokenizer
	sampler *engine.Sampler
	prompt  []int32
	res     *answer.Pipeline

	hops    []Hop
	chain   *chain
	compute []float64 // per hop, summed over decode steps
	xfer    []float64
	conns   []string // per hop of the current route: how this peer reaches it (see answer.HopStat.Conn)
	decodes int
	stepEst time.Duration // a decode step's time on this route (moving average)
	sb      *standby      // the warm standby or check route, or nil

	dr drafting  // the draft of a speculating generation (spec.go)
	sc specCheck // spot checks of speculative rounds (speccheck.go)

	avoid  map[string]int // suspects, with how often they were: avoided where others cover their layers
	check  bool           // results are checked on a second route (see SpotCheck)
	lost   lostChecks     // steps of a generation drawn for a check that went uncompared
	checks int            // check routes opened
	passed map[Hop]bool   // hops a second route confirmed: credited in Trust at the end

	settling bool // this peer judges a replay with weights fetched to settle a dispute (settle.go)
}

func (g *generation) run(ctx context.Context, hops []Hop, start time.Time) error {
	g.hops = hops
	g.resetStats()
	g.avoid, g.passed = map[string]int{}, map[Hop]bool{}
	var unpaired error // why a drawn check has no second route
	if g.check = g.drawCheck(hops); g.check {
		// Checked routes return logits, which is worth it only with a
		// second route to compare them with.
		g.lost.drawn = true
		if _, unpaired = g.routeBeside(ctx, hops); unpaired != nil {
			if alt, ok := g.checkablePair(ctx); ok {
				g.o.log().Info("pipeline: a costlier route, so that the drawn check has a second route beside it",
					"model", g.ref.CID, "cheapest", hops, "route", alt)
				hops, g.hops, unpaired = alt, alt, nil
			}
		}
	}
	g.trace(answer.Trace{Kind: "route", Route: hops})
	if err := g.noteUnchecked(hops); err != nil {
		return err
	}
	if unpaired != nil {
		g.check = false
		g.uncheckable(unpaired)
	}
	g.startDraft(ctx)
	defer func() {
		if g.chain != nil {
			g.chain.close()
		}
		g.closeShadow()
		g.dropDraft(nil)
		g.auditVerify(ctx) // the route's sessions closed: the probes take their places
		g.credit()
		g.res.CheckLost = g.lost.result(g.res.Unchecked)
	}()
	var pending *Result // a step's result obtained by a replay after a failover
	var err error
	t0 := time.Now()
	if g.chain, err = g.open(ctx, g.hops); err != nil {
		if g.chain, pending, err = g.recover(ctx, err, time.Since(t0), nil, g.hops); err != nil {
			return err
		}
	} else {
		g.conns = g.chain.conns
	}
	if g.wantShadow() && g.sb == nil {
		g.sb = g.startStandby(ctx, pending != nil)
	}
	history := slices.Clone(g.prompt)
	input := g.prompt
	dec := g.tok.NewStreamDecoder()
	if len(g.req.Messages) > 0 {
		dec = g.tok.NewChatDecoder()
	}
	var text, thought []byte
	var decodeStart time.Time
	for {
		if err := ctx.Err(); err != nil {
			g.res.Done = "cancel"
			return err
		}
		var res *Result
		var took time.Duration
		var spec []int32 // the tokens a speculative round added
		drafted := false // spec came from a round: its last token the route's own
		stepped := false // res came from a step on the current route
		k := len(g.res.Tokens)
		g.lost.compared = false
		g.restartCheck(ctx)
		switch bad := g.deadHop(); {
		case pending != nil:
			res, pending = pending, nil
		case g.sc.settling != nil || g.sc.resync || g.modesDiffer():
			res, took, err = g.settle(ctx, g.sc.settling)
			g.sc.settling, g.sc.resync = nil, false
		case bad != nil:
			err = &StageError{Peer: bad.Peer, Layers: [2]int{bad.Start, bad.End}, Code: CodeDownstream,
				Err: errors.New("declared dead while the session ran"), Evidence: EvidenceDead}
		case len(input) == 1 && k > 0 && g.speculating():
			spec, took, err = g.specStep(ctx)
			drafted = err == nil
			var se *StageError
			switch {
			case errors.Is(err, engine.ErrDraft) || errors.Is(err, engine.ErrSpec):
				// The draft failed, or the round's own bookkeeping did:
				// no hop's fault. A plain step where the round began.
				res, took, stepped, err = g.plainAgain(ctx, input, err, false)
			case errors.As(err, &g.sc.settling):
				// The spot check's route chose otherwise: the tokens both
				// chose stand, and the next step is compared by logits.
				spec, err = g.sc.settling.agreed, nil
			case errors.As(err, &se) && se.Code == CodeContextFull:
				// A hop had no room for the round's positions, and the
				// hops before it may have closed their sessions on it:
				// the route again, plain, replaying the answer so far.
				res, took, stepped, err = g.plainAgain(ctx, input, err, true)
			}
		default:
			switch {
			case g.checking():
				g.sb.feedAt(input, k, len(g.prompt)+len(g.res.Tokens)-len(input), false)
			case g.sb != nil && g.sb.check:
				g.sb.feed(input, nil, k) // both routes run the step at once
			}
			res, took, err = g.step(ctx, g.chain, g.hops, input, nil)
			stepped = err == nil
		}
		if err != nil {
			if ctx.Err() != nil {
				g.res.Done = "cancel"
				return ctx.Err()
			}
			var se *StageError
			if errors.As(err, &se) && se.Code == CodeContextFull {
				if len(g.res.Tokens) == 0 {
					return fmt.Errorf("pipeline: the prompt of %d tokens does not fit the stages' context: %w", len(g.prompt), err)
				}
				g.res.Done = "length" // as on one machine: the context is full, the answer ends
				break
			}
			if g.chain, res, err = g.recover(ctx, err, took, input, g.hops); err != nil {
				return g.failGen(ctx, err)
			}
		}
		if stepped && g.sb != nil && !g.sb.check {
			g.sb.feed(input, nil, k)
		}
		if stepped && len(input) == 1 && took > 0 {
			g.account(res, took)
			if g.stepEst == 0 {
				g.stepEst = took
			} else {
				g.stepEst = (3*g.stepEst + took) / 4
			}
		}
		if g.sb != nil && g.sb.check && spec == nil { // a speculative round was checked as it ran
			if res, err = g.confirm(ctx, k, res, input); err != nil {
				return g.failGen(ctx, err)
			}
		}
		if len(g.res.Tokens) == 0 {
			g.res.TTFTMS = msSince(start)
			g.res.PrefillMS = float64(took.Microseconds()) / 1000
			decodeStart = time.Now()
		}
		if spec == nil {
			token := res.Token
			if g.chain.open.Logits { // asked for, or a checked route: sampled here
				if g.req.Logits && g.req.OnLogits != nil {
					g.req.OnLogits(len(g.res.Tokens), res.Logits)
				}
				if token, err = g.sampler.Sample(res.Logits, history); err != nil {
					return err
				}
			}
			spec = []int32{token}
		}
		g.lost.step()
		done := ""
		for i, token := range spec {
			g.res.Tokens = append(g.res.Tokens, token)
			history = append(history, token)
			switch {
			case g.tok.IsEOG(token):
				done = "stop"
			default:
				piece, reasoning, err := dec.Step(token)
				if err != nil {
					return err
				}
				g.emit(piece, &text)
				g.think(reasoning, &thought)
			}
			if g.req.MaxTokens > 0 && len(g.res.Tokens) >= g.req.MaxTokens && done == "" {
				done = "length"
			}
			if done != "" {
				if drafted { // accepted drafts past the end were of no use
					g.res.DraftAccepted -= max(0, len(spec)-2-i)
				}
				break
			}
		}
		if done != "" {
			g.res.Done = done
			break
		}
		if len(g.res.Tokens) > 0 {
			input = g.res.Tokens[len(g.res.Tokens)-1:]
		}
	}
	rest, reasoning := dec.FlushStep()
	g.emit(rest, &text)
	g.think(reasoning, &thought)
	g.res.Text, g.res.Reasoning = string(text), string(thought)
	if n := len(g.res.Tokens); n > 1 {
		g.res.DecodeTPS = float64(n-1) / time.Since(decodeStart).Seconds()
	}
	g.stats()
	return nil
}

// failGen ends the generation on err.
func (g *generation) failGen(ctx context.Context, err error) error {
	g.res.Done = "error"
	if ctx.Err() != nil {
		g.res.Done = "cancel"
	}
	return err
}

func (g *generation) emit(piece string, text *[]byte) {
	if piece == "" {
		return
	}
	*text = append(*text, piece...)
	if g.req.OnToken != nil {
		g.req.OnToken(piece)
	}
}

// think is emit for the model's reasoning.
func (g *generation) think(piece string, thought *[]byte) {
	if piece == "" {
		return
	}
	*thought = append(*thought, piece...)
	if g.req.OnReasoning != nil {
		g.req.OnReasoning(piece)
	}
}

func (g *generation) trace(ev answer.Trace) {
	if g.req.OnTrace != nil {
		g.req.OnTrace(ev)
	}
}

// deadHop returns a hop whose peer routing must now avoid (declared dead
// by the BMC, or dead in the swarm view).
func (g *generation) deadHop() *Hop {
	ex := g.o.excluded(nil)
	for i := range g.hops {
		if g.hops[i].Peer != g.o.Host.ID().String() && ex(g.hops[i].Peer) {
			return &g.hops[i]
		}
	}
	return nil
}

// recover handles a failed step or open on route failed: it judges what
// the failure proves (see judge), leaves the failed peer out or avoids the
// suspects, assembles a new route, opens it and replays the prompt and the
// tokens generated so far, so the new stages' KV caches hold what the old
// ones did. The replay's result is the result of the step that failed.
// When no live peer covers the failed layers it waits for one (a holder
// that comes back, or one that resumes) for one liveness window before
// failing with an error naming the layers. With a warm standby that does
// not use the failed peer, the standby takes over instead of a replay.
// detect is how long the failed call ran; input is the failed step's (nil:
// the open failed).
func (g *generation) recover(ctx context.Context, cause error, detect time.Duration, input []int32, failed []Hop) (*chain, *Result, error) {
	if g.chain != nil {
		g.chain.reset()
		g.chain = nil
	}
	at := len(g.res.Tokens)
	t0 := time.Now()
	for {
		f, err := g.judge(ctx, cause, failed, input)
		if err != nil {
			return nil, nil, err
		}
		if len(g.res.Reroutes) >= g.maxReroutes() {
			return nil, nil, fmt.Errorf("%w (%d): last failure: %v", ErrTooManyReroutes, len(g.res.Reroutes), f)
		}
		g.apply(f)
		g.o.log().Warn("pipeline stage failed; re-routing", "peer", f.peer, "layers", f.layers, "proven", f.proven,
			"evidence", f.evidence, "suspects", f.suspects, "err", f.reason)
		if c, res, ok := g.takeOver(ctx, f, input, at, detect, t0); ok {
			return c, res, nil
		}
		hops, err := g.replan(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			return nil, nil, fmt.Errorf("pipeline: stage %s (layers [%d,%d)) failed and no live peer replaces it: %w",
				short(f.peer), f.layers[0], f.layers[1], err)
		}
		if err := g.noteUnchecked(hops); err != nil {
			return nil, nil, err
		}
		if g.sb != nil && sharesPeer(hops, g.sb.peers(g.o.Host.ID().String())) {
			g.closeShadow() // this peer's session on a shared peer would hold up the new route's
		}
		g.res.Reroutes = append(g.res.Reroutes, g.reroute(f, at, hops, detect))
		g.check = g.check || g.anyNew(hops)
		r0 := time.Now()
		c, err := g.open(ctx, hops)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			cause, detect, failed = err, time.Since(r0), hops
			continue
		}
		// The replay repeats the original batch shapes: the prompt in one
		// batch, then each generated token alone.
		replay, shapes := g.history()
		res, took, err := g.step(ctx, c, hops, replay, shapes)
		if err != nil {
			c.st.Reset()
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			cause, detect, failed = err, took, hops
			continue
		}
		last := &g.res.Reroutes[len(g.res.Reroutes)-1]
		last.ReplayTokens, last.ReplayMS = len(replay), ms(time.Since(r0))
		last.CostMS = last.DetectMS + msSince(t0)
		g.trace(answer.Trace{Kind: "reroute", Route: hops, Failed: f.peer, Layers: f.layers, Reason: last.Reason,
			AtToken: at, DetectMS: last.DetectMS, ReplayMS: last.ReplayMS, CostMS: last.CostMS, Replay: len(replay),
			Proven: f.proven, Evidence: f.evidence, Suspects: f.suspects})
		g.switchTo(hops, c)
		if g.sb != nil {
			if g.sb.uses(f.peer) || g.sb.failed() || g.check && !g.sb.check {
				g.closeShadow()
			} else if input != nil && !g.sb.check {
				g.sb.feed(input, nil, at) // the step the replay stood for (a check route ran it already)
			}
		}
		if g.wantShadow() && g.sb == nil {
			g.sb = g.startStandby(ctx, true)
		}
		return c, res, nil
	}
}

// history is what the route has consumed up to the current step: the
// prompt and every generated token, and its batch shapes.
func (g *generation) history() ([]int32, []int) {
	return append(slices.Clone(g.prompt), g.res.Tokens...), replayShapes(len(g.prompt), len(g.res.Tokens))
}

// switchTo makes hops, opened as c, the current route, folding the old
// one's accounting into the result.
func (g *generation) switchTo(hops []Hop, c *chain) {
	if g.decodes > 0 { // a route that failed before decoding has nothing to show
		g.stats()
	}
	g.hops = hops
	g.resetStats()
	g.conns = c.conns
}

// takeOver promotes the warm standby, if there is one that can stand in,
// and records the re-route. On false the standby is gone and the caller
// replays.
func (g *generation) takeOver(ctx context.Context, f *fault, input []int32, at int, detect time.Duration, t0 time.Time) (*chain, *Result, bool) {
	s := g.sb
	if s == nil || input == nil {
		return nil, nil, false
	}
	g.sb = nil
	if g.check && !s.check { // it does not return the logits a checked generation compares
		s.close()
		return nil, nil, false
	}
	r0 := time.Now()
	c, res, err := g.promote(ctx, s, f, input, at)
	if err != nil {
		g.o.log().Info("pipeline: the warm standby cannot take over; replaying", "err", err)
		s.close()
		return nil, nil, false
	}
	rr := g.reroute(f, at, s.hops, detect)
	rr.ReplayMS, rr.ReplayTokens, rr.Standby = ms(time.Since(r0)), len(input), true
	rr.CostMS = rr.DetectMS + msSince(t0)
	g.res.Reroutes = append(g.res.Reroutes, rr)
	g.trace(answer.Trace{Kind: "reroute", Route: s.hops, Failed: f.peer, Layers: f.layers, Reason: rr.Reason,
		AtToken: at, DetectMS: rr.DetectMS, ReplayMS: rr.ReplayMS, CostMS: rr.CostMS, Replay: len(input), Standby: true,
		Proven: f.proven, Evidence: f.evidence, Suspects: f.suspects})
	g.switchTo(s.hops, c)
	g.sb = g.startStandby(ctx, true)
	return c, res, true
}

// closeShadow ends the standby or check route, if any.
func (g *generation) closeShadow() {
	if g.sb != nil {
		g.sb.close()
		g.sb = nil
	}
}

// wantShadow reports whether a second route should run alongside.
func (g *generation) wantShadow() bool { return g.req.Standby || g.check }

// replan assembles a route from the holders alive now. With none covering
// some layers, it polls until one is, for one liveness window.
func (g *generation) replan(ctx context.Context) ([]Hop, error) {
	window := swarm.Liveness{}.DeadAfter()
	if g.o.View != nil {
		window = g.o.View.Liveness().DeadAfter()
	}
	deadline := time.Now().Add(window)
	for {
		if _, hs, err := g.o.Resolve(g.ref.CID); err == nil {
			g.holders = hs
		}
		hops, err := g.plan(ctx, nil)
		if err == nil || time.Now().After(deadline) {
			return hops, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// open opens a session along hops under a progress watch. A checked
// generation asks for logits and samples them here.
func (g *generation) open(ctx context.Context, hops []Hop) (*chain, error) {
	open := g.o.newOpen(g.ref, hops, g.req)
	// A checked greedy answer compares tokens (with a draft, those of
	// verify steps); any other by logits.
	open.Logits = open.Logits || (g.check && !g.byTokens() && (g.dr.model == nil || g.req.Sampling.Temperature > 0))
	open.Verify = g.dr.model != nil && !open.Logits
	open.Parts = g.o.PrefillChunk >= 0 && len(hops) > 1
	g.o.introduce(hops)
	var c *chain
	err := g.watched(ctx, hops, 0, func(ctx context.Context) (err error) {
		c, err = g.o.openChain(ctx, open)
		return err
	})
	var se *StageError
	if (open.Verify || open.Parts) && errors.As(err, &se) && se.Code == CodeBadFrame {
		// A hop that predates verify steps or parts refuses the open:
		// this route decodes plainly and takes prompts whole.
		if open.Verify {
			g.dropDraft(err)
			open.Logits = open.Logits || g.check
		}
		open.Verify, open.Parts = false, false
		err = g.watched(ctx, hops, 0, func(ctx context.Context) (err error) {
			c, err = g.o.openChain(ctx, open)
			return err
		})
	}
	if c != nil {
		c.vocab = g.tok.VocabSize()
		if err == nil {
			c.conns = g.connKinds(hops) // the streams just opened use the connections there are now
		}
	}
	return c, err
}

// step runs one step on c under a progress watch: a hop that hangs is
// found by the watch and the step fails naming it.
func (g *generation) step(ctx context.Context, c *chain, hops []Hop, tokens []int32, batches []int) (res *Result, took time.Duration, err error) {
	t0 := time.Now()
	chunk := 0
	if c.open.Parts && batches == nil {
		chunk = g.o.partSize(hops, len(tokens))
	}
	err = g.watched(ctx, hops, g.expect(tokens, batches), func(ctx context.Context) (err error) {
		if chunk > 0 {
			res, _, err = c.stepParts(ctx, tokens, chunk)
			return err
		}
		res, _, err = c.step(ctx, tokens, batches)
		return err
	})
	if err == nil && len(tokens) > 1 && batches == nil {
		n := len(tokens)
		if chunk > 0 {
			n -= (n - 1) / chunk * chunk // the last part's: what the result's timings cover
			if len(g.res.Tokens) == 0 {
				g.res.PrefillParts = (len(tokens) + chunk - 1) / chunk
			}
		}
		g.o.notePrefill(hops, res, n)
	}
	return res, time.Since(t0), err
}

// expect is how long a step of tokens in batches should take on the
// current route.
func (g *generation) expect(tokens []int32, batches []int) time.Duration {
	switch {
	case len(batches) > 1:
		return g.stepEst * time.Duration(len(batches)) // each single-token batch costs a decode step
	case len(tokens) > 1:
		return g.stepEst * time.Duration(len(tokens)) / 4 // a batch costs less per token than a decode step
	}
	return g.stepEst
}

// watched runs fn under a progress watch over the remote hops of a route.
// A hop found hung ends fn (through its context, which resets the stream)
// and the call fails with a StageError naming that hop, whatever fn
// returned.
func (g *generation) watched(ctx context.Context, hops []Hop, expected time.Duration, fn func(context.Context) error) error {
	var ids []peer.ID
	for _, h := range hops {
		if id, err := peer.Decode(h.Peer); err == nil && id != g.o.Host.ID() {
			ids = append(ids, id)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := g.o.Progress.Watch(g.o.Host, expected, ids, func(id peer.ID, cause error) {
		g.o.markHung(id, cause)
		cancel()
	})
	err := fn(wctx)
	hung, cause, detect := w.Stop()
	if hung == "" || ctx.Err() != nil {
		return err
	}
	se := &StageError{Peer: hung.String(), Code: CodeHung,
		Err: fmt.Errorf("hung: %w (%s without progress)", cause, detect.Round(time.Millisecond)), Evidence: EvidencePing}
	if errors.Is(cause, swarm.ErrStalled) {
		// Every hop answered pings: nothing shows which one is stuck.
		se.Evidence = EvidenceStall
	}
	for _, h := range hops {
		if h.Peer == se.Peer {
			se.Layers = [2]int{h.Start, h.End}
		}
	}
	return se
}

func (g *generation) maxReroutes() int {
	if g.o.MaxReroutes > 0 {
		return g.o.MaxReroutes
	}
	return 8
}

func (g *generation) resetStats() {
	g.compute = make([]float64, len(g.hops))
	g.xfer = make([]float64, len(g.hops))
	g.decodes = 0
}

// connKinds is how this peer reaches each hop of hops it sends to (the
// first, and any after a hop that is this peer); nil without ConnKind.
func (g *generation) connKinds(hops []Hop) []string {
	if g.o.ConnKind == nil {
		return nil
	}
	self := g.o.Host.ID().String()
	out := make([]string, len(hops))
	for i, h := range hops {
		if i > 0 && hops[i-1].Peer != self {
			continue
		}
		if id, err := peer.Decode(h.Peer); err == nil {
			out[i] = g.o.ConnKind(id)
		}
	}
	return out
}
