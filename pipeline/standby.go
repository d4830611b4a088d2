package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/llmswarm/llmswarm/answer"
)

// A warm standby is a second route, over peers the primary route does not
// use, fed every step the primary runs, in the same batch shapes and a
// little behind it. When a primary hop fails, the standby catches up the
// steps it lags, runs the failed step and becomes the primary: a failover
// then costs its detection and a step or two, instead of a replay of the
// whole history. It costs a second copy of the compute, so it is opt-in
// (Request.Standby). A new standby is built in the background after each
// promotion (by a replay, off the critical path).

// A check route (see SpotCheck) is a standby whose results are kept and
// compared with the primary's: it is fed each step before the primary
// runs it, so that both run at once, and its logits are waited for.

// standbyItem is one step to feed: its tokens and batch shapes, and the
// generation's step it stands for (the number of tokens generated before
// it).
type standbyItem struct {
	tokens  []int32
	batches []int
	step    int
	// at, when 0 or more, is the position the step runs at: the route
	// first drops what it holds from there (after a speculative round).
	at     int
	verify bool // a verify step (speccheck.go)
}

// standby is the route kept warm.
type standby struct {
	hops  []Hop
	c     *chain
	check bool // a check route: results are kept for comparison

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []standbyItem
	fed     int // items run
	pending int // items queued but not run
	err     error
	closed  bool
	done    chan struct{}
	last    int             // the step of the last item fed (-1: none)
	results map[int]*Result // check route: results by step, until taken
}

// startStandby opens a standby route avoiding the primary route's peers
// (this peer's own stages aside) and the failed ones, and starts feeding
// it: with history, first what the primary has consumed so far (the
// prompt and every generated token, in the original shapes), then every
// step fed. In a checked generation it is a check route. It returns nil
// when no such route exists.
func (g *generation) startStandby(ctx context.Context, history bool) *standby {
	if g.check {
		if g.checks >= maxChecks {
			why := fmt.Sprintf("the generation's %d check routes are used: not checked from here", maxChecks)
			g.lost.why = why
			g.trace(answer.Trace{Kind: "spot_check", AtToken: len(g.res.Tokens), Reason: why})
			return nil
		}
		g.checks++
	}
	hops, ok := g.secondRoute(ctx)
	if !ok {
		return nil
	}
	c, err := g.open(ctx, hops)
	if err != nil {
		g.o.log().Info("pipeline: no warm standby", "err", err)
		if g.check {
			g.lost.why = "the check route did not open: " + err.Error()
		}
		return nil
	}
	s := &standby{hops: hops, c: c, check: g.check, done: make(chan struct{}), last: -1, results: map[int]*Result{}}
	s.cond = sync.NewCond(&s.mu)
	if history {
		tokens, shapes := g.history()
		s.feed(tokens, shapes, len(g.res.Tokens))
	}
	go s.run(ctx)
	kind := "standby"
	if s.check {
		kind = "spot_check"
	}
	g.trace(answer.Trace{Kind: kind, Route: hops, AtToken: len(g.res.Tokens)})
	return s
}

// secondRoute plans a route over peers the current one does not use
// (this peer's own stages aside). A checked generation with none says so
// in the trace.
func (g *generation) secondRoute(ctx context.Context) ([]Hop, bool) {
	hops, err := g.routeBeside(ctx, g.hops)
	if err != nil {
		if g.check {
			g.uncheckable(err)
		}
		return nil, false
	}
	return hops, true
}

// uncheckable records why a checked generation has no second route from
// here on.
func (g *generation) uncheckable(why error) {
	g.lost.why = why.Error()
	g.trace(answer.Trace{Kind: "spot_check", AtToken: len(g.res.Tokens), Reason: g.lost.why + ": not checked"})
}

// routeBeside plans a route over peers that primary does not use (this
// peer's own stages aside), or says why there is none.
func (g *generation) routeBeside(ctx context.Context, primary []Hop) ([]Hop, error) {
	avoid := map[string]bool{}
	for _, p := range remotePeers(primary, g.o.Host.ID().String()) {
		avoid[p] = true
	}
	hops, err := g.plan(ctx, avoid)
	if err != nil {
		return nil, fmt.Errorf("no second route over other peers (%w)", err)
	}
	if sharesPeer(hops, avoid) {
		return nil, errors.New("no second route over other peers")
	}
	return hops, nil
}

// checkablePair looks for a primary route that leaves a second route over
// other peers to check it on, when the cheapest primary leaves none (it
// mixes the holders two disjoint routes would each need: [0,c) of one
// pair and [c,L) of the other). It tries the routes that leave out one of
// the primary's peers each, in order, and returns the first such primary.
// A drawn check is worth a costlier route: without one, the answer goes
// unchecked, and a liar could place its ranges so that it always would.
func (g *generation) checkablePair(ctx context.Context) ([]Hop, bool) {
	for _, p := range remotePeers(g.hops, g.o.Host.ID().String()) {
		alt, err := g.plan(ctx, map[string]bool{p: true})
		if err != nil || sharesPeer(alt, map[string]bool{p: true}) {
			continue
		}
		if _, err := g.routeBeside(ctx, alt); err == nil {
			return alt, true
		}
	}
	return nil, false
}

func sharesPeer(hops []Hop, avoid map[string]bool) bool {
	for _, h := range hops {
		if avoid[h.Peer] {
			return true
		}
	}
	return false
}

