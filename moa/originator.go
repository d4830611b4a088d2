package moa

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/swarm"
)

// Originator answers queries with the swarm's role peers. Any peer can be
// one, even one that holds no model.
type Originator struct {
	Host     host.Host
	View     *swarm.View
	Local    *Server // this peer's own roles, called in-process; may be nil
	Timeouts Timeouts
	Log      *slog.Logger
	// Exclude reports peers that must not be asked (e.g. declared dead by
	// the BMC). nil: none.
	Exclude func(peer.ID) bool
}

// Query is one question.
type Query struct {
	Prompt    string
	History   []Message // earlier turns, oldest first
	Mode      Mode
	MaxTokens int
	Sampling  Sampling
	Timeout   time.Duration       // 0: by mode and complexity
	Model     string              // Direct only: ask only peers running this model (name or CID)
	OnAgent   func(AgentResponse) // called as each agent finishes (serialized)
	OnToken   func(string)        // the final answer's text as it is produced (serialized)
}

// AgentResponse is one agent's answer, or its failure.
type AgentResponse struct {
	Role      string  `json:"role"`
	Peer      string  `json:"peer"`
	Model     string  `json:"model"`
	ModelCID  string  `json:"model_cid,omitempty"`
	Content   string  `json:"content"`
	Tokens    int     `json:"tokens"`
	TokPerSec float64 `json:"tok_s"`
	MS        float64 `json:"ms"`        // wall time seen by the originator
	ServerMS  float64 `json:"server_ms"` // the agent's own time, as it reports
	TTFTMS    float64 `json:"ttft_ms"`
	Prompt    int     `json:"prompt_tokens"`
	Weight    float64 `json:"weight"`
	Thermal   string  `json:"thermal,omitempty"`
	Battery   int     `json:"battery,omitempty"`
	Error     string  `json:"error,omitempty"`
}

// Result is the answer and how it was reached.
type Result struct {
	Query           string          `json:"query"`
	QueryType       QueryType       `json:"query_type"`
	Classifier      string          `json:"classifier"` // spotter or rules
	Mode            Mode            `json:"mode"`
	AgentResponses  []AgentResponse `json:"agent_responses"`
	FailedAgents    []AgentResponse `json:"failed_agents,omitempty"`
	Aggregator      *AgentResponse  `json:"aggregator,omitempty"`
	FinalAnswer     string          `json:"final_answer"`
	TotalTimeMS     float64         `json:"total_time_ms"`
	AgentsResponded int             `json:"agents_responded"`
}

func (o *Originator) log() *slog.Logger {
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}

