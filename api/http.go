package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/wire"
)

// maxBody bounds API request bodies.
const maxBody = 1 << 20

// apiError carries the status and type an error of this package answers
// with; the node's errors carry their kind (answer.KindOf), which
// statusOf maps to a status.
type apiError struct {
	status int
	typ    string
	err    error
}

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

func badRequest(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, string(answer.BadRequest), fmt.Errorf(format, args...)}
}

// statusClientClosed is the status of a request its caller cancelled
// (nginx's 499: no standard status says it).
const statusClientClosed = 499

// statusOfKind is the HTTP status each kind of failure answers with.
var statusOfKind = map[answer.Kind]int{
	answer.BadRequest:     http.StatusBadRequest,
	answer.ContextFull:    http.StatusBadRequest,
	answer.NotFound:       http.StatusNotFound,
	answer.ModelNotFound:  http.StatusNotFound,
	answer.Unavailable:    http.StatusServiceUnavailable,
	answer.NoAgents:       http.StatusServiceUnavailable,
	answer.NoRoute:        http.StatusServiceUnavailable,
	answer.NoResponse:     http.StatusServiceUnavailable, // 504 when an agent ran out of time: see statusOf
	answer.Busy:           http.StatusTooManyRequests,
	answer.Timeout:        http.StatusGatewayTimeout,
	answer.Cancelled:      statusClientClosed,
	answer.PipelineFailed: http.StatusBadGateway,
	answer.NoPlan:         http.StatusConflict,
	answer.Unchecked:      http.StatusServiceUnavailable, // until a second holder of the layers joins
	answer.NoMemory:       http.StatusInsufficientStorage,
	answer.NoStorage:      http.StatusInsufficientStorage,
	answer.HubAuth:        http.StatusForbidden,
	answer.HubCorrupt:     http.StatusBadGateway,
	answer.HubFailed:      http.StatusBadGateway,
	answer.NotAModel:      http.StatusUnprocessableEntity,
	answer.Internal:       http.StatusInternalServerError,
}

// statusOf is the HTTP status and error type err answers with: the one
// place where a failure becomes a status.
func statusOf(err error) (int, string) {
	var ae *apiError
	var re *wire.RequestError
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.typ
	case errors.As(err, &re):
		return http.StatusBadRequest, string(answer.BadRequest)
	}
	kind := answer.KindOf(err)
	status, ok := statusOfKind[kind]
	switch {
	case !ok:
		status = http.StatusInternalServerError
	case kind == answer.NoResponse && errors.Is(err, context.DeadlineExceeded):
		// Every agent failed, and one of them for want of time: the
		// gateway's timeout.
		status = http.StatusGatewayTimeout
	}
	return status, string(kind)
}

// decodeBody reads a JSON body strictly into v: an application/json
// content type (browsers send cross-site form and text/plain posts without
// asking), at most maxBody bytes within bodyTimeout (bodyDeadline), no unknown fields,
// nothing after the object.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); !isJSONType(ct) {
		return &apiError{http.StatusUnsupportedMediaType, "invalid_request_error",
			fmt.Errorf("request body: Content-Type %q: want application/json (form and text/plain bodies are refused: browsers send them cross-site)", ct)}
	}
	// bodyDeadline has bounded the body's time since its headers.
	rc := http.NewResponseController(w)
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		// Answer and close, keeping the deadline: the server would
		// otherwise wait for the rest of the body to discard it.
		w.Header().Set("Connection", "close")
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Errorf("request body is larger than %d bytes", maxBody)}
		}
		return &apiError{http.StatusRequestTimeout, "invalid_request_error", fmt.Errorf("reading request body: %w", err)}
	}
	// A streamed answer may outlive the body deadline: clear it, or the
	// server's background read would end the request's context.
	rc.SetReadDeadline(time.Time{})
	return decodeJSON(b, v)
}

// decodeJSON decodes b strictly into v (wire.DecodeRequest): an unknown
// field is a *wire.RequestError naming it, which answers 400.
func decodeJSON(b []byte, v any) error {
	return wire.DecodeRequest(b, v)
}

func isJSONType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// busyRetryAfter is the Retry-After of a busy answer, in seconds: every
// agent asked had its queue full, and a place frees within a generation.
const busyRetryAfter = "2"

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	if typ == string(answer.Busy) {
		w.Header().Set("Retry-After", busyRetryAfter)
	}
	writeJSON(w, status, client.Error{Error: client.ErrorBody{Message: msg, Type: typ}})
}

func writeErr(w http.ResponseWriter, err error) {
	status, typ := statusOf(err)
	writeError(w, status, typ, err.Error())
}

// sse writes server-sent events; safe for concurrent use. Nothing is sent
// until the first event, so that an error before it still gets its real
// HTTP status instead of a 200 stream.
type sse struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	f       http.Flusher
	started bool
	closed  bool       // an error answer was written: nothing may follow
	held    []sseEvent // events that wait for the stream to start
}

func newSSE(w http.ResponseWriter) *sse {
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

// header sets a response header while the stream has not started (its
// headers are sent with its first event); it reports whether it could.
func (s *sse) header(k, v string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.closed {
		return false
	}
	s.w.Header().Set(k, v)
	return true
}

// startLocked sends the headers and the held events, once.
func (s *sse) startLocked() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	for _, ev := range s.held {
		s.writeLocked(ev.name, ev.data)
	}
	s.held = nil
}

func (s *sse) flush() {
	if s.f != nil {
		s.f.Flush()
	}
}

// event writes one event; an empty name writes a bare data line (OpenAI style).
func (s *sse) event(name string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eventLocked(name, v)
}

func (s *sse) eventLocked(name string, v any) {
	if s.closed {
		return
	}
	s.startLocked()
	s.writeLocked(name, v)
}

// hold sends an event that does not decide the outcome (progress, a
// failed agent): it waits until something starts the stream, and is
// dropped if an error comes first, which then gets its real status.
func (s *sse) hold(name string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.held = append(s.held, sseEvent{name, v})
		return
	}
	s.eventLocked(name, v)
}

func (s *sse) writeLocked(name string, v any) {
	var data []byte
	switch x := v.(type) {
	case string:
		data = []byte(x)
	default:
		data, _ = json.Marshal(v)
	}
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", data)
	s.flush()
}

// comment keeps a quiet stream alive without an event clients must handle.
// Before the stream has started it is dropped: it must not turn a later
// error into a 200.
func (s *sse) comment(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started || s.closed {
		return
	}
	fmt.Fprintf(s.w, ": %s\n\n", strings.ReplaceAll(text, "\n", " "))
	s.flush()
}

// streamKeepAlive is how often a streamed answer that is being worked on
// starts (if it has not) and gets a comment line; well under the read
// timeouts of common clients and proxies (60 s and more).
var streamKeepAlive = 5 * time.Second

// keepAlive starts the stream with begin and writes a comment every
// period, until the returned stop is called.
func (s *sse) keepAlive(every time.Duration, begin func()) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				begin()
				s.comment("working")
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// sseEvent is one event of a stream; an empty name is a bare data line.
type sseEvent struct {
	name string
	data any
}

// fail reports err: as a plain error answer with its real status while
// nothing was streamed, else as the events inStream returns for it.
func (s *sse) fail(err error, inStream func(status int, typ string) []sseEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	status, typ := statusOf(err)
	if !s.started {
		s.started, s.closed = true, true
		writeError(s.w, status, typ, err.Error())
		return
	}
	for _, ev := range inStream(status, typ) {
		s.eventLocked(ev.name, ev.data)
	}
}
