package node

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/moa"
)

// chatRequest is the part of OpenAI's chat completion request the swarm
// honours. Unknown fields are rejected, except these common ones that are
// accepted and ignored.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Stream              bool            `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float32        `json:"temperature"`
	TopP                *float32        `json:"top_p"`
	Seed                *uint64         `json:"seed"`
	N                   *int            `json:"n"`
	StreamOptions       json.RawMessage `json:"stream_options"`
	User                string          `json:"user"`
	PresencePenalty     *float32        `json:"presence_penalty"`
	FrequencyPenalty    *float32        `json:"frequency_penalty"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    string          `json:"name,omitempty"`
}

// text reads a message's content: a string, or an array of text parts.
func (m chatMessage) text() (string, error) {
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", badRequest("messages[].content must be a string or an array of text parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", badRequest("content part type %q is not supported (text only)", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

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
	var req chatRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	spec, err := a.specFromChat(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	id, created := newID(), time.Now().Unix()
	model := req.Model
	if model == "" {
		model = modelAuto
	}
	if !req.Stream {
		out, err := a.n.answer(r.Context(), spec)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": out.finish,
				"message": map[string]any{"role": "assistant", "content": out.final}}},
			"usage": map[string]int{"prompt_tokens": out.promptToks, "completion_tokens": out.genToks,
				"total_tokens": out.promptToks + out.genToks},
			"swarm": out.result,
		})
		return
	}
	s := newSSE(w)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	s.event("", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	spec.onToken = func(t string) { s.event("", chunk(map[string]any{"content": t}, nil)) }
	spec.onAgent = func(ar moa.AgentResponse) { s.comment("agent " + ar.Role + " done") }
	out, err := a.n.answer(r.Context(), spec)
	if err != nil {
		status, typ := statusOf(err)
		s.event("", map[string]any{"error": map[string]any{"message": err.Error(), "type": typ, "code": status}})
		s.event("", "[DONE]")
		return
	}
	s.event("", chunk(map[string]any{}, out.finish))
	s.event("", "[DONE]")
}

// specFromChat turns a chat request into a query: the last user message
// is the question, the messages before it the history.
func (a *apiServer) specFromChat(req chatRequest) (querySpec, error) {
	var spec querySpec
	if len(req.Messages) == 0 {
		return spec, badRequest("messages must not be empty")
	}
	if req.N != nil && *req.N != 1 {
		return spec, badRequest("n must be 1")
	}
	msgs := make([]moa.Message, 0, len(req.Messages))
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant":
		default:
			return spec, badRequest("messages[%d].role %q: want system, user or assistant", i, m.Role)
		}
		text, err := m.text()
		if err != nil {
			return spec, err
		}
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		msgs = append(msgs, moa.Message{Role: role, Content: text})
	}
	last := msgs[len(msgs)-1]
	if last.Role != "user" || strings.TrimSpace(last.Content) == "" {
		return spec, badRequest("the last message must be a non-empty user message")
	}
	spec.prompt, spec.history = last.Content, msgs[:len(msgs)-1]
	spec.maxTokens = defaultMaxTokens
	for _, mt := range []*int{req.MaxTokens, req.MaxCompletionTokens} {
		if mt != nil {
			if *mt < 1 || *mt > 8192 {
				return spec, badRequest("max_tokens %d: want 1..8192", *mt)
			}
			spec.maxTokens = *mt
		}
	}
	if t := req.Temperature; t != nil {
		if *t < 0 || *t > 2 {
			return spec, badRequest("temperature %v: want 0..2", *t)
		}
		spec.sampling.Temperature = *t
	}
	if p := req.TopP; p != nil {
		if *p <= 0 || *p > 1 {
			return spec, badRequest("top_p %v: want (0,1]", *p)
		}
		spec.sampling.TopP = *p
	}
	if req.Seed != nil {
		spec.sampling.Seed = *req.Seed
	}
	mode, model, err := a.resolveModel(req.Model)
	if err != nil {
		return spec, err
	}
	spec.mode, spec.model = mode, model
	return spec, nil
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

// models serves GET /v1/models: the swarm modes, every role served by a
// live peer, every model name those roles run, and every model live peers
// hold layers of (answered by pipeline).
func (a *apiServer) models(w http.ResponseWriter, r *http.Request) {
	type entry struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	data := []entry{{modelAuto, "model", 0, "swarm"}, {modelMoA, "model", 0, "swarm"}, {modelSpeed, "model", 0, "swarm"}}
	seen := map[string]bool{}
	if s := a.n.Swarm(); s != nil {
		for _, role := range moa.Roles {
			for _, h := range s.View().ByRole(role) {
				if !seen[role] {
					seen[role] = true
					data = append(data, entry{role, "model", 0, "swarm-role"})
				}
				if name := h.Role.ModelName; name != "" && !seen[name] {
					seen[name] = true
					data = append(data, entry{name, "model", 0, h.Peer.ID.String()})
				}
			}
		}
	}
	if s := a.n.Swarm(); s != nil {
		for _, p := range s.View().Peers() {
			for _, sh := range p.Cap.Shards {
				name := sh.ModelName
				if name == "" {
					name = sh.ModelCID
				}
				if p.Alive && !seen[name] {
					seen[name] = true
					data = append(data, entry{name, "model", 0, "swarm-pipeline"})
				}
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}