// Ask answers q.
func (o *Originator) Ask(ctx context.Context, q Query) (*Result, error) {
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
	res := &Result{Query: q.Prompt, Mode: q.Mode, AgentResponses: []AgentResponse{}}
	var mu sync.Mutex
	onAgent := q.OnAgent
	q.OnAgent = func(a AgentResponse) {
		if onAgent != nil {
			mu.Lock()
			onAgent(a)
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
func (o *Originator) Direct(ctx context.Context, role string, q Query) (*Result, error) {
	if !IsRole(role) {
		return nil, fmt.Errorf("%w: unknown role %q", ErrBadRequest, role)
	}
	if strings.TrimSpace(q.Prompt) == "" {
		return nil, fmt.Errorf("%w: empty prompt", ErrBadRequest)
	}
	if err := o.request(role, q, q.Prompt).Validate(); err != nil {
		return nil, err
	}
	if len(o.modelCandidates(role, q.Model)) == 0 {
		return nil, fmt.Errorf("%w (no live peer serves %s%s)", ErrNoAgents, role, withModel(q.Model))
	}
	start := time.Now()
	res := &Result{Query: q.Prompt, Mode: Mode(role), QueryType: ClassifyRules(q.Prompt), Classifier: "rules"}
	timeout := q.Timeout
	if timeout <= 0 {
		timeout = o.Timeouts.For(ModeMoA, res.QueryType)
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	a := o.askModel(dctx, role, q.Model, o.request(role, q, q.Prompt), func(t string) { emit(q.OnToken, t) })
	if q.OnAgent != nil {
		q.OnAgent(a)
	}
	err := o.finishSingle(res, a)
	res.TotalTimeMS = ms(time.Since(start))
	res.AgentsResponded = len(res.AgentResponses)
	return res, err
}

// mixture: classify, fan out, aggregate.
func (o *Originator) mixture(ctx context.Context, q Query, res *Result) error {
	res.QueryType, res.Classifier = o.classify(ctx, q.Prompt)
	roles := Targets(res.QueryType)
	var present []string
	for _, r := range roles {
		if len(o.candidates(r)) > 0 {
			present = append(present, r)
		}
	}
	if len(present) == 0 {
		return fmt.Errorf("%w (%s needs %s)", ErrNoAgents, res.QueryType, strings.Join(roles, ", "))
	}
	timeout := q.Timeout
	if timeout <= 0 {
		timeout = o.Timeouts.For(ModeMoA, res.QueryType)
	}
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	answers := make([]AgentResponse, len(present))
	var wg sync.WaitGroup
	for i, role := range present {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = o.askRole(fctx, role, o.request(role, q, q.Prompt), nil)
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
	if len(res.AgentResponses) == 1 {
		res.FinalAnswer = res.AgentResponses[0].Content
		emit(q.OnToken, res.FinalAnswer)
		return nil
	}
	best := res.AgentResponses[0]
	for _, a := range res.AgentResponses[1:] {
		if a.Weight > best.Weight {
			best = a
		}
	}
	if len(o.candidates(Aggregator)) > 0 {
		actx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var final strings.Builder
		agg := o.askRole(actx, Aggregator, o.request(Aggregator, q, aggregationPrompt(q.Prompt, res.AgentResponses)), func(t string) {
			final.WriteString(t)
			emit(q.OnToken, t)
		})
		res.Aggregator = &agg
		if agg.Error == "" && strings.TrimSpace(agg.Content) != "" {
			res.FinalAnswer = agg.Content
			return nil
		}
		o.log().Info("aggregator failed; returning the best agent answer", "err", agg.Error)
		if final.Len() > 0 {
			emit(q.OnToken, "\n\n")
		}
	}
	res.FinalAnswer = best.Content
	emit(q.OnToken, best.Content)
	return nil
}

// speed: a drafter answers, the best reasoner verifies or corrects it.
func (o *Originator) speed(ctx context.Context, q Query, res *Result) error {
	res.QueryType, res.Classifier = ClassifyRules(q.Prompt), "rules"
	timeout := q.Timeout
	if timeout <= 0 {
		timeout = o.Timeouts.For(ModeSpeed, res.QueryType)
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hasDrafter, hasReasoner := len(o.candidates(Drafter)) > 0, len(o.candidates(Reasoner)) > 0
	if !hasDrafter && !hasReasoner {
		return fmt.Errorf("%w (speed mode needs a drafter or a reasoner)", ErrNoAgents)
	}
	if !hasDrafter { // no draft to verify: the reasoner answers alone
		a := o.askRole(sctx, Reasoner, o.request(Reasoner, q, q.Prompt), func(t string) { emit(q.OnToken, t) })
		q.OnAgent(a)
		return o.finishSingle(res, a)
	}
	draft := o.askRole(sctx, Drafter, o.request(Drafter, q, q.Prompt), nil)
	q.OnAgent(draft)
	if draft.Error != "" {
		res.FailedAgents = append(res.FailedAgents, draft)
		if !hasReasoner {
			return noResponse(res.FailedAgents)
		}
		a := o.askRole(sctx, Reasoner, o.request(Reasoner, q, q.Prompt), func(t string) { emit(q.OnToken, t) })
		q.OnAgent(a)
		return o.finishSingle(res, a)
	}
	res.AgentResponses = append(res.AgentResponses, draft)
	if !hasReasoner {
		res.FinalAnswer = draft.Content
		emit(q.OnToken, draft.Content)
		return nil
	}
	var streamed bool
	check := o.askRole(sctx, Reasoner, o.request(Reasoner, q, verifyPrompt(q.Prompt, draft.Content)), func(t string) {
		streamed = true
		emit(q.OnToken, t)
	})
	q.OnAgent(check)
	if check.Error != "" || strings.TrimSpace(check.Content) == "" {
		if check.Error != "" {
			res.FailedAgents = append(res.FailedAgents, check)
		}
		if streamed {
			emit(q.OnToken, "\n\n")
		}
		res.FinalAnswer = draft.Content
		emit(q.OnToken, draft.Content)
		return nil
	}
	res.AgentResponses = append(res.AgentResponses, check)
	res.FinalAnswer = check.Content
	return nil
}

func (o *Originator) finishSingle(res *Result, a AgentResponse) error {
	if a.Error != "" {
		res.FailedAgents = append(res.FailedAgents, a)
		return noResponse(res.FailedAgents)
	}
	res.AgentResponses = append(res.AgentResponses, a)
	res.FinalAnswer = a.Content
	return nil
}

func noResponse(failed []AgentResponse) error {
	e := &NoResponseError{}
	for _, f := range failed {
		e.Failed = append(e.Failed, &AgentError{Role: f.Role, Peer: f.Peer, Err: errors.New(f.Error)})
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
	msgs := append([]Message(nil), q.History...)
	msgs = append(msgs, Message{Role: "user", Content: prompt})
	think := false // the agents answer; their reasoning stays inside the answer
	return &Request{Role: role, Messages: msgs, Sampling: q.Sampling, MaxTokens: q.MaxTokens, Think: &think}
}

// candidates are the live holders of role that routing may use.
func (o *Originator) candidates(role string) []candidate {
	all := candidates(o.View, role)
	if o.Exclude == nil {
		return all
	}
	out := all[:0]
	for _, c := range all {
		if !o.Exclude(c.peer.ID) {
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

// askRole asks the best live holder of role, moving to the next one when a
// peer is busy or unreachable, until ctx ends.
func (o *Originator) askRole(ctx context.Context, role string, req *Request, onToken func(string)) AgentResponse {
	return o.askModel(ctx, role, "", req, onToken)
}

// askModel is askRole restricted to peers running model ("" for any).
func (o *Originator) askModel(ctx context.Context, role, model string, req *Request, onToken func(string)) AgentResponse {
	cands := o.modelCandidates(role, model)
	a := AgentResponse{Role: role, Error: "no live peer serves " + role}
	for _, c := range cands {
		if dl, ok := ctx.Deadline(); ok {
			req.DeadlineMS = time.Until(dl).Milliseconds()
			if req.DeadlineMS <= 0 {
				break
			}
		}
		streamed := false
		a = o.askPeer(ctx, c, req, func(t string) {
			streamed = true
			if onToken != nil {
				onToken(t)
			}
		})
		// Once text reached the caller, another peer's answer cannot follow
		// it without garbling the stream: the failure stands.
		if a.Error == "" || ctx.Err() != nil || (streamed && onToken != nil) {
			return a
		}
		o.log().Info("agent failed", "role", role, "peer", c.peer.ID, "err", a.Error)
	}
	return a
}

func (o *Originator) askPeer(ctx context.Context, c candidate, req *Request, onToken func(string)) AgentResponse {
	a := AgentResponse{Role: c.role.Role, Peer: c.peer.ID.String(), Model: c.role.ModelName, ModelCID: c.role.ModelCID,
		Weight: c.weight, Thermal: c.peer.Cap.Thermal}
	var text strings.Builder
	collect := func(t string) {
		text.WriteString(t)
		if onToken != nil {
			onToken(t)
		}
	}
	start := time.Now()
	var done *Done
	var err error
	if c.peer.Self && o.Local != nil {
		done, err = o.Local.Serve(ctx, req, func(t string) error { collect(t); return nil })
	} else {
		done, err = Call(ctx, o.Host, c.peer.ID, req, collect)
	}
	a.MS = ms(time.Since(start))
	a.Content = text.String()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after %s", time.Since(start).Round(time.Millisecond))
		}
		a.Error = err.Error()
		return a
	}
	a.Tokens, a.TokPerSec, a.TTFTMS, a.Battery, a.Prompt = done.Tokens, done.TokPerSec, done.TTFTMS, done.Battery, done.PromptTokens
	a.ServerMS = done.TotalMS
	if done.Thermal != "" {
		a.Thermal = done.Thermal
	}
	if done.Model != "" {
		a.Model = done.Model
	}
	return a
}

// classify asks a live spotter (strictly parsed), else uses the rules.
func (o *Originator) classify(ctx context.Context, prompt string) (QueryType, string) {
	if len(o.candidates(Spotter)) > 0 {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		think := false
		a := o.askRole(sctx, Spotter, &Request{Role: Spotter, Messages: []Message{{Role: "user", Content: prompt}},
			MaxTokens: 8, Think: &think}, nil)
		if a.Error == "" {
			if t, ok := ParseSpotter(a.Content); ok {
				return t, "spotter"
			}
			o.log().Debug("spotter answer not a category; using rules", "answer", trunc(a.Content))
		}
	}
	return ClassifyRules(prompt), "rules"
}

// maxAnswerInPrompt bounds each agent answer quoted to the aggregator, so
// five long answers still fit a small model's context.
const maxAnswerInPrompt = 3000

func aggregationPrompt(question string, answers []AgentResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Question: %s\n\nAnswers from the agents:\n", question)
	for i, a := range answers {
		model := a.Model
		if model == "" {
			model = "unknown model"
		}
		text := strings.TrimSpace(a.Content)
		if len(text) > maxAnswerInPrompt {
			cut := maxAnswerInPrompt
			for cut > 0 && !utf8.RuneStart(text[cut]) {
				cut--
			}
			text = text[:cut] + " [...]"
		}
		fmt.Fprintf(&b, "\n[%d] %s (model %s):\n%s\n", i+1, titleCase(a.Role), model, text)
	}
	b.WriteString("\nWrite the single best answer to the question.")
	return b.String()
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
