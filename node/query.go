package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/moa"
)

// querySpec is one question for the swarm, from either HTTP API.
type querySpec struct {
	prompt    string
	history   []moa.Message
	mode      string // auto, moa, speed, pipeline, or a role name
	model     string // pipeline: model name or CID
	dtype     string // pipeline: f32 (default) or f16
	standby   *bool  // pipeline: keep a warm standby route (nil: the config's pipeline.standby)
	maxTokens int
	sampling  moa.Sampling
	timeout   time.Duration
	onAgent   func(moa.AgentResponse)
	// onAgentToken sees each agent's text as it is written (progress).
	onAgentToken func(role, peer, text string)
	onToken      func(string)
	onTrace      func(event string, v any)
}

// outcome is a strategy's answer.
type outcome struct {
	result     any // JSON body of /v1/swarm/query
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
	var res *moa.Result
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
