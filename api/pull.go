package api

import (
	"net/http"

	"github.com/llmswarm/llmswarm/client"
)

// pull serves POST /v1/models/pull: streamed, "task" events (the pull's
// progress) then "result" (client.Pulled) or "error".
func (a *server) pull(w http.ResponseWriter, r *http.Request) {
	var req client.PullRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if req.Model == "" {
		writeErr(w, badRequest("model is empty: want hf.co/OWNER/REPO:QUANT, hf.co/OWNER/REPO/FILE.gguf or a short name such as qwen3:0.6b"))
		return
	}
	if !req.Stream {
		out, err := a.b.Pull(r.Context(), req.Model, req.Token, nil)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	s := newSSE(w)
	out, err := a.b.Pull(r.Context(), req.Model, req.Token, func(t client.Task) { s.event("task", t) })
	if err != nil {
		s.fail(err, func(status int, typ string) []sseEvent {
			return []sseEvent{{"error", client.Error{Error: client.ErrorBody{Message: err.Error(), Type: typ, Status: status}}}}
		})
		return
	}
	s.event("result", out)
}