// replayShapes is the batch shapes of a history: the prompt in one batch,
// then each generated token alone.
func replayShapes(prompt, generated int) []int {
	b := []int{prompt}
	for range generated {
		b = append(b, 1)
	}
	return b
}

// feed queues the given step.
func (s *standby) feed(tokens []int32, batches []int, step int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.err != nil {
		return
	}
	s.push(standbyItem{tokens: slices.Clone(tokens), batches: batches, step: step, at: -1})
}

// push queues it; s.mu is held.
func (s *standby) push(it standbyItem) {
	s.queue = append(s.queue, it)
	s.pending++
	s.last = it.step
	s.cond.Broadcast()
}

// result waits for the result of step k on a check route.
func (s *standby) result(ctx context.Context, k int) (*Result, error) {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if r, ok := s.results[k]; ok {
			for j := range s.results {
				if j <= k {
					delete(s.results, j)
				}
			}
			return r, nil
		}
		switch {
		case s.err != nil:
			return nil, s.err
		case s.closed:
			return nil, errors.New("the check route was closed")
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case s.last < k:
			return nil, fmt.Errorf("the check route was never given step %d", k)
		}
		s.cond.Wait()
	}
}

// peers is the peers of the route other than self.
func (s *standby) peers(self string) map[string]bool {
	out := map[string]bool{}
	for _, p := range remotePeers(s.hops, self) {
		out[p] = true
	}
	return out
}

// run feeds the queued steps to the standby chain, in order.
func (s *standby) run(ctx context.Context) {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closed {
			s.cond.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		it := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		res, err := s.runItem(ctx, it)
		s.mu.Lock()
		s.pending--
		s.fed++
		if err == nil && s.check {
			s.results[it.step] = res
		}
		if err != nil {
			s.err = err
			s.closed = true
		}
		s.cond.Broadcast()
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// runItem runs one queued step on the chain: at its position, where it
// has one (a route cannot skip positions it never ran).
func (s *standby) runItem(ctx context.Context, it standbyItem) (*Result, error) {
	if it.at > s.c.pos {
		return nil, fmt.Errorf("a step at position %d of a route holding %d", it.at, s.c.pos)
	}
	if it.at >= 0 {
		s.c.rewind(it.at)
	}
	var res *Result
	var err error
	if it.verify {
		res, _, err = s.c.verify(ctx, it.tokens, nil)
	} else {
		res, _, err = s.c.step(ctx, it.tokens, it.batches)
	}
	return res, err
}

// caughtUp waits until every queued step has run; it fails when the
// standby failed, or finished no step for deadline.
func (s *standby) caughtUp(ctx context.Context, deadline time.Duration) error {
	t := time.AfterFunc(deadline, func() {
		s.mu.Lock()
		if s.err == nil {
			s.err = errors.New("the standby fell behind")
		}
		s.closed = true
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer t.Stop()
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.closed = true
		s.cond.Broadcast()
		s.mu.Unlock()
	}) // closing makes run return after its step, and promote fail
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.fed
	for s.pending > 0 && s.err == nil && !s.closed {
		s.cond.Wait()
		if s.fed != last { // progress: the deadline starts again
			last = s.fed
			t.Reset(deadline)
		}
	}
	if s.err != nil {
		return s.err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if s.closed {
		return errors.New("the standby was closed")
	}
	return nil
}

// failed reports whether the standby's chain broke.
func (s *standby) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

// uses reports whether the standby's route goes through peer p.
func (s *standby) uses(p string) bool {
	for _, h := range s.hops {
		if h.Peer == p {
			return true
		}
	}
	return false
}

// stopFeeding ends the feeding goroutine and returns the chain (not
// closed).
func (s *standby) stopFeeding() *chain {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.done
	return s.c
}

// close ends the standby and its chain, even in the middle of a step.
func (s *standby) close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	s.c.st.Reset()
	<-s.done
	s.c.done() // after its feeder stopped: no step runs on it any more
}

// promote makes the standby the primary after the primary failed at step
// k, whose input was tokens: it catches up, runs the step (a check route
// ran it already), and returns the chain and the step's result. An error
// means the standby is no use; the caller falls back to a replay.
func (g *generation) promote(ctx context.Context, s *standby, f *fault, tokens []int32, k int) (*chain, *Result, error) {
	for _, p := range append([]string{f.peer}, f.suspects...) {
		if p != "" && s.uses(p) {
			return nil, nil, fmt.Errorf("the standby route uses %s too", short(p))
		}
	}
	if err := s.caughtUp(ctx, g.o.Progress.Deadline(g.stepEst*time.Duration(max(len(tokens), 1)))); err != nil {
		return nil, nil, err
	}
	c := s.stopFeeding()
	s.mu.Lock()
	res, ran := s.results[k]
	ran = ran && s.last == k && len(res.Tokens) == 0 // a verify step's result is no step's
	s.mu.Unlock()
	if ran {
		return c, res, nil
	}
	c.rewind(min(c.pos, len(g.prompt)+k-len(tokens))) // past a speculative round's positions
	err := g.watched(ctx, s.hops, g.stepEst, func(ctx context.Context) (err error) {
		res, _, err = c.step(ctx, tokens, nil) // the failed step, in its own shape
		return err
	})
	if err != nil {
		c.st.Reset()
		return nil, nil, err
	}
	return c, res, nil
}
