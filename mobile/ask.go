package mobile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/node"
)

// AskHandler receives what a request produces. Its methods are called from
// one goroutine per request, in order, one at a time; exactly one of
// OnDone and OnError ends every request, after every other call.
//
// Each returns an error so that an exception thrown in a Java or Swift
// implementation comes back to Go as that error instead of staying
// pending on a thread the Go runtime attached (Android's CheckJNI aborts
// the app on the next JNI call). An error from OnToken or OnEvent cancels
// the request, which then ends with OnError("handler_error", ...);
// one from OnDone or OnError is dropped: the request has ended.
type AskHandler interface {
	// OnToken is a piece of the final answer as it is written; the pieces,
	// concatenated, are the result's final_answer.
	OnToken(text string) error
	// OnEvent is any other streamed event, by name, with its JSON, as the
	// streamed POST /v1/swarm/query sends it: "agent" (an agent's answer),
	// "agent_token" ({"role", "peer", "text"}: an agent writing),
	// "reasoning" ({"text"}: the final answer's reasoning as it is
	// written, apart from it; see docs/http-api.md) and the pipeline's
	// traces ("route", "hop", ...).
	OnEvent(name, json string) error
	// OnDone is the result, as POST /v1/swarm/query answers: for MoA and
	// role modes {"final_answer", "agent_responses", ...}.
	OnDone(resultJSON string) error
	// OnError ends a request that failed, with the kind of failure (the
	// error type the local API would answer it with): "cancelled" (Cancel
	// or Stop), "no_agents", "busy", "no_response", "timeout",
	// "invalid_request_error", ... (answer.Kind), or "handler_error" (the
	// handler failed).
	OnError(kind, message string) error
}

// Request is a running Ask, made by Ask (a Request made otherwise, as
// gobind's public constructor can, is one that has ended).
type Request struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once OnDone or OnError returned
}

// Cancel stops the request: generation stops, and the handler gets
// OnError("cancelled", ...) unless the request had already ended.
// It may be called any number of times, from any thread.
func (r *Request) Cancel() {
	if r.cancel != nil {
		r.cancel()
	}
}

// WaitDone blocks until the handler's OnDone or OnError has returned.
// Never call it from the request's own handler. (Not "Wait": Java's
// Object.wait is final.)
func (r *Request) WaitDone() {
	if r.done != nil {
		<-r.done
	}
}

// Ask runs a query, as POST /v1/swarm/query does: requestJSON has its
// shape ({"query", "mode": auto|moa|speed|pipeline|<role>, "model",
// "max_tokens", "temperature", "seed", ...}; "stream" is ignored: h always
// sees tokens as they come). A request that is not valid JSON, has an
// unknown field or a value out of range is refused here, with an error
// that names the problem, and h is never called. Otherwise the query runs
// in the background and h sees its tokens, events and end.
func (m *Node) Ask(requestJSON string, h AskHandler) (*Request, error) {
	if h == nil {
		return nil, errors.New("mobile: ask: no handler")
	}
	req, err := node.ParseQuery([]byte(requestJSON))
	if err != nil {
		return nil, fmt.Errorf("mobile: ask: %w", err)
	}
	m.mu.Lock()
	if m.stopped || m.n == nil {
		m.mu.Unlock()
		return nil, errStopped
	}
	m.reqs.Add(1)
	n := m.n
	m.mu.Unlock()
	ctx, cancel := context.WithCancel(m.ctx)
	r := &Request{cancel: cancel, done: make(chan struct{})}
	q := &queue{h: h, cancel: cancel, done: r.done, wake: make(chan struct{}, 1)}
	go q.deliver()
	go func() {
		defer m.reqs.Done()
		defer cancel()
		res, err := n.Query(ctx, req, q.event)
		if err != nil {
			kind := answer.KindOf(err)
			if ctx.Err() != nil {
				// Cancel or Stop: the caller's doing, whatever the
				// strategy made of the agents it lost to it (moa
				// reports them as not answering).
				kind = answer.Cancelled
			}
			q.end(item{name: string(kind), text: err.Error(), failed: true})
			return
		}
		b, err := json.Marshal(res.Result)
		if err != nil {
			q.end(item{name: string(answer.Internal), text: "mobile: encoding the result: " + err.Error(), failed: true})
			return
		}
		q.end(item{name: "done", text: string(b)})
	}()
	return r, nil
}

// item is one call to make on a handler.
type item struct {
	name   string // event name; "token"; at the end "done" or the error kind
	text   string // the token, the event's JSON, the result or the message
	failed bool   // at the end: the request failed (name is the kind)
	end    bool
}

// queue hands a request's events to its handler from one goroutine, in
// order, so the node's goroutines never wait on the app. It holds what the
// handler has not taken yet: a request's own output, bounded by its
// max_tokens.
type queue struct {
	h      AskHandler
	cancel context.CancelFunc // the request's
	done   chan struct{}
	wake   chan struct{} // capacity 1: there is something to take
	failed error         // the handler's, from OnToken or OnEvent

	mu    sync.Mutex
	items []item
	ended bool
}

// event is node.Query's callback: it encodes and queues, and never blocks
// on the handler.
func (q *queue) event(name string, v any) {
	it := item{name: name}
	if s, ok := v.(string); ok && name == "reasoning" {
		v = map[string]string{"text": s} // as the HTTP stream sends it
	}
	if s, ok := v.(string); ok && name == "token" {
		it.text = s
	} else if b, err := json.Marshal(v); err == nil {
		it.text = string(b)
	} else {
		b, _ := json.Marshal(map[string]string{"error": "mobile: encoding event: " + err.Error()})
		it.text = string(b)
	}
	q.push(it)
}

// end queues the request's last call; events after it are dropped.
func (q *queue) end(it item) {
	it.end = true
	q.push(it)
}

func (q *queue) push(it item) {
	q.mu.Lock()
	if q.ended {
		q.mu.Unlock()
		return
	}
	q.ended = it.end
	q.items = append(q.items, it)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// deliver calls the handler until the request's end.
func (q *queue) deliver() {
	defer close(q.done)
	for range q.wake {
		q.mu.Lock()
		items := q.items
		q.items = nil
		q.mu.Unlock()
		for _, it := range items {
			if it.end {
				q.finish(it)
				return
			}
			if q.failed != nil {
				continue
			}
			var err error
			if it.name == "token" {
				err = q.h.OnToken(it.text)
			} else {
				err = q.h.OnEvent(it.name, it.text)
			}
			if err != nil {
				q.failed = err
				q.cancel()
			}
		}
	}
}

// finish makes the request's last call; its error has nowhere to go.
func (q *queue) finish(it item) {
	switch {
	case q.failed != nil:
		_ = q.h.OnError("handler_error", "mobile: the handler failed: "+q.failed.Error())
	case !it.failed:
		_ = q.h.OnDone(it.text)
	default:
		_ = q.h.OnError(it.name, it.text)
	}
}
