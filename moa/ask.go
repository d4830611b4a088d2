package moa

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/ledger"
	"github.com/llmswarm/llmswarm/swarm"
)

// An agent is never cut off for being slow: it runs until it is done, the
// user's deadline ends, or the progress watch finds it hung. What this
// originator measured of it (or, before its first answer, what it
// announces) sets how soon a silence is suspicious: the first token within
// its time to first token, each next one within its time per token, both
// × Progress.Multiplier and at least Progress.Floor.
const (
	unknownSpeed   = 2.0         // tok/s assumed of a peer never measured nor announcing
	deadlineGrace  = time.Second // the server's own deadline ends first, with a clean partial answer
	maxPeerStats   = 4096
	observedWeight = 0.5 // moving-average weight of a new observation
)

// observed is what this originator measured of a peer's answers.
type observed struct {
	ttft  time.Duration
	tokps float64
}

// peerStats holds observations per peer, bounded.
type peerStats struct {
	mu sync.Mutex
	m  map[peer.ID]observed
}

func (s *peerStats) get(id peer.ID) (observed, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.m[id]
	return o, ok
}

func (s *peerStats) observe(id peer.ID, ttft time.Duration, tokps float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[peer.ID]observed{}
	}
	o, ok := s.m[id]
	if !ok {
		if len(s.m) >= maxPeerStats {
			for k := range s.m { // drop any one: a rough bound is enough
				delete(s.m, k)
				break
			}
		}
		s.m[id] = observed{ttft: ttft, tokps: tokps}
		return
	}
	if ttft > 0 {
		o.ttft = time.Duration((1-observedWeight)*float64(o.ttft) + observedWeight*float64(ttft))
	}
	if tokps > 0 {
		o.tokps = (1-observedWeight)*o.tokps + observedWeight*tokps
	}
	s.m[id] = o
}

// expect is what to expect of candidate c: time to first token (0: unknown)
// and decode tok/s.
func (o *Originator) expect(c candidate) (time.Duration, float64) {
	ttft, tokps := time.Duration(0), c.role.TokPerSec
	if ob, ok := o.stats.get(c.peer.ID); ok {
		if ob.ttft > 0 {
			ttft = ob.ttft
		}
		if ob.tokps > 0 {
			tokps = ob.tokps
		}
	}
	if tokps <= 0 {
		tokps = unknownSpeed
	}
	return ttft, tokps
}

// askRole asks the best live holder of role, moving to the next one when a
// peer is busy, unreachable or hung, until ctx ends. final says whether
// onToken's text and reasoning reach the user: then, once text was sent, a
// failure stands (another peer's answer cannot follow it without garbling
// it); reasoning alone does not bind (the next peer's follows it, a new
// writer's: finalStream).
func (o *Originator) askRole(ctx context.Context, role string, req *Request, onToken func(peer, text, reasoning string), final bool) answer.Agent {
	return o.askModel(ctx, role, "", req, onToken, final)
}

// askModel is askRole restricted to peers running model ("" for any). A
// partial answer (cut off by a deadline, or by a peer that hung mid-answer)
// is kept when no other peer does better.
func (o *Originator) askModel(ctx context.Context, role, model string, req *Request, onToken func(peer, text, reasoning string), final bool) answer.Agent {
	return o.askAmong(ctx, role, o.modelCandidates(role, model), req, onToken, final)
}

// askAmong is askModel over the given holders of role, best first.
func (o *Originator) askAmong(ctx context.Context, role string, cands []candidate, req *Request, onToken func(peer, text, reasoning string), final bool) answer.Agent {
	a := answer.Agent{Role: role, Error: "no live peer serves " + role}
	var partial *answer.Agent
	var skipped []string
	// The aggregator waits for its holders' checks as answering roles do
	// (they began with the question, so at most what is left of vetWait);
	// the spotter does not: the rules classify at once.
	cands, err := o.usable(ctx, role, cands, role != Spotter)
	if err != nil {
		o.log().Info("role not asked: no verified holder", "role", role, "err", err)
		return answer.Agent{Role: role, Error: "not asked: " + err.Error(), Err: err}
	}
	for _, c := range cands {
		if ctx.Err() != nil {
			break
		}
		streamed := false
		a = o.askPeer(ctx, c, req, func(t, r string) {
			streamed = streamed || t != ""
			if onToken != nil {
				onToken(c.peer.ID.String(), t, r)
			}
		})
		if a.Error != "" && strings.TrimSpace(a.Content) != "" && (partial == nil || len(a.Content) > len(partial.Content)) {
			p := a
			partial = &p
		}
		// Done; or the user's time is up; or text already reached the user;
		// or the request's own fault, which the next peer would refuse too.
		if a.Error == "" || ctx.Err() != nil || (streamed && final) ||
			errors.Is(a.Err, ErrTooLong) || errors.Is(a.Err, ErrBadRequest) {
			break
		}
		o.log().Info("agent failed", "role", role, "peer", c.peer.ID, "err", a.Error)
		skipped = append(skipped, shortPeer(c.peer.ID.String())+": "+a.Error)
	}
	if a.Error != "" && partial != nil && !final {
		p := *partial
		p.Partial, p.PartialReason, p.Error, p.Err = true, p.Error, "", nil
		a = p
	}
	a.Skipped = skipped
	return a
}

