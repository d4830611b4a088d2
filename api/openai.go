package api

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/node"
)

func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return "chatcmpl-" + hex.EncodeToString(b[:])
}

// chatCompletions serves POST /v1/chat/completions.
func (a *server) chatCompletions(w http.ResponseWriter, r *http.Request) {
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
		w.Header().Set("X-Swarm-Seed", spec.Seed.String())
	}
	id, created := newID(), time.Now().Unix()
	model := req.Model
	if model == "" {
		model = node.ModelAuto
	}
	usage := func(out *node.Answer) map[string]int {
		return map[string]int{"prompt_tokens": out.PromptTokens, "completion_tokens": out.CompletionTokens,
			"total_tokens": out.PromptTokens + out.CompletionTokens}
	}
	if !req.Stream {
		out, err := a.b.Query(r.Context(), spec, nil)
		if err == nil && opt.jsonObject {
			err = checkJSONObject(out.Text)
		}
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
		msg := map[string]any{"role": "assistant", "content": out.Text}
		if out.Reasoning != "" {
			// As llama.cpp's server, vLLM and LM Studio give it: the
			// model's reasoning apart from its answer.
			msg["reasoning_content"] = out.Reasoning
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": out.Finish, "logprobs": nil,
				"message": msg}},
			"usage": usage(out),
			"swarm": out.Result,
		})
		return
	}
	s := newSSE(w)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	var role sync.Once
	begin := func() {
		role.Do(func() { s.event("", chunk(map[string]any{"role": "assistant", "content": ""}, nil)) })
	}
	content := func(t string) {
		begin()
		if t != "" {
			s.event("", chunk(map[string]any{"content": t}, nil))
		}
	}
	streamed := false // reasoning went out as it was written
	reasoning := func(t string) {
		begin()
		if t != "" {
			streamed = true
			s.event("", chunk(map[string]any{"reasoning_content": t}, nil))
		}
	}
	// Agents at work start the stream (headers and the role delta) and a
	// comment keeps it alive until the final answer: a client's read
	// timeout must not end a long MoA answer before its first token. An
	// error before any work (no agent, a full context) keeps its status,
	// and so does a JSON answer found wrong before the stream had to start.
	work := begin
	if opt.jsonObject {
		work = func() {}
	}
	stop := s.keepAlive(streamKeepAlive, begin)
	out, err := a.b.Query(r.Context(), spec, func(event string, v any) {
		switch event {
		case "token":
			if t, ok := v.(string); ok && !opt.jsonObject { // a JSON answer is sent once checked whole
				content(t)
			}
		case "reasoning":
			if t, ok := v.(string); ok {
				reasoning(t)
			}
		case "agent_token":
			work()
		case "agent":
			if ar, ok := v.(answer.Agent); ok {
				if ar.Error == "" {
					work()
				}
				s.comment("agent " + ar.Role + " done")
			}
		case "trace":
			// Known at the route, before the first token: a header while
			// the stream's headers are not sent yet.
			if ev, ok := v.(answer.Trace); ok && ev.Kind == "unchecked" {
				s.header(uncheckedHeader, uncheckedText(ev.Route))
			}
		}
	})
	stop()
	if err == nil && opt.jsonObject {
		if err = checkJSONObject(out.Text); err == nil {
			content(out.Text)
		}
	}
	if err != nil {
		s.fail(err, func(status int, typ string) []sseEvent {
			return []sseEvent{{"", map[string]any{"error": map[string]any{"message": err.Error(), "type": typ, "status": status}}},
				{"", "[DONE]"}}
		})
		return
	}
	if !streamed {
		// Reasoning the stream did not carry as it was written comes
		// whole, with the answer's end.
		reasoning(out.Reasoning)
	}
	content("")
	last := chunk(map[string]any{}, out.Finish)
	if out.Result != nil && out.Result.Pipeline != nil && len(out.Result.Pipeline.Unchecked) > 0 {
		last["swarm_unchecked"] = out.Result.Pipeline.Unchecked
	}
	if l := checkLost(out.Result); l != nil {
		last["swarm_check_lost"] = l
	}
	s.event("", last)
	if opt.includeUsage {
		s.event("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{}, "usage": usage(out)})
	}
	s.event("", "[DONE]")
}

// noteIgnored tells the caller, in a header, which fields it sent that the
// swarm accepts and ignores, and logs each such field once.
func (a *server) noteIgnored(w http.ResponseWriter, fields []string) {
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

// models serves GET /v1/models.
func (a *server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": a.b.Models()})
}

// model serves GET /v1/models/{id}.
func (a *server) model(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	for _, m := range a.b.Models() {
		if m.ID == id {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
	writeError(w, http.StatusNotFound, "model_not_found", fmt.Sprintf("model %q not found: GET /v1/models lists the models live peers serve", id))
}

// checkLostHeader says how many steps of a pipeline answer drawn for a
// spot check no second route compared, and why (answer.Pipeline.CheckLost):
// "STEPS; REASON".
const checkLostHeader = "X-Swarm-Check-Lost"

// checkLost is res's lost checks: nil when none were, or it is no
// pipeline answer.
func checkLost(res *answer.Result) *answer.CheckLost {
	if res == nil || res.Pipeline == nil {
		return nil
	}
	return res.Pipeline.CheckLost
}

// uncheckedHeader names the layers of a pipeline answer nobody could check
// (answer.Pipeline.Unchecked): "start-end@peer", comma separated.
const uncheckedHeader = "X-Swarm-Unchecked"

// unchecked is res's unchecked layers as uncheckedHeader says them ("":
// none, or not a pipeline answer).
func unchecked(res *answer.Result) string {
	if res == nil || res.Pipeline == nil {
		return ""
	}
	return uncheckedText(res.Pipeline.Unchecked)
}

func uncheckedText(hops []answer.Hop) string {
	var out []string
	for _, h := range hops {
		out = append(out, fmt.Sprintf("%d-%d@%s", h.Start, h.End, h.Peer))
	}
	return strings.Join(out, ", ")
}
