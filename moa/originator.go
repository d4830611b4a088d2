package moa

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/ledger"
	"github.com/llmswarm/llmswarm/swarm"
)

// Originator answers queries with the swarm's role peers. Any peer can be
// one, even one that holds no model. It asks only the holders its View
// says are Routable (alive, not banned, not dead by the BMC), and weighs
// them by what the View's ledger (View.Trust; nil: none) measured of
// them (see trust.go).
type Originator struct {
	Host     host.Host
	View     *swarm.View
	Local    *Server // this peer's own roles, called in-process; may be nil
	Timeouts Timeouts
	Log      *slog.Logger
	// Progress is how a hung agent is noticed (see swarm.Progress).
	Progress swarm.Progress
	// Vet checks a role peer's claim (swarm.RoleClaim of its model) in
	// the background (see vet.go); what it proves is read from the View's
	// ledger. nil: no vetting (only holders the ledger already verified,
	// and this peer itself, count as verified).
	Vet func(ctx context.Context, id peer.ID, c swarm.Claim) error
	// Unverified says whether holders not verified are asked when a role
	// has no verified one (default UnverifiedNever); UnverifiedCaps bound
	// how many of them one question considers.
	Unverified     Unverified
	UnverifiedCaps UnverifiedCaps
	// ConnKind, if set, says how this peer reaches a peer ("direct",
	// "punched" or "relayed"); traces show it per agent.
	ConnKind func(peer.ID) string
	// Acknowledge, when set, is given a receipt for each answer another
	// peer sent (ledger.Exchange.Ack): what this peer received, bounded by
	// what it can check (receipt.go).
	Acknowledge func(server peer.ID, it ledger.Item)
	// Introduce, when set, is called before a remote peer is asked: this
	// peer presents it the receipts others signed for its work
	// (ledger.Exchange.Introduce), in the background.
	Introduce func(server peer.ID)

	calls       peerCalls       // calls open to each peer (peercalls.go)
	stats       peerStats       // what this originator measured of each peer
	badDrafters droppedDrafters // drafters reasoners gave up on (speed.go)
	vets        vetting         // background checks of role holders (vet.go)
}

// Query is one question.
type Query struct {
	Prompt    string
	History   []Message // earlier turns, oldest first
	Mode      Mode
	MaxTokens int
	Sampling  engine.Sampling
	// Timeout is the user's deadline for the whole answer. 0: the
	// configured Timeouts if any, else none (each agent gets the time its
	// device needs, and hung peers are caught by the progress watch).
	Timeout time.Duration
	Model   string // Direct only: ask only peers running this model (name or CID)
	// Raw, Direct only: Prompt is a raw completion's text (no history, no
	// chat template, no role prompt).
	Raw     bool
	OnAgent func(answer.Agent) // called as each agent finishes (serialized)
	// OnAgentToken receives the agents' text as they write it (serialized),
	// for progress displays; the peer tells apart a second holder's answer
	// after the first one failed.
	OnAgentToken func(role, peer, text string)
	OnToken      func(string) // the final answer's text as it is produced (serialized)
	// OnReasoning receives the final answer's reasoning as its writer
	// produces it, apart from its text (GPT-OSS's analysis channel;
	// serialized with OnToken). Agents' reasoning is never streamed: it
	// is in their answer.Agent.
	OnReasoning func(string)
}

// finalStream streams the final answer as its writers produce it: their
// reasoning and their text, apart. When a writer fails after writing, what
// it wrote stays written, and the next writer's text (and reasoning)
// follows after a blank line.
type finalStream struct {
	text, reasoning streamed
	peer            string // the writer of the last piece
}

// streamed is one of a final answer's streams.
type streamed struct {
	emit        func(string) // may be nil
	wrote, owed bool         // something was written; a blank line is owed before the next piece
}

func (s *streamed) put(piece string) {
	if piece == "" {
		return
	}
	if s.owed {
		emit(s.emit, "\n\n")
		s.owed = false
	}
	s.wrote = true
	emit(s.emit, piece)
}

