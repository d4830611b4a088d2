package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/internal/wire"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node"
)

// TestStatusOf: every kind of failure answers with the status and type it
// always did; statusOf is the one place that decides them.
func TestStatusOf(t *testing.T) {
	noAgent := &moa.NoResponseError{Failed: []*moa.AgentError{{Role: "writer", Err: moa.ErrBusy}}}
	timedOut := &moa.NoResponseError{Failed: []*moa.AgentError{{Role: "writer", Err: errors.New("timed out after 2s")}}, TimedOut: true}
	cases := []struct {
		err    error
		status int
		typ    string
	}{
		{answer.Errorf(answer.BadRequest, "query is empty"), 400, "invalid_request_error"},
		{answer.Errorf(answer.ContextFull, "too long"), 400, "context_length_exceeded"},
		{answer.Errorf(answer.NotFound, "role critic is not served here"), 404, "not_found"},
		{answer.Errorf(answer.ModelNotFound, "model x not found"), 404, "model_not_found"},
		{answer.Errorf(answer.Unavailable, "peer is shutting down"), 503, "unavailable"},
		{node.ErrNotRunning, 503, "unavailable"},
		{fmt.Errorf("roles: %w", node.ErrNotRunning), 503, "unavailable"},
		{answer.Wrap(answer.NoAgents, moa.ErrNoAgents), 503, "no_agents"},
		{answer.Errorf(answer.NoRoute, "no route"), 503, "no_route"},
		{answer.Wrap(answer.NoResponse, noAgent), 503, "no_response"},
		{answer.Wrap(answer.NoResponse, timedOut), 504, "no_response"},
		{answer.Wrap(answer.Busy, noAgent), 429, "busy"},
		{answer.Errorf(answer.Timeout, "pipeline: no answer within 1s: %w", context.DeadlineExceeded), 504, "timeout"},
		{answer.Wrap(answer.Cancelled, context.Canceled), 499, "cancelled"},
		{answer.Errorf(answer.PipelineFailed, "stage died"), 502, "pipeline_failed"},
		{answer.Errorf(answer.NoPlan, "no plan"), 409, "no_plan"},
		{answer.Errorf(answer.NoMemory, "over budget"), 507, "no_memory"},
		{answer.Errorf(answer.NoStorage, "disk full"), 507, "insufficient_storage"},
		{answer.Errorf(answer.HubAuth, "denied"), 403, "hub_auth"},
		{answer.Errorf(answer.HubCorrupt, "bad hash"), 502, "hub_corrupt"},
		{answer.Errorf(answer.HubFailed, "unreachable"), 502, "hub_failed"},
		{answer.Errorf(answer.NotAModel, "a LoRA"), 422, "not_a_model"},
		{answer.Errorf(answer.Internal, "bug"), 500, "internal_error"},
		{errors.New("unforeseen"), 500, "internal_error"},
		{&wire.RequestError{Field: "bogus", Msg: `unknown field "bogus"`}, 400, "invalid_request_error"},
		{&apiError{http.StatusUnsupportedMediaType, "invalid_request_error", errors.New("form")}, 415, "invalid_request_error"},
	}
	for _, c := range cases {
		if status, typ := statusOf(c.err); status != c.status || typ != c.typ {
			t.Errorf("%v: %d %s, want %d %s", c.err, status, typ, c.status, c.typ)
		}
	}
}

// TestBusyRetryAfter: a busy answer tells the client when to try again,
// both as a plain error and as a stream's error before its first event;
// other failures do not.
func TestBusyRetryAfter(t *testing.T) {
	busy := answer.Wrap(answer.Busy, &moa.NoResponseError{Failed: []*moa.AgentError{{Role: "writer", Err: moa.ErrBusy}}})
	rec := httptest.NewRecorder()
	writeErr(rec, busy)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("busy: %d, Retry-After %q; want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	rec = httptest.NewRecorder()
	newSSE(rec).fail(busy, nil)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("busy stream: %d, Retry-After %q; want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	rec = httptest.NewRecorder()
	writeErr(rec, answer.Errorf(answer.Internal, "bug"))
	if h := rec.Header().Get("Retry-After"); h != "" {
		t.Fatalf("internal error: Retry-After %q, want none", h)
	}
}
