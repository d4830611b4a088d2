package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node/client"
)

// maxBody bounds API request bodies.
const maxBody = 1 << 20

// decodeBody reads a JSON body strictly into v.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return badRequest("request body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("request body is not valid JSON for this endpoint: %v", err)
	}
	if dec.More() {
		return badRequest("request body has data after the JSON object")
	}
	return nil
}

func writeErr(w http.ResponseWriter, err error) {
	status, typ := statusOf(err)
	writeError(w, status, typ, err.Error())
}

// sse writes server-sent events; safe for concurrent use.
type sse struct {
	mu sync.Mutex
	w  http.ResponseWriter
	f  http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	s := &sse{w: w, f: f}
	s.flush()
	return s
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
func (s *sse) comment(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, ": %s\n\n", strings.ReplaceAll(text, "\n", " "))
	s.flush()
}

// query serves POST /v1/swarm/query.
func (a *apiServer) query(w http.ResponseWriter, r *http.Request) {
	var req client.QueryRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	spec, err := specFromQuery(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	if !req.Stream {
		out, err := a.n.answer(r.Context(), spec)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out.result)
		return
	}
	s := newSSE(w)
	spec.onAgent = func(ar moa.AgentResponse) { s.event("agent", ar) }
	spec.onToken = func(t string) { s.event("token", map[string]string{"text": t}) }
	spec.onTrace = func(ev string, v any) { s.event(ev, v) }
	out, err := a.n.answer(r.Context(), spec)
	if err != nil {
		_, typ := statusOf(err)
		s.event("error", client.Error{Error: client.ErrorBody{Message: err.Error(), Type: typ}})
		return
	}
	s.event("result", out.result)
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
	spec := querySpec{prompt: req.Query, mode: req.Mode, model: req.Model, dtype: req.DType, maxTokens: req.MaxTokens,
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
	if req.Seed != nil {
		spec.sampling.Seed = *req.Seed
	}
	if rp := req.RepeatPenalty; rp != nil {
		if *rp < 0 || *rp > 10 {
			return querySpec{}, badRequest("repeat_penalty %v: want 0..10", *rp)
		}
		spec.sampling.RepeatPenalty = *rp
	}
	return spec, nil
}

// defaultMaxTokens caps answers when the caller gives no limit.
const defaultMaxTokens = 256
