package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
)

// maxBody bounds API request bodies.
const maxBody = 1 << 20

// Timeouts of the API server. Without them a client that sends half a
// request holds a connection (and a goroutine) forever. They are variables
// so that a test can shorten them.
var (
	apiHeaderTimeout = 10 * time.Second  // request line and headers
	apiBodyTimeout   = 30 * time.Second  // a request body, once the headers are in
	apiIdleTimeout   = 120 * time.Second // a kept-alive connection between requests
)

// unknownFieldError names a request field no endpoint accepts.
type unknownFieldError struct{ field string }

func (e *unknownFieldError) Error() string { return fmt.Sprintf("unknown field %q", e.field) }

// decodeBody reads a JSON body strictly into v: an application/json
// content type (browsers send cross-site form and text/plain posts without
// asking), at most maxBody bytes within apiBodyTimeout, no unknown fields,
// nothing after the object.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); !isJSONType(ct) {
		return &errHTTP{http.StatusUnsupportedMediaType, "invalid_request_error",
			fmt.Errorf("request body: Content-Type %q: want application/json (form and text/plain bodies are refused: browsers send them cross-site)", ct)}
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(apiBodyTimeout))
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		// Answer and close, keeping the deadline: the server would
		// otherwise wait for the rest of the body to discard it.
		w.Header().Set("Connection", "close")
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &errHTTP{http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Errorf("request body is larger than %d bytes", maxBody)}
		}
		return &errHTTP{http.StatusRequestTimeout, "invalid_request_error", fmt.Errorf("reading request body: %w", err)}
	}
	// A streamed answer may outlive the body deadline: clear it, or the
	// server's background read would end the request's context.
	rc.SetReadDeadline(time.Time{})
	return decodeJSON(b, v)
}

// decodeJSON decodes b strictly into v, with errors that say what is wrong
// in the caller's terms: an unknown field is named as such, never reported
// as invalid JSON.
func decodeJSON(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return badRequest("request body is empty: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		var eh *errHTTP
		switch {
		case errors.As(err, &eh):
			return err // a field's own decoder said what is wrong
		case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF):
			return badRequest("request body is not valid JSON: %v", err)
		case errors.As(err, &typ):
			if typ.Field == "" {
				return badRequest("request body: want a JSON object, not %s", typ.Value)
			}
			return badRequest("field %s: %s is not %s", typ.Field, typ.Value, jsonKind(typ.Type.Kind().String()))
		}
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return &errHTTP{http.StatusBadRequest, "invalid_request_error", &unknownFieldError{strings.Trim(name, `"`)}}
		}
		return badRequest("request body: %v", err)
	}
	if dec.More() {
		return badRequest("request body has data after the JSON object")
	}
	return nil
}

// jsonKind names a Go kind as the JSON type a caller should send.
func jsonKind(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"), strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "true or false"
	case kind == "slice", kind == "array":
		return "an array"
	}
	return "an object"
}

func isJSONType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
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
