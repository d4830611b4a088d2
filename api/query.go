package api

import (
	"net/http"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
)

// query serves POST /v1/swarm/query.
func (a *server) query(w http.ResponseWriter, r *http.Request) {
	var req client.QueryRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if givenSeed(&req) {
		w.Header().Set("X-Swarm-Seed", req.Seed.String())
	}
	if !req.Stream {
		out, err := a.b.Query(r.Context(), req, nil)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out.Result)
		return
	}
	s := newSSE(w)
	out, err := a.b.Query(r.Context(), req, func(event string, v any) {
		switch event {
		case "agent":
			// An answering agent means an answer (the best agent's, at
			// worst): it starts the stream. Failures and traces wait for
			// it or for a token.
			if ar, ok := v.(answer.Agent); ok && ar.Error != "" {
				s.hold("agent", v)
			} else {
				s.event("agent", v)
			}
		case "token":
			s.event("token", map[string]any{"text": v})
		case "reasoning":
			s.event("reasoning", map[string]any{"text": v})
		case "agent_token":
			s.event("agent_token", v)
		default:
			s.hold(event, v)
		}
	})
	if err != nil {
		s.fail(err, func(status int, typ string) []sseEvent {
			return []sseEvent{{"error", client.Error{Error: client.ErrorBody{Message: err.Error(), Type: typ, Status: status}}}}
		})
		return
	}
	s.event("result", out.Result)
}
