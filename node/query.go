package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/node/client"

	"github.com/llmswarm/llmswarm/moa"
)

// querySpec is one question for the swarm, from either HTTP API.
type querySpec struct {
	prompt    string
	history   []moa.Message
	stops     []string // the answer ends before the first of these
	mode      string   // auto, moa, speed, pipeline, or a role name
	model     string   // pipeline: model name or CID
	dtype     string   // pipeline: f32 (default) or f16
	standby   *bool    // pipeline: keep a warm standby route (nil: the config's pipeline.standby)
	speculate *bool    // pipeline: draft with pipeline.draft (nil: when there is one)
	maxTokens int
	sampling  moa.Sampling
	timeout   time.Duration
	onAgent   func(answer.Agent)
	// onAgentToken sees each agent's text as it is written (progress).
	onAgentToken func(role, peer, text string)
	onToken      func(string)
	onTrace      func(event string, v any)
}

// outcome is a strategy's answer.
type outcome struct {
	result     *answer.Result // the body of /v1/swarm/query
	final      string
	promptToks int
	genToks    int
	finish     string // OpenAI finish_reason: stop or length
}

// errHTTP carries the status an API error maps to.
type errHTTP struct {
	status int
	typ    string
	err    error
}

func (e *errHTTP) Error() string { return e.err.Error() }
func (e *errHTTP) Unwrap() error { return e.err }

func badRequest(format string, args ...any) error {
	return &errHTTP{http.StatusBadRequest, "invalid_request_error", fmt.Errorf(format, args...)}
}

// answer runs a query with the strategy its mode names.
func (n *Node) answer(ctx context.Context, q querySpec) (*outcome, error) {
	n.mu.Lock()
	o := n.originator
	n.mu.Unlock()
	if o == nil {
		return nil, &errHTTP{http.StatusServiceUnavailable, "unavailable", errors.New("peer is shutting down")}
	}
	mq := moa.Query{Prompt: q.prompt, History: q.history, MaxTokens: q.maxTokens, Sampling: q.sampling,
		Timeout: q.timeout, OnAgent: q.onAgent, OnAgentToken: q.onAgentToken, OnToken: q.onToken}
	var res *answer.Result
	var err error
	switch mode := q.mode; {
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
		out.promptToks, out.genToks = final.Prompt, final.Tokens
		if q.maxTokens > 0 && final.Tokens >= q.maxTokens {
			out.finish = "length"
		}
	}
	return out, nil
}

// classify maps strategy errors to HTTP statuses.
func classify(err error) error {
	var nr *moa.NoResponseError
	var eh *errHTTP
	switch {
	case errors.As(err, &eh):
		return err
	case errors.Is(err, context.Canceled):
		// The caller went away: whatever the agents did after that is
		// not the swarm's failure.
		return &errHTTP{499, "cancelled", err}
	case errors.Is(err, moa.ErrBadRequest):
		return &errHTTP{http.StatusBadRequest, "invalid_request_error", err}
	case errors.Is(err, moa.ErrNoAgents):
		return &errHTTP{http.StatusServiceUnavailable, "no_agents", err}
	case errors.As(err, &nr) && nr.All(moa.ErrBusy):
		return &errHTTP{http.StatusTooManyRequests, "busy", err}
	case errors.As(err, &nr):
		status := http.StatusServiceUnavailable
		if strings.Contains(err.Error(), "timed out") {
			status = http.StatusGatewayTimeout
		}
		return &errHTTP{status, "no_response", err}
	}
	return &errHTTP{http.StatusInternalServerError, "internal_error", err}
}

func statusOf(err error) (int, string) {
	var eh *errHTTP
	if errors.As(err, &eh) {
		return eh.status, eh.typ
	}
	return http.StatusInternalServerError, "internal_error"
}

func errFmt(format string, args ...any) error { return fmt.Errorf(format, args...) }

// requestError is what wire.DecodeRequest found wrong with a request, as a
// 400.
func requestError(err error) error {
	var eh *errHTTP
	if errors.As(err, &eh) {
		return err
	}
	return &errHTTP{http.StatusBadRequest, "invalid_request_error", err}
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
	if len(req.Stop) > MaxStops {
		return querySpec{}, badRequest("stop: %d strings, at most %d", len(req.Stop), MaxStops)
	}
	for i, st := range req.Stop {
		if st == "" {
			return querySpec{}, badRequest("stop[%d] is empty", i)
		}
	}
	spec := querySpec{prompt: req.Query, history: hist, stops: req.Stop, mode: req.Mode, model: req.Model, dtype: req.DType, standby: req.Standby, speculate: req.Speculate, maxTokens: req.MaxTokens,
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
func seedFor(temperature float32, given *uint64) uint64 {
	if given != nil {
		return *given
	}
	if temperature <= 0 {
		return 0
	}
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