func newFinalStream(q Query) *finalStream {
	return &finalStream{text: streamed{emit: q.OnToken}, reasoning: streamed{emit: q.OnReasoning}}
}

// write is an askRole callback for the final answer's writers: a piece
// from another peer than the last one's is a new writer's.
func (f *finalStream) write(peer, t, r string) {
	if peer != f.peer {
		f.next()
		f.peer = peer
	}
	f.reasoning.put(r)
	f.text.put(t)
}

// next says the writer failed: another writer follows.
func (f *finalStream) next() { f.text.owed, f.reasoning.owed = f.text.wrote, f.reasoning.wrote }

// whole writes an answer that was not streamed, after the writers before it.
func (f *finalStream) whole(a answer.Agent) {
	f.next()
	f.write(a.Peer, a.Content, a.Reasoning)
}

// agentTokens streams an agent's text (not its reasoning) to OnAgentToken.
func (q Query) agentTokens(role string) func(peer, text, reasoning string) {
	return func(p, t, _ string) {
		if t != "" {
			q.OnAgentToken(role, p, t)
		}
	}
}

func (o *Originator) log() *slog.Logger {
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}

// Ask answers q.
func (o *Originator) Ask(ctx context.Context, q Query) (*answer.Result, error) {
	if strings.TrimSpace(q.Prompt) == "" {
		return nil, fmt.Errorf("%w: empty prompt", ErrBadRequest)
	}
	if q.Mode == "" {
		q.Mode = ModeMoA
	}
	if err := o.request(Reasoner, q, q.Prompt).Validate(); err != nil {
		return nil, err // too many messages, too much text: the caller's fault, not the agents'
	}
	start := time.Now()
	res := &answer.Result{Query: q.Prompt, Mode: string(q.Mode), AgentResponses: []answer.Agent{}}
	var mu sync.Mutex
	onAgent, onAgentToken := q.OnAgent, q.OnAgentToken
	q.OnAgent = func(a answer.Agent) {
		if onAgent != nil {
			mu.Lock()
			onAgent(a)
			mu.Unlock()
		}
	}
	q.OnAgentToken = func(role, peer, text string) {
		if onAgentToken != nil {
			mu.Lock()
			onAgentToken(role, peer, text)
			mu.Unlock()
		}
	}
	var err error
	switch q.Mode {
	case ModeSpeed:
		err = o.speed(ctx, q, res)
	case ModeMoA:
		err = o.mixture(ctx, q, res)
	default:
		return nil, fmt.Errorf("%w: mode %q", ErrBadRequest, q.Mode)
	}
	res.TotalTimeMS = ms(time.Since(start))
	res.AgentsResponded = len(res.AgentResponses)
	return res, err
}

// Direct asks one role (the best live peer serving it) and streams its
// answer: the OpenAI API's model field can name a role.
func (o *Originator) Direct(ctx context.Context, role string, q Query) (*answer.Result, error) {
	if !IsRole(role) {
		return nil, fmt.Errorf("%w: unknown role %q", ErrBadRequest, role)
	}
	if strings.TrimSpace(q.Prompt) == "" {
		return nil, fmt.Errorf("%w: empty prompt", ErrBadRequest)
	}
	if q.Raw && len(q.History) > 0 {
		return nil, fmt.Errorf("%w: a raw completion has no history", ErrBadRequest)
	}
	if err := o.request(role, q, q.Prompt).Validate(); err != nil {
		return nil, err
	}
	if len(o.modelCandidates(role, q.Model)) == 0 {
		return nil, fmt.Errorf("%w (no live peer serves %s%s%s)", ErrNoAgents, role, withModel(q.Model), o.idleHolders(role))
	}
	start := time.Now()
	qt := ClassifyRules(q.Prompt)
	res := &answer.Result{Query: q.Prompt, Mode: role, QueryType: string(qt), Classifier: "rules"}
	dctx, cancel := o.deadline(ctx, q, ModeMoA, qt)
	defer cancel()
	a := o.askModel(dctx, role, q.Model, o.request(role, q, q.Prompt), newFinalStream(q).write, true)
	if q.OnAgent != nil {
		q.OnAgent(a)
	}
	err := o.finishSingle(res, a)
	res.TotalTimeMS = ms(time.Since(start))
	res.AgentsResponded = len(res.AgentResponses)
	return res, err
}

