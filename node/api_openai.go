package node

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmswarm/llmswarm/moa"
)

// Model names the OpenAI API accepts besides roles and model names.
const (
	modelAuto  = "swarm"
	modelMoA   = "swarm-moa"
	modelSpeed = "swarm-speed"
)

func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return "chatcmpl-" + hex.EncodeToString(b[:])
}

// chatCompletions serves POST /v1/chat/completions.
func (a *apiServer) chatCompletions(w http.ResponseWriter, r *http.Request) {
	req, err := decodeChat(w, r)
	if err != nil {
		writeErr(w, err)
		return
	}
	spec, opt, err := a.specFromChat(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	a.noteIgnored(w, opt.ignored)
	if opt.sampled {
		w.Header().Set("X-Swarm-Seed", strconv.FormatUint(spec.sampling.Seed, 10))
	}
	id, created := newID(), time.Now().Unix()
	model := req.Model
	if model == "" {
		model = modelAuto
	}
	usage := func(out *outcome) map[string]int {
		return map[string]int{"prompt_tokens": out.promptToks, "completion_tokens": out.genToks,
			"total_tokens": out.promptToks + out.genToks}
	}
	if !req.Stream {
		out, err := a.n.ask(r.Context(), spec, opt.stops)
		if err == nil && opt.jsonObject {
			err = checkJSONObject(out.final)
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": out.finish, "logprobs": nil,
				"message": map[string]any{"role": "assistant", "content": out.final}}},
			"usage": usage(out),
			"swarm": out.result,
		})
		return
	}
	s := newSSE(w)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	var role sync.Once
	content := func(t string) {
		role.Do(func() { s.event("", chunk(map[string]any{"role": "assistant", "content": ""}, nil)) })
		if t != "" {
			s.event("", chunk(map[string]any{"content": t}, nil))
		}
	}
	if !opt.jsonObject { // a JSON answer is sent once checked whole
		spec.onToken = content
	}
	spec.onAgent = func(ar moa.AgentResponse) { s.comment("agent " + ar.Role + " done") }
	out, err := a.n.ask(r.Context(), spec, opt.stops)
	if err == nil && opt.jsonObject {
		if err = checkJSONObject(out.final); err == nil {
			content(out.final)
		}
	}
	if err != nil {
		s.fail(err, func(status int, typ string) []sseEvent {
			return []sseEvent{{"", map[string]any{"error": map[string]any{"message": err.Error(), "type": typ, "status": status}}},
				{"", "[DONE]"}}
		})
		return
	}
	content("")
	s.event("", chunk(map[string]any{}, out.finish))
	if opt.includeUsage {
		s.event("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{}, "usage": usage(out)})
	}
	s.event("", "[DONE]")
}

// noteIgnored tells the caller, in a header, which fields it sent that the
// swarm accepts and ignores, and logs each such field once.
func (a *apiServer) noteIgnored(w http.ResponseWriter, fields []string) {
	if len(fields) == 0 {
		return
	}
	w.Header().Set("X-Swarm-Ignored-Fields", strings.Join(fields, ", "))
	for _, f := range fields {
		if _, seen := a.warned.LoadOrStore(f, true); !seen {
			a.log.Warn("chat completions: request field accepted and ignored (logged once)", "field", f)
		}
	}
}

// resolveModel maps the model field to a mode: swarm, swarm-moa,
// swarm-speed, a role name, or the name or CID of a model some live peer
// serves as a role.
func (a *apiServer) resolveModel(name string) (mode, model string, err error) {
	switch name {
	case "", modelAuto:
		return "auto", "", nil
	case modelMoA:
		return string(moa.ModeMoA), "", nil
	case modelSpeed:
		return string(moa.ModeSpeed), "", nil
	}
	if moa.IsRole(name) {
		return name, "", nil
	}
	if s := a.n.Swarm(); s != nil {
		for _, p := range s.View().Peers() {
			if !p.Alive {
				continue
			}
			for _, r := range p.Cap.Roles {
				if r.ModelName == name || r.ModelCID == name {
					return r.Role, name, nil // that role, on peers running that model
				}
			}
		}
		for _, p := range s.View().Peers() {
			if !p.Alive {
				continue
			}
			for _, sh := range p.Cap.Shards {
				if sh.ModelName == name || sh.ModelCID == name {
					return "pipeline", name, nil
				}
			}
		}
	}
	return "", "", &errHTTP{http.StatusNotFound, "model_not_found",
		errFmt("model %q not found: use swarm, swarm-moa, swarm-speed, a role name, or a model listed by GET /v1/models (role models and pipeline models)", name)}
}

// modelEntry is one model of GET /v1/models.
type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// modelList is the swarm modes, every role served by a live peer, every
// model name those roles run, and every model live peers hold layers of
// (answered by pipeline).
func (a *apiServer) modelList() []modelEntry {
	data := []modelEntry{{modelAuto, "model", 0, "swarm"}, {modelMoA, "model", 0, "swarm"}, {modelSpeed, "model", 0, "swarm"}}
	s := a.n.Swarm()
	if s == nil {
		return data
	}
	seen := map[string]bool{}
	for _, role := range moa.Roles {
		for _, h := range s.View().ByRole(role) {
			if !seen[role] {
				seen[role] = true
				data = append(data, modelEntry{role, "model", 0, "swarm-role"})
			}
			if name := h.Role.ModelName; name != "" && !seen[name] {
				seen[name] = true
				data = append(data, modelEntry{name, "model", 0, h.Peer.ID.String()})
			}
		}
	}
	for _, p := range s.View().Peers() {
		for _, sh := range p.Cap.Shards {
			name := sh.ModelName
			if name == "" {
				name = sh.ModelCID
			}
			if p.Alive && !seen[name] {
				seen[name] = true
				data = append(data, modelEntry{name, "model", 0, "swarm-pipeline"})
			}
		}
	}
	return data
}

// models serves GET /v1/models.
func (a *apiServer) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": a.modelList()})
}

// model serves GET /v1/models/{id}.
func (a *apiServer) model(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	for _, m := range a.modelList() {
		if m.ID == id {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
	writeError(w, http.StatusNotFound, "model_not_found", fmt.Sprintf("model %q not found: GET /v1/models lists the models live peers serve", id))
}
