package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/moa"
)

// querySpec is one question for the swarm, from either HTTP API.
type querySpec struct {
	prompt    string
	history   []moa.Message
	stops     []string // the answer ends before the first of these
	mode      string   // auto, moa, speed, pipeline, a role name, or complete
	role      string   // complete: the role that continues the text ("": writer or pipeline)
	model     string   // pipeline: model name or CID
	dtype     string   // pipeline: f32 (default) or f16
	standby   *bool    // pipeline: keep a warm standby route (nil: the config's pipeline.standby)
	speculate *bool    // pipeline: draft with pipeline.draft (nil: when there is one)
	maxTokens int
	sampling  engine.Sampling
	timeout   time.Duration
	onAgent   func(answer.Agent)
	// onAgentToken sees each agent's text as it is written (progress).
	onAgentToken func(role, peer, text string)
	onToken      func(string)
	onTrace      func(event string, v any)
	// onReasoning sees the final answer's reasoning as it is written,
	// apart from its text (its writer's: a pipeline's model, the
	// aggregator, a role asked directly).
	onReasoning func(string)
}

// outcome is a strategy's answer.
type outcome struct {
	result     *answer.Result // the body of /v1/swarm/query
	final      string
	promptToks int
	genToks    int
	finish     string // OpenAI finish_reason: stop or length
}

// badRequest is the caller's mistake, formatted as fmt.Errorf does.
func badRequest(format string, args ...any) error {
	return answer.Errorf(answer.BadRequest, format, args...)
}

// answer runs a query with the strategy its mode names.
func (n *Node) answer(ctx context.Context, q querySpec) (*outcome, error) {
	n.mu.Lock()
	o := n.originator
	n.mu.Unlock()
	if o == nil {
		return nil, answer.Wrap(answer.Unavailable, errors.New("peer is shutting down"))
	}
	mq := moa.Query{Prompt: q.prompt, History: q.history, MaxTokens: q.maxTokens, Sampling: q.sampling,
		Timeout: q.timeout, OnAgent: q.onAgent, OnAgentToken: q.onAgentToken, OnToken: q.onToken, OnReasoning: q.onReasoning}
	var res *answer.Result
	var err error
	switch mode := q.mode; {
	case mode == answer.ModeComplete && q.role == "" && n.hasPipelineModel() && (q.model != "" || !n.hasRoles()):
		return n.answerPipeline(ctx, q)
	case mode == answer.ModeComplete:
		role := q.role
		if role == "" {
			role = moa.Writer
		}
		mq.Model, mq.Raw = q.model, true
		res, err = o.Direct(ctx, role, mq)
	case mode == "pipeline", (mode == "" || mode == "auto") && (q.model != "" || !n.hasRoles()) && n.hasPipelineModel():
		return n.answerPipeline(ctx, q)
	case mode == "" || mode == "auto":
		mq.Mode = moa.ModeMoA
		res, err = o.Ask(ctx, mq)
	case mode == string(moa.ModeMoA) || mode == string(moa.ModeSpeed):
		mq.Mode = moa.Mode(mode)
		res, err = o.Ask(ctx, mq)
	case moa.IsRole(mode):
		mq.Model = q.model
		res, err = o.Direct(ctx, mode, mq)
	default:
		return nil, badRequest("unknown mode %q (auto, moa, speed, pipeline or a role name)", mode)
	}
	if err != nil {
		return nil, classify(err)
	}
	out := &outcome{result: res, final: res.FinalAnswer}
	final := res.Aggregator
	if final == nil || final.Error != "" || final.Content != res.FinalAnswer {
		for i := range res.AgentResponses {
			if res.AgentResponses[i].Content == res.FinalAnswer {
				final = &res.AgentResponses[i]
			}
		}
	}
	out.finish = "stop"
	if final != nil {
		// The final answer's reasoning is its writer's: never another
		// agent's, and never part of the answer.
		res.Reasoning = final.Reasoning
		out.promptToks, out.genToks = final.Prompt, final.Tokens
		// The context filling up ends an answer as max_tokens does.
		if final.Done == "length" || q.maxTokens > 0 && final.Tokens >= q.maxTokens {
			out.finish = "length"
		}
	}
	return out, nil
}

// classify says which kind of failure a strategy's error is.
func classify(err error) error {
	var nr *moa.NoResponseError
	var known *answer.Error
	switch {
	case errors.As(err, &known):
		return err
	case errors.Is(err, context.Canceled):
		// The caller went away: whatever the agents did after that is
		// not the swarm's failure.
		return answer.Wrap(answer.Cancelled, err)
	case errors.Is(err, moa.ErrBadRequest):
		return answer.Wrap(answer.BadRequest, err)
	case errors.Is(err, moa.ErrNoAgents):
		return answer.Wrap(answer.NoAgents, err)
	case errors.As(err, &nr) && nr.All(moa.ErrBadRequest):
		// Every agent refused the question as asked (a chat to a model
		// without a chat template): the caller's to change.
		return answer.Wrap(answer.BadRequest, err)
	case errors.As(err, &nr) && nr.All(moa.ErrBusy):
		return answer.Wrap(answer.Busy, err)
	case errors.As(err, &nr):
		// nr matches context.DeadlineExceeded when an agent ran out of
		// time (moa.NoResponseError.TimedOut).
		return answer.Wrap(answer.NoResponse, err)
	}
	return answer.Wrap(answer.Internal, err)
}