// mixture: classify, fan out, aggregate.
func (o *Originator) mixture(ctx context.Context, q Query, res *answer.Result) error {
	// The aggregator's holders are checked while the agents answer: it
	// takes no prompt unverified, and waits for its checks only for what
	// is left of vetWait when the agents are done.
	o.startVets(Aggregator, o.candidates(Aggregator))
	qt, classifier, spotter := o.classify(ctx, q.Prompt)
	res.QueryType, res.Classifier = string(qt), classifier
	if spotter != nil {
		// Not a failure of the answer: the trace says the spotter's
		// holders were left out, after the agents.
		defer func() { res.FailedAgents = append(res.FailedAgents, *spotter) }()
	}
	roles := Targets(qt)
	var present []string
	for _, r := range roles {
		if len(o.candidates(r)) > 0 {
			present = append(present, r)
		}
	}
	if len(present) == 0 {
		return fmt.Errorf("%w (%s needs %s%s)", ErrNoAgents, qt, strings.Join(roles, ", "), o.idleHolders(roles...))
	}
	fctx, cancel := o.deadline(ctx, q, ModeMoA, qt)
	defer cancel()
	answers := make([]answer.Agent, len(present))
	var wg sync.WaitGroup
	for i, role := range present {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = o.askRole(fctx, role, o.request(role, q, q.Prompt), q.agentTokens(role), false)
			q.OnAgent(answers[i])
		}()
	}
	wg.Wait()
	for _, a := range answers {
		if a.Error == "" {
			res.AgentResponses = append(res.AgentResponses, a)
		} else {
			res.FailedAgents = append(res.FailedAgents, a)
		}
	}
	if len(res.AgentResponses) == 0 {
		return noResponse(res.FailedAgents)
	}
	best := bestAnswer(res.AgentResponses)
	out := newFinalStream(q)
	if len(nonEmpty(res.AgentResponses)) > 1 && len(o.candidates(Aggregator)) > 0 && fctx.Err() == nil {
		agg := o.aggregate(fctx, q, res.AgentResponses, out.write)
		res.Aggregator = &agg
		if agg.Error == "" && strings.TrimSpace(agg.Content) != "" {
			res.FinalAnswer = agg.Content
			return nil
		}
		o.log().Info("aggregator failed; returning the best agent answer", "err", agg.Error)
	}
	res.FinalAnswer = best.Content
	out.whole(best)
	return nil
}

// deadline applies the user's deadline: the query's Timeout, else the
// configured Timeouts, else none.
func (o *Originator) deadline(ctx context.Context, q Query, mode Mode, qt QueryType) (context.Context, context.CancelFunc) {
	timeout := q.Timeout
	if timeout <= 0 {
		timeout = o.Timeouts.For(mode, qt)
	}
	if timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, timeout)
}

// bestAnswer is the highest-weight non-empty answer, a complete one before
// a partial one; an empty answer only when all are empty.
func bestAnswer(as []answer.Agent) answer.Agent {
	rank := func(a answer.Agent) float64 {
		r := a.Weight
		if strings.TrimSpace(a.Content) == "" {
			r -= 1000
		}
		if a.Partial {
			r -= 100
		}
		return r
	}
	best := as[0]
	for _, a := range as[1:] {
		if rank(a) > rank(best) {
			best = a
		}
	}
	return best
}

func nonEmpty(as []answer.Agent) []answer.Agent {
	var out []answer.Agent
	for _, a := range as {
		if strings.TrimSpace(a.Content) != "" {
			out = append(out, a)
		}
	}
	return out
}

