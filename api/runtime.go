package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/node"
)

// addRole serves POST /v1/swarm/roles.
func (a *server) addRole(w http.ResponseWriter, r *http.Request) {
	var req client.RoleRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if !req.Stream {
		out, err := a.b.AddRole(r.Context(), req.Role, req.Path)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	s := newSSE(w)
	out, err := a.b.AddRole(node.WithTaskWatch(r.Context(), func(t client.Task) { s.event("task", t) }), req.Role, req.Path)
	streamResult(s, out, err)
}

// streamResult ends a stream of task events with the request's result or
// its error.
func streamResult(s *sse, out any, err error) {
	if err != nil {
		s.fail(err, func(status int, typ string) []sseEvent {
			return []sseEvent{{"error", client.Error{Error: client.ErrorBody{Message: err.Error(), Type: typ, Status: status}}}}
		})
		return
	}
	s.event("result", out)
}

// removeRole serves DELETE /v1/swarm/roles/{role}.
func (a *server) removeRole(w http.ResponseWriter, r *http.Request) {
	role := r.PathValue("role")
	if err := a.b.RemoveRole(role); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": role})
}

func (a *server) addShard(w http.ResponseWriter, r *http.Request) {
	var req client.ShardRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if !req.Stream {
		out, err := a.b.AddShard(r.Context(), req.Shard)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	s := newSSE(w)
	out, err := a.b.AddShard(node.WithTaskWatch(r.Context(), func(t client.Task) { s.event("task", t) }), req.Shard)
	streamResult(s, out, err)
}

func (a *server) removeShard(w http.ResponseWriter, r *http.Request) {
	model, rng := r.PathValue("model"), r.PathValue("range")
	as, bs, ok := strings.Cut(rng, "-")
	start, err1 := strconv.Atoi(as)
	end, err2 := strconv.Atoi(bs)
	if !ok || err1 != nil || err2 != nil {
		writeErr(w, badRequest("layer range %q: want A-B", rng))
		return
	}
	if err := a.b.RemoveShard(model, start, end); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"removed": map[string]any{"model_cid": model, "start": start, "end": end}})
}
