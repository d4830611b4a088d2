package moa

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
)

// speed answers fast. Where a drafter and a reasoner share a tokenizer,
// the reasoner answers with the drafter drafting its tokens (speculative
// decoding across two peers: the reasoner's own answer, several tokens per
// step); otherwise the drafter answers and the best reasoner verifies or
// corrects the text.
func (o *Originator) speed(ctx context.Context, q Query, res *answer.Result) error {
	qt := ClassifyRules(q.Prompt)
	res.QueryType, res.Classifier = string(qt), "rules"
	sctx, cancel := o.deadline(ctx, q, ModeSpeed, qt)
	defer cancel()
	hasDrafter, hasReasoner := len(o.candidates(Drafter)) > 0, len(o.candidates(Reasoner)) > 0
	if !hasDrafter && !hasReasoner {
		return fmt.Errorf("%w (speed mode needs a drafter or a reasoner%s)", ErrNoAgents, o.idleHolders(Drafter, Reasoner))
	}
	if dc, reasoners := o.draftPair(); len(reasoners) > 0 {
		return o.speculativeSpeed(sctx, q, res, dc, reasoners)
	}
	if !hasDrafter { // no draft to verify: the reasoner answers alone
		a := o.askRole(sctx, Reasoner, o.request(Reasoner, q, q.Prompt), newFinalStream(q).write, true)
		q.OnAgent(a)
		return o.finishSingle(res, a)
	}
	draft := o.askRole(sctx, Drafter, o.request(Drafter, q, q.Prompt), q.agentTokens(Drafter), false)
	q.OnAgent(draft)
	if draft.Error != "" {
		res.FailedAgents = append(res.FailedAgents, draft)
		if !hasReasoner {
			return noResponse(res.FailedAgents)
		}
		a := o.askRole(sctx, Reasoner, o.request(Reasoner, q, q.Prompt), newFinalStream(q).write, true)
		q.OnAgent(a)
		return o.finishSingle(res, a)
	}
	res.AgentResponses = append(res.AgentResponses, draft)
	out := newFinalStream(q)
	if !hasReasoner {
		res.FinalAnswer = draft.Content
		out.whole(draft)
		return nil
	}
	check := o.askRole(sctx, Reasoner, o.request(Reasoner, q, verifyPrompt(q.Prompt, draft.Content)), out.write, true)
	q.OnAgent(check)
	if check.Error != "" || strings.TrimSpace(check.Content) == "" {
		if check.Error != "" {
			res.FailedAgents = append(res.FailedAgents, check)
		}
		res.FinalAnswer = draft.Content
		out.whole(draft)
		return nil
	}
	res.AgentResponses = append(res.AgentResponses, check)
	res.FinalAnswer = check.Content
	return nil
}

// draftPair is the best verified drafter with the reasoners (best first) whose
// announced tokenizer is its: who can answer speculatively.
func (o *Originator) draftPair() (candidate, []candidate) {
	reasoners := o.candidates(Reasoner)
	drafters := o.candidates(Drafter)
	o.startVets(Drafter, drafters)
	for _, d := range drafters {
		// The drafter sees the prompt: only a verified one drafts.
		if d.role.Vocab == "" || !d.verified || o.badDrafters.recent(d.peer.ID) {
			continue
		}
		var same []candidate
		for _, r := range reasoners {
			if r.role.Vocab == d.role.Vocab {
				same = append(same, r)
			}
		}
		if len(same) > 0 {
			return d, same
		}
	}
	return candidate{}, nil
}

// speculativeSpeed has a reasoner answer, drafted by the drafter dc. The
// reasoner checks the tokenizer again and answers plainly when the
// drafter fails or lies; if the reasoners fail, the drafter answers alone.
func (o *Originator) speculativeSpeed(ctx context.Context, q Query, res *answer.Result, dc candidate, reasoners []candidate) error {
	req := o.request(Reasoner, q, q.Prompt)
	req.Draft = &DraftPeer{Peer: dc.peer.ID.String()}
	if o.Host != nil {
		for _, a := range o.Host.Peerstore().Addrs(dc.peer.ID) {
			if len(req.Draft.Addrs) < maxDraftAddrs {
				req.Draft.Addrs = append(req.Draft.Addrs, a.String())
			}
		}
	}
	out := newFinalStream(q)
	a := o.askAmong(ctx, Reasoner, reasoners, req, out.write, true)
	q.OnAgent(a)
	if a.Draft != nil && a.Draft.Error != "" {
		// The reasoner gave up on this drafter: the next speed questions
		// are asked without it for a while.
		o.badDrafters.add(dc.peer.ID)
	}
	if a.Error == "" {
		res.AgentResponses = append(res.AgentResponses, a)
		res.FinalAnswer = a.Content
		return nil
	}
	res.FailedAgents = append(res.FailedAgents, a)
	out.next()
	d := o.askRole(ctx, Drafter, o.request(Drafter, q, q.Prompt), out.write, true)
	q.OnAgent(d)
	return o.finishSingle(res, d)
}

// draftSkip is how long a drafter a reasoner gave up on is left out of
// speculative speed mode.
const draftSkip = 10 * time.Minute

// droppedDrafters are the drafters reasoners gave up on, and when.
type droppedDrafters struct {
	mu sync.Mutex
	at map[peer.ID]time.Time
}

func (d *droppedDrafters) add(id peer.ID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.at == nil {
		d.at = map[peer.ID]time.Time{}
	}
	now := time.Now()
	for p, t := range d.at {
		if now.Sub(t) > draftSkip {
			delete(d.at, p)
		}
	}
	d.at[id] = now
}

func (d *droppedDrafters) recent(id peer.ID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.at[id]
	return ok && time.Since(t) < draftSkip
}