func (o *Originator) finishSingle(res *answer.Result, a answer.Agent) error {
	if a.Error != "" {
		res.FailedAgents = append(res.FailedAgents, a)
		return noResponse(res.FailedAgents)
	}
	res.AgentResponses = append(res.AgentResponses, a)
	res.FinalAnswer = a.Content
	return nil
}

// noResponse is the error of a question no agent answered: ErrNoAgents
// when every role was left out for want of a verified holder (no peer was
// asked), else a NoResponseError.
func noResponse(failed []answer.Agent) error {
	var why []string
	for _, f := range failed {
		if !errors.Is(f.Err, ErrUnverified) {
			why = nil
			break
		}
		why = append(why, f.Error)
	}
	if len(why) > 0 {
		return fmt.Errorf("%w (%s)", ErrNoAgents, strings.Join(why, "; "))
	}
	e := &NoResponseError{}
	for _, f := range failed {
		err := f.Err
		if err == nil {
			err = errors.New(f.Error)
		}
		e.Failed = append(e.Failed, &AgentError{Role: f.Role, Peer: f.Peer, Err: err})
		var te *timeoutError
		e.TimedOut = e.TimedOut || errors.As(err, &te)
	}
	return e
}

func emit(fn func(string), s string) {
	if fn != nil && s != "" {
		fn(s)
	}
}

// request builds the wire request for one role.
func (o *Originator) request(role string, q Query, prompt string) *Request {
	if q.Raw {
		return &Request{Role: role, Prompt: prompt, Sampling: q.Sampling, MaxTokens: q.MaxTokens}
	}
	msgs := append([]Message(nil), q.History...)
	msgs = append(msgs, Message{Role: "user", Content: prompt})
	// Qwen3 answers without a <think> block; GPT-OSS reasons whatever is
	// asked, and its reasoning comes apart (answer.Agent.Reasoning).
	think := false
	return &Request{Role: role, Messages: msgs, Sampling: q.Sampling, MaxTokens: q.MaxTokens, Think: &think}
}

// candidates are the holders of role that routing may use (View.Routable),
// best first.
func (o *Originator) candidates(role string) []candidate {
	// Peers found hung that answer pings again rejoin later questions.
	o.View.RecheckHung(o.Host, o.Progress.Defaults().ProbeTimeout)
	all := candidates(o.View, role, o.weigh)
	out := all[:0]
	for _, c := range all {
		if o.View.Routable(c.peer.ID) {
			out = append(out, c)
		}
	}
	return out
}

func withModel(m string) string {
	if m == "" {
		return ""
	}
	return " with model " + m
}

// modelCandidates are the live holders of role running model (any model
// when it is "").
func (o *Originator) modelCandidates(role, model string) []candidate {
	all := o.candidates(role)
	if model == "" {
		return all
	}
	out := all[:0]
	for _, c := range all {
		if c.role.ModelCID == model || c.role.ModelName == model {
			out = append(out, c)
		}
	}
	return out
}

// classify asks a live, verified spotter (strictly parsed), else uses
// the rules. skipped is the spotter's entry for the trace when its
// holders were left out unverified.
func (o *Originator) classify(ctx context.Context, prompt string) (qt QueryType, by string, skipped *answer.Agent) {
	if len(o.candidates(Spotter)) > 0 {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		think := false
		a := o.askRole(sctx, Spotter, &Request{Role: Spotter, Messages: []Message{{Role: "user", Content: prompt}},
			MaxTokens: 8, Think: &think}, nil, false)
		if a.Error == "" {
			if t, ok := ParseSpotter(a.Content); ok {
				return t, "spotter", nil
			}
			o.log().Debug("spotter answer not a category; using rules", "answer", trunc(a.Content))
		}
		if errors.Is(a.Err, ErrUnverified) {
			skipped = &a
		}
	}
	return ClassifyRules(prompt), "rules", skipped
}

func verifyPrompt(question, draft string) string {
	return fmt.Sprintf("Question: %s\n\nDraft answer:\n%s\n\nVerify the draft step by step. If it is correct, "+
		"give it as the final answer; if not, give the corrected answer.", question, strings.TrimSpace(draft))
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