// askPeer asks one peer, within the caller's deadline, under a progress
// watch that resets the call when the peer goes silent and stops answering
// pings.
func (o *Originator) askPeer(ctx context.Context, c candidate, req *Request, onToken func(text, reasoning string)) answer.Agent {
	a := answer.Agent{Role: c.role.Role, Peer: c.peer.ID.String(), Model: c.role.ModelName, ModelCID: c.role.ModelCID,
		Weight: c.weight, Thermal: c.peer.Cap.Thermal, Unverified: !c.verified}
	if !c.peer.Self || o.Local == nil {
		// Beyond this originator's share of streams to the peer, the
		// question waits here for one to end (peercalls.go), before its
		// deadline and watch start.
		if err := o.calls.acquire(ctx, c.peer.ID); err != nil {
			a.Error, a.Err = "no time left for this agent: it waited for one of this peer's other questions to end", err
			return a
		}
		defer o.calls.release(c.peer.ID)
	}
	// With a user deadline, the server's own deadline ends first, so that
	// what it made comes back as a clean partial answer rather than a reset
	// stream.
	r := *req
	r.DeadlineMS = 0
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			a.Error = "no time left for this agent"
			return a
		}
		r.DeadlineMS = max((left - min(deadlineGrace, left/5)).Milliseconds(), 1)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ttft, tokps := o.expect(c)
	perToken := time.Duration(float64(time.Second) / tokps)
	// The first token also waits for the prompt (and a queue): until one
	// is measured, the probes alone decide.
	w := o.Progress.Watch(o.Host, ttft, []peer.ID{c.peer.ID}, func(id peer.ID, cause error) {
		// Out of the next questions' candidates until it answers a ping
		// again (swarm.View.MarkHung); a live peer merely stuck is not.
		if o.View != nil && !errors.Is(cause, swarm.ErrStalled) {
			o.View.MarkHung(id)
		}
		cancel()
	})
	var text, thought strings.Builder
	var rate decodeRate
	pieces := 0
	collect := func(t, r string) {
		pieces++
		rate.token()
		w.Progress(perToken)
		text.WriteString(t)
		thought.WriteString(r) // the agent's own, never its answer
		if onToken != nil && (t != "" || r != "") {
			onToken(t, r)
		}
	}
	start := time.Now()
	var done *Done
	var err error
	if c.peer.Self && o.Local != nil {
		done, err = o.Local.Serve(cctx, &r, func(t, r string) error { collect(t, r); return nil })
		a.Conn = "local"
	} else {
		if o.ConnKind != nil {
			a.Conn = o.ConnKind(c.peer.ID) // the connection the call's stream will take
		}
		if o.Introduce != nil {
			o.Introduce(c.peer.ID)
		}
		done, err = Call(cctx, o.Host, c.peer.ID, &r, collect)
		if a.Conn == "" && o.ConnKind != nil {
			a.Conn = o.ConnKind(c.peer.ID) // the call dialed
		}
	}
	hung, cause, detect := w.Stop()
	a.MS = ms(time.Since(start))
	a.Content, a.Reasoning = text.String(), thought.String()
	switch {
	case hung != "" && ctx.Err() == nil:
		a.Error = fmt.Sprintf("hung: %v (%s without progress)", cause, detect.Round(time.Millisecond))
		return a
	case err != nil:
		if errors.Is(err, context.DeadlineExceeded) || (cctx.Err() != nil && ctx.Err() == nil) {
			err = &timeoutError{after: time.Since(start).Round(time.Millisecond)}
		}
		a.Error = err.Error()
		a.Err = err
		return a
	}
	a.Tokens, a.TokPerSec, a.TTFTMS, a.Battery, a.Prompt = done.Tokens, done.TokPerSec, done.TTFTMS, done.Battery, done.PromptTokens
	if req.Draft != nil {
		a.Draft = &answer.Draft{Peer: req.Draft.Peer, Drafted: done.Drafted, Accepted: done.DraftAccepted,
			Rounds: done.DraftRounds, Error: done.DraftError}
	}
	a.ServerMS = done.TotalMS
	if done.Reason == string(engine.DoneStop) || done.Reason == string(engine.DoneLength) {
		a.Done = done.Reason
	}
	if done.Reason == "deadline" {
		if strings.TrimSpace(a.Content) == "" {
			a.Err = &timeoutError{after: time.Since(start).Round(time.Millisecond), beforeFirstToken: true}
			a.Error = a.Err.Error()
			return a
		}
		a.Partial, a.PartialReason = true, "cut off by its deadline"
	}
	if done.Thermal != "" {
		a.Thermal = done.Thermal
	}
	if done.Model != "" {
		a.Model = done.Model
	}
	if n := receiptTokens(&r, done, pieces); !c.peer.Self && o.Acknowledge != nil && n > 0 {
		o.Acknowledge(c.peer.ID, ledger.Item{Kind: ledger.KindMoA, Model: c.role.ModelCID, Role: c.role.Role, Tokens: n})
	}
	if !c.peer.Self {
		// What the originator saw, network included, sets how soon this
		// peer's next silence is suspicious.
		var seen time.Duration
		if done.TTFTMS > 0 {
			seen = time.Duration(done.TTFTMS*float64(time.Millisecond)) + o.rtt(c.peer.ID)
		}
		// Its speed is what this peer saw, never what it says.
		tokps := rate.perSec()
		o.stats.observe(c.peer.ID, seen, tokps)
		if tr := o.View.Trust(); tr != nil && tokps > 0 {
			tr.Measure(c.peer.ID, swarm.TokPerSecKey(c.role.Role), tokps)
		}
	}
	return a
}

func (o *Originator) rtt(id peer.ID) time.Duration {
	if o.Host == nil {
		return 0
	}
	return o.Host.Peerstore().LatencyEWMA(id)
}
