package api

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/wire"
	"github.com/llmswarm/llmswarm/node"
)

// chatRequest is OpenAI's chat completion request, as far as the swarm
// knows it. Every other field is refused by name (decodeJSON).
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float32        `json:"temperature"`
	TopP                *float32        `json:"top_p"`
	Seed                *client.Seed    `json:"seed"` // OpenAI's are signed; any the swarm prints too
	N                   *int            `json:"n"`
	Stop                stopList        `json:"stop"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	ResponseFormat      *responseFormat `json:"response_format"`
	PresencePenalty     *float32        `json:"presence_penalty"`
	FrequencyPenalty    *float32        `json:"frequency_penalty"`
	// Optional metadata in OpenAI's API: accepted, ignored, reported.
	User     *string         `json:"user"`
	Metadata json.RawMessage `json:"metadata"`
	Store    *bool           `json:"store"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type responseFormat struct {
	Type       string          `json:"type"`
	JSONSchema json.RawMessage `json:"json_schema"`
}

// stopList is OpenAI's stop field: null, a string, or an array of strings.
type stopList []string

func (s *stopList) UnmarshalJSON(b []byte) error {
	var one string
	switch {
	case bytes.Equal(bytes.TrimSpace(b), []byte("null")):
		*s = nil
		return nil
	case json.Unmarshal(b, &one) == nil:
		*s = stopList{one}
	case json.Unmarshal(b, (*[]string)(s)) != nil:
		return badRequest("stop: want a string, an array of strings or null")
	}
	if len(*s) > node.MaxStops {
		return badRequest("stop: %d strings, at most %d", len(*s), node.MaxStops)
	}
	for _, st := range *s {
		if st == "" {
			return badRequest("stop: empty stop string")
		}
	}
	return nil
}

// notSupported names OpenAI request fields the swarm knows and cannot
// honour, with why: refused with that reason rather than "unknown".
var notSupported = map[string]string{
	"tools":               "tool calls are not supported",
	"tool_choice":         "tool calls are not supported",
	"parallel_tool_calls": "tool calls are not supported",
	"functions":           "function calls are not supported",
	"function_call":       "function calls are not supported",
	"logit_bias":          "logit bias is not supported",
	"modalities":          "only text is supported",
	"audio":               "only text is supported",
	"prediction":          "predicted outputs are not supported",
	"reasoning_effort":    "reasoning effort is not supported",
	"service_tier":        "service tiers are not supported",
	"web_search_options":  "web search is not supported",
}

// chatOptions are what a chat request asks of the answer beyond the query.
type chatOptions struct {
	includeUsage bool
	jsonObject   bool     // response_format json_object: validated, not constrained
	ignored      []string // fields accepted and ignored
	sampled      bool     // temperature > 0: the seed matters
}

// chatMessage is one message of a chat request.
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

// decodeChat reads a chat request; a known OpenAI field the swarm cannot
// honour is refused with the reason.
func decodeChat(w http.ResponseWriter, r *http.Request) (chatRequest, error) {
	var req chatRequest
	err := decodeBody(w, r, &req)
	var uf *wire.RequestError
	if errors.As(err, &uf) && uf.Field != "" {
		if why, ok := notSupported[uf.Field]; ok {
			return req, badRequest("field %q is not supported: %s", uf.Field, why)
		}
	}
	return req, err
}

// defaultTemperature is OpenAI's documented default: an omitted
// temperature samples, it is not greedy.
const defaultTemperature = 1.0

