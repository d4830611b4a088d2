package moa

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	// ErrBusy: the peer is at its concurrency limit.
	ErrBusy = errors.New("moa: peer busy")
	// ErrBadRequest: a request breaks the protocol's limits.
	ErrBadRequest = errors.New("moa: bad request")
	// ErrNoRole: the peer does not serve the role asked.
	ErrNoRole = errors.New("moa: role not served here")
	// ErrProtocol: a frame does not decode.
	ErrProtocol = errors.New("moa: protocol error")
	// ErrTooLong: a prompt does not fit the model's context.
	ErrTooLong = errors.New("moa: prompt longer than the model's context")
	// ErrNoAgents: no live peer serves any role the query needs.
	ErrNoAgents = errors.New("moa: no live peer serves the roles this query needs")
)

// AgentError is one agent's failure.
type AgentError struct {
	Role string
	Peer string
	Err  error
}

func (e *AgentError) Error() string {
	return fmt.Sprintf("%s on %s: %v", e.Role, shortPeer(e.Peer), e.Err)
}

func (e *AgentError) Unwrap() error { return e.Err }

// TooLongError is a prompt that does not fit a peer's context. It matches
// ErrTooLong.
type TooLongError struct {
	Prompt  int // tokens
	Context int
}

func (e *TooLongError) Error() string {
	return fmt.Sprintf("%v: prompt of %d tokens, context %d", ErrTooLong, e.Prompt, e.Context)
}

func (e *TooLongError) Unwrap() error { return ErrTooLong }

// NoResponseError: every agent asked failed or timed out.
type NoResponseError struct {
	Failed []*AgentError
	// TimedOut: some agent ran out of time (its deadline passed before
	// its answer ended, or before its first token). The error then
	// matches context.DeadlineExceeded.
	TimedOut bool
}

// Is makes a NoResponseError whose agents ran out of time match
// context.DeadlineExceeded.
func (e *NoResponseError) Is(target error) bool {
	return e.TimedOut && target == context.DeadlineExceeded
}

func (e *NoResponseError) Error() string {
	var parts []string
	for _, f := range e.Failed {
		parts = append(parts, f.Error())
	}
	return "moa: no agent answered: " + strings.Join(parts, "; ")
}

// All reports whether every agent failed with target (errors.Is).
func (e *NoResponseError) All(target error) bool {
	for _, f := range e.Failed {
		if !errors.Is(f.Err, target) {
			return false
		}
	}
	return len(e.Failed) > 0
}

// timeoutError is an agent that ran out of time: its deadline passed
// before its answer ended (or, beforeFirstToken, before it began).
type timeoutError struct {
	after            time.Duration
	beforeFirstToken bool
}

func (e *timeoutError) Error() string {
	if e.beforeFirstToken {
		return fmt.Sprintf("timed out after %s before its first token", e.after)
	}
	return fmt.Sprintf("timed out after %s", e.after)
}

func shortPeer(id string) string {
	if len(id) > 12 {
		return "…" + id[len(id)-10:]
	}
	return id
}