// requestError is what wire.DecodeRequest found wrong with a request: the
// caller's mistake.
func requestError(err error) error {
	var known *answer.Error
	if errors.As(err, &known) {
		return err
	}
	return answer.Wrap(answer.BadRequest, err)
}

func specFromQuery(req client.QueryRequest) (querySpec, error) {
	if strings.TrimSpace(req.Query) == "" {
		return querySpec{}, badRequest("query is empty")
	}
	if req.MaxTokens < 0 || req.MaxTokens > 8192 {
		return querySpec{}, badRequest("max_tokens %d: want 0..8192", req.MaxTokens)
	}
	if req.TimeoutMS < 0 || req.TimeoutMS > 600_000 {
		return querySpec{}, badRequest("timeout_ms %d: want 0..600000", req.TimeoutMS)
	}
	if req.DType != "" && req.DType != "f16" && req.DType != "f32" {
		return querySpec{}, badRequest("dtype %q: want f16 or f32", req.DType)
	}
	hist, err := historyOf(req.History)
	if err != nil {
		return querySpec{}, err
	}
	switch {
	case req.Role != "" && req.Mode != answer.ModeComplete:
		return querySpec{}, badRequest("role %q: only complete mode takes a role (other modes name it as the mode)", req.Role)
	case req.Role != "" && !moa.IsRole(req.Role):
		return querySpec{}, badRequest("role %q: want one of %s", req.Role, strings.Join(moa.Roles, ", "))
	case req.Mode == answer.ModeComplete && len(hist) > 0:
		return querySpec{}, badRequest("complete mode continues one text: it takes no history")
	}
	if len(req.Stop) > MaxStops {
		return querySpec{}, badRequest("stop: %d strings, at most %d", len(req.Stop), MaxStops)
	}
	for i, st := range req.Stop {
		if st == "" {
			return querySpec{}, badRequest("stop[%d] is empty", i)
		}
	}
	spec := querySpec{prompt: req.Query, history: hist, stops: req.Stop, mode: req.Mode, role: req.Role, model: req.Model, dtype: req.DType, standby: req.Standby, speculate: req.Speculate, maxTokens: req.MaxTokens,
		timeout: time.Duration(req.TimeoutMS) * time.Millisecond}
	if spec.maxTokens == 0 {
		spec.maxTokens = defaultMaxTokens
	}
	if req.Temperature != nil {
		if *req.Temperature < 0 || *req.Temperature > 2 {
			return querySpec{}, badRequest("temperature %v: want 0..2", *req.Temperature)
		}
		spec.sampling.Temperature = *req.Temperature
	}
	spec.sampling.Seed = seedFor(spec.sampling.Temperature, req.Seed)
	if rp := req.RepeatPenalty; rp != nil {
		if *rp < 0 || *rp > 10 {
			return querySpec{}, badRequest("repeat_penalty %v: want 0..10", *rp)
		}
		spec.sampling.RepeatPenalty = *rp
	}
	if p := req.TopP; p != nil {
		if *p <= 0 || *p > 1 {
			return querySpec{}, badRequest("top_p %v: want (0,1]", *p)
		}
		spec.sampling.TopP = *p
	}
	return spec, nil
}

// MaxStops is the most stop strings a query may give (OpenAI's limit).
const MaxStops = 4

// maxHistory bounds a query's history; the request body's size bounds it
// too, this bounds the count of (possibly empty) turns.
const maxHistory = 1024

// historyOf checks a conversation's turns: known roles, and the system
// prompt, when there is one, first.
func historyOf(msgs []client.Message) ([]moa.Message, error) {
	if len(msgs) > maxHistory {
		return nil, badRequest("history: %d messages, at most %d", len(msgs), maxHistory)
	}
	out := make([]moa.Message, 0, len(msgs))
	for i, m := range msgs {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return nil, badRequest("history[%d].role %q: want system, user or assistant", i, m.Role)
		}
		out = append(out, moa.Message{Role: m.Role, Content: m.Content})
	}
	return out, nil
}

// defaultMaxTokens caps answers when the caller gives no limit.
const defaultMaxTokens = 256

// seedFor is the sampling seed of a request: the caller's, so that a given
// seed reproduces its answer, else a fresh one, so that sampling without a
// seed varies from call to call. Greedy decoding ignores it.
func seedFor(temperature float32, given *client.Seed) uint64 {
	if given != nil {
		return uint64(*given)
	}
	if temperature <= 0 {
		return 0
	}
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
