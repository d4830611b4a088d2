package node

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node/client"
)

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
	if spec.sampling.Temperature > 0 {
		w.Header().Set("X-Swarm-Seed", strconv.FormatUint(spec.sampling.Seed, 10))
	}
	if !req.Stream {
		out, err := a.n.ask(r.Context(), spec, nil)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out.result)
		return
	}
	s := newSSE(w)
	// An answering agent means an answer (the best agent's, at worst): it
	// starts the stream. Failures and traces wait for it or for a token.
	spec.onAgent = func(ar moa.AgentResponse) {
		if ar.Error == "" {
			s.event("agent", ar)
		} else {
			s.hold("agent", ar)
		}
	}
	spec.onToken = func(t string) { s.event("token", map[string]string{"text": t}) }
	spec.onAgentToken = func(role, peer, text string) {
		s.event("agent_token", client.AgentToken{Role: role, Peer: peer, Text: text})
	}
	spec.onTrace = func(ev string, v any) { s.hold(ev, v) }
	out, err := a.n.ask(r.Context(), spec, nil)
	if err != nil {
		s.fail(err, func(status int, typ string) []sseEvent {
			return []sseEvent{{"error", client.Error{Error: client.ErrorBody{Message: err.Error(), Type: typ, Status: status}}}}
		})
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
	spec := querySpec{prompt: req.Query, mode: req.Mode, model: req.Model, dtype: req.DType, standby: req.Standby, maxTokens: req.MaxTokens,
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
	return spec, nil
}

// defaultMaxTokens caps answers when the caller gives no limit.
const defaultMaxTokens = 256
