package moa

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/answer"
)

// TestNoResponseTimedOut: a query every agent failed is a timeout when one
// of them ran out of time, told by type and not by text; the agents'
// errors read as they always did.
func TestNoResponseTimedOut(t *testing.T) {
	late := &timeoutError{after: 2 * time.Second}
	silent := &timeoutError{after: 1500 * time.Millisecond, beforeFirstToken: true}
	if late.Error() != "timed out after 2s" || silent.Error() != "timed out after 1.5s before its first token" {
		t.Fatalf("timeout texts changed: %q, %q", late, silent)
	}
	cases := []struct {
		name   string
		failed []answer.Agent
		timed  bool
	}{
		{"busy and refused", []answer.Agent{{Role: Writer, Error: "busy", Err: ErrBusy}, {Role: Critic, Error: "hung: no pong"}}, false},
		{"one ran out of time", []answer.Agent{{Role: Writer, Error: "busy", Err: ErrBusy}, {Role: Critic, Error: late.Error(), Err: late}}, true},
		{"silent until its deadline", []answer.Agent{{Role: Writer, Error: silent.Error(), Err: silent}}, true},
		// Text is not what tells: an error that merely says so is not a timeout.
		{"says timed out", []answer.Agent{{Role: Writer, Error: "not asked: check timed out"}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := noResponse(c.failed)
			var nr *NoResponseError
			if !errors.As(err, &nr) || nr.TimedOut != c.timed || errors.Is(err, context.DeadlineExceeded) != c.timed {
				t.Fatalf("%v: timed out %v, want %v", err, nr != nil && nr.TimedOut, c.timed)
			}
		})
	}
}
