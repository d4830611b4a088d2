package api

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/wire"
	"github.com/llmswarm/llmswarm/node"
)

// completionRequest is OpenAI's (legacy) text completion request: a raw
// prompt that a model continues, with no chat template. Every other field
// is refused by name, as for chat.
type completionRequest struct {
	Model            string          `json:"model"`
	Prompt           json.RawMessage `json:"prompt"`
	Stream           bool            `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options"`
	MaxTokens        *int            `json:"max_tokens"`
	Temperature      *float32        `json:"temperature"`
	TopP             *float32        `json:"top_p"`
	Seed             *client.Seed    `json:"seed"`
	N                *int            `json:"n"`
	Stop             stopList        `json:"stop"`
	Echo             *bool           `json:"echo"`
	Logprobs         *int            `json:"logprobs"`
	BestOf           *int            `json:"best_of"`
	Suffix           *string         `json:"suffix"`
	PresencePenalty  *float32        `json:"presence_penalty"`
	FrequencyPenalty *float32        `json:"frequency_penalty"`
	User             *string         `json:"user"`
}

// specFromCompletion turns a completion request into a complete-mode
// query: the model named picks a role's model (the writer's for the swarm
// names) or a pipeline model.
func (a *server) specFromCompletion(req completionRequest) (client.QueryRequest, chatOptions, error) {
	var spec client.QueryRequest
	var opt chatOptions
	var prompt string
	if err := json.Unmarshal(req.Prompt, &prompt); err != nil {
		return spec, opt, badRequest("prompt: want a string (arrays of strings or of token ids are not supported)")
	}
	if strings.TrimSpace(prompt) == "" {
		return spec, opt, badRequest("prompt must not be empty")
	}
	switch {
	case req.Echo != nil && *req.Echo:
		return spec, opt, badRequest("echo=true is not supported: the answer is the continuation alone (echo must be false)")
	case req.N != nil && *req.N != 1:
		return spec, opt, badRequest("n=%d is not supported: one choice per request (n must be 1)", *req.N)
	case req.BestOf != nil && *req.BestOf != 1:
		return spec, opt, badRequest("best_of=%d is not supported (best_of must be 1)", *req.BestOf)
	case req.Logprobs != nil && *req.Logprobs != 0:
		return spec, opt, badRequest("logprobs is not supported: the swarm returns text, not token probabilities")
	case req.Suffix != nil && *req.Suffix != "":
		return spec, opt, badRequest("suffix is not supported: the swarm continues the prompt, it does not fill in between")
	}
	spec.Query, spec.Mode = prompt, answer.ModeComplete
	if mt := req.MaxTokens; mt != nil {
		if *mt < 1 || *mt > 8192 {
			return spec, opt, badRequest("max_tokens %d: want 1..8192", *mt)
		}
		spec.MaxTokens = *mt
	}
	opt.sampled = sampling(&spec, req.Temperature, req.TopP, req.Stop, req.Seed)
	mode, model, err := a.b.ResolveModel(req.Model)
	if err != nil {
		return spec, opt, err
	}
	switch mode {
	case "auto", "moa", "speed":
		// The swarm's names: the writer's model, or a pipeline model
		// where no peer serves a role.
	case "pipeline":
		spec.Model = model
	default: // a role, maybe on peers running a model of that name
		spec.Role, spec.Model = mode, model
	}
	opt.includeUsage = req.Stream && req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	if req.User != nil {
		opt.ignored = append(opt.ignored, "user")
	}
	opt.ignored = append(opt.ignored, ignoredPenalties(req.PresencePenalty, req.FrequencyPenalty)...)
	return spec, opt, nil
}

// completions serves POST /v1/completions.
func (a *server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	err := decodeBody(w, r, &req)
	var uf *wire.RequestError
	if errors.As(err, &uf) && uf.Field != "" {
		if why, ok := notSupported[uf.Field]; ok {
			err = badRequest("field %q is not supported: %s", uf.Field, why)
		}
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	spec, opt, err := a.specFromCompletion(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	a.noteIgnored(w, opt.ignored)
	if opt.sampled {
		w.Header().Set("X-Swarm-Seed", spec.Seed.String())
	}
	var b [12]byte
	rand.Read(b[:])
	id, created := "cmpl-"+hex.EncodeToString(b[:]), time.Now().Unix()
	model := req.Model
	if model == "" {
		model = node.ModelAuto
	}
	usage := func(out *node.Answer) map[string]int {
		return map[string]int{"prompt_tokens": out.PromptTokens, "completion_tokens": out.CompletionTokens,
			"total_tokens": out.PromptTokens + out.CompletionTokens}
	}
	choice := func(text string, finish any) map[string]any {
		return map[string]any{"id": id, "object": "text_completion", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish}}}
	}
	if !req.Stream {
		out, err := a.b.Query(r.Context(), spec, nil)
		if err != nil {
			writeErr(w, err)
			return
		}
		if u := unchecked(out.Result); u != "" {
			w.Header().Set(uncheckedHeader, u)
		}
		if l := checkLost(out.Result); l != nil {
			w.Header().Set(checkLostHeader, fmt.Sprintf("%d; %s", l.Steps, l.Reason))
		}
		body := choice(out.Text, out.Finish)
		body["usage"], body["swarm"] = usage(out), out.Result
		writeJSON(w, http.StatusOK, body)
		return
	}
	s := newSSE(w)
	out, err := a.b.Query(r.Context(), spec, func(event string, v any) {
		switch event {
		case "token":
			if t, ok := v.(string); ok && t != "" {
				s.event("", choice(t, nil))
			}
		case "trace":
			if ev, ok := v.(answer.Trace); ok && ev.Kind == "unchecked" {
				s.header(uncheckedHeader, uncheckedText(ev.Route))
			}
		}
	})
	if err != nil {
		s.fail(err, func(status int, typ string) []sseEvent {
			return []sseEvent{{"", map[string]any{"error": map[string]any{"message": err.Error(), "type": typ, "status": status}}},
				{"", "[DONE]"}}
		})
		return
	}
	last := choice("", out.Finish)
	if l := checkLost(out.Result); l != nil {
		last["swarm_check_lost"] = l
	}
	s.event("", last)
	if opt.includeUsage {
		s.event("", map[string]any{"id": id, "object": "text_completion", "created": created, "model": model,
			"choices": []any{}, "usage": usage(out)})
	}
	s.event("", "[DONE]")
}