// specFromChat turns a chat request into a query: the last user message
// is the question, the messages before it the history.
func (a *server) specFromChat(req chatRequest) (client.QueryRequest, chatOptions, error) {
	var spec client.QueryRequest
	var opt chatOptions
	if len(req.Messages) == 0 {
		return spec, opt, badRequest("messages must not be empty")
	}
	if req.N != nil && *req.N != 1 {
		return spec, opt, badRequest("n=%d is not supported: one choice per request (n must be 1)", *req.N)
	}
	if req.Logprobs != nil && *req.Logprobs {
		return spec, opt, badRequest("logprobs is not supported: the swarm's strategies return text, not token probabilities")
	}
	if req.TopLogprobs != nil && *req.TopLogprobs != 0 {
		return spec, opt, badRequest("top_logprobs is not supported: the swarm's strategies return text, not token probabilities")
	}
	if rf := req.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text":
		case "json_object":
			opt.jsonObject = true
		case "json_schema":
			return spec, opt, badRequest(`response_format type "json_schema" is not supported (use "json_object": the answer is checked to be a JSON object)`)
		default:
			return spec, opt, badRequest(`response_format type %q: want "text" or "json_object"`, rf.Type)
		}
	}
	msgs := make([]client.Message, 0, len(req.Messages))
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant":
		default:
			return spec, opt, badRequest("messages[%d].role %q: want system, user or assistant", i, m.Role)
		}
		text, err := m.text()
		if err != nil {
			return spec, opt, err
		}
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		msgs = append(msgs, client.Message{Role: role, Content: text})
	}
	last := msgs[len(msgs)-1]
	if last.Role != "user" || strings.TrimSpace(last.Content) == "" {
		return spec, opt, badRequest("the last message must be a non-empty user message")
	}
	spec.Query, spec.History = last.Content, msgs[:len(msgs)-1]
	for _, mt := range []*int{req.MaxTokens, req.MaxCompletionTokens} {
		if mt != nil {
			if *mt < 1 || *mt > 8192 {
				return spec, opt, badRequest("max_tokens %d: want 1..8192", *mt)
			}
			spec.MaxTokens = *mt
		}
	}
	opt.sampled = sampling(&spec, req.Temperature, req.TopP, req.Stop, req.Seed)
	mode, model, err := a.b.ResolveModel(req.Model)
	if err != nil {
		return spec, opt, err
	}
	spec.Mode, spec.Model = mode, model
	opt.includeUsage = req.Stream && req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	if req.User != nil {
		opt.ignored = append(opt.ignored, "user")
	}
	if len(req.Metadata) > 0 && string(req.Metadata) != "null" {
		opt.ignored = append(opt.ignored, "metadata")
	}
	if req.Store != nil {
		opt.ignored = append(opt.ignored, "store")
	}
	opt.ignored = append(opt.ignored, ignoredPenalties(req.PresencePenalty, req.FrequencyPenalty)...)
	return spec, opt, nil
}

// ignoredPenalties names the penalties a request set that the swarm
// accepts and ignores (its sampler has repeat_penalty instead).
func ignoredPenalties(presence, frequency *float32) []string {
	var out []string
	if presence != nil && *presence != 0 {
		out = append(out, "presence_penalty")
	}
	if frequency != nil && *frequency != 0 {
		out = append(out, "frequency_penalty")
	}
	return out
}

// sampling sets spec's sampling from a request's fields (temperature
// OpenAI's default when absent) and reports whether it samples, a sampled
// request without a seed getting a fresh one (givenSeed).
func sampling(spec *client.QueryRequest, temperature, topP *float32, stop stopList, seed *client.Seed) bool {
	temp := float32(defaultTemperature)
	if temperature != nil {
		temp = *temperature
	}
	spec.Temperature, spec.TopP, spec.Stop, spec.Seed = &temp, topP, stop, seed
	return givenSeed(spec)
}

// givenSeed gives a sampled request without a seed a fresh one, so that
// the API can tell the caller (X-Swarm-Seed) the seed that reproduces the
// answer. It reports whether the request samples.
func givenSeed(req *client.QueryRequest) bool {
	if req.Temperature == nil || *req.Temperature <= 0 {
		return false
	}
	if req.Seed == nil {
		var b [8]byte
		rand.Read(b[:])
		s := client.Seed(binary.LittleEndian.Uint64(b[:]))
		req.Seed = &s
	}
	return true
}

// checkJSONObject enforces response_format json_object on a finished
// answer. The swarm does not constrain generation to a grammar: it checks
// the answer and says so when it is not a JSON object.
func checkJSONObject(text string) error {
	t := strings.TrimSpace(text)
	if strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		return nil
	}
	if len(t) > 200 {
		t = t[:200] + "…"
	}
	return &apiError{http.StatusBadGateway, "invalid_json_output",
		fmt.Errorf("response_format json_object: the model's answer is not a JSON object (the swarm checks answers, it does not constrain generation: ask for JSON in the prompt): %q", t)}
}
