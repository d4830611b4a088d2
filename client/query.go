package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/llmswarm/llmswarm/answer"
)

// QueryRequest is POST /v1/swarm/query.
type QueryRequest struct {
	Query string `json:"query"`
	// History is the conversation before Query, oldest first (a chat's
	// earlier turns): roles system, user and assistant.
	History []Message `json:"history,omitempty"`
	Mode    string    `json:"mode,omitempty"` // auto (default), moa, speed, pipeline, a role, or complete (raw completion)
	// Role, in complete mode: the role whose model continues the text
	// (default: the writer, or a pipeline model when Model names one or no
	// peer serves a role).
	Role    string `json:"role,omitempty"`
	Model   string `json:"model,omitempty"`   // pipeline mode: model name or CID
	DType   string `json:"dtype,omitempty"`   // pipeline mode: f32 (default) or f16
	Standby *bool  `json:"standby,omitempty"` // pipeline mode: keep a warm standby route (default: the peer's config)
	// Speculate, in pipeline mode: draft with the peer's pipeline.draft and
	// have the route verify (default: when the peer has a draft model and
	// the query is greedy).
	Speculate   *bool    `json:"speculate,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Temperature *float32 `json:"temperature,omitempty"`
	Seed        *Seed    `json:"seed,omitempty"` // X-Swarm-Seed's digits; in JSON an integer or a string of one
	// RepeatPenalty divides the logits of recently seen tokens (1 or 0: off).
	RepeatPenalty *float32 `json:"repeat_penalty,omitempty"`
	// TopP keeps the smallest set of tokens whose probability reaches it
	// (0 or 1: off).
	TopP *float32 `json:"top_p,omitempty"`
	// Stop ends the answer before the first of these strings (at most 4).
	Stop      []string `json:"stop,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"` // 0: by mode and complexity
	Stream    bool     `json:"stream,omitempty"`
}

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"` // system, user or assistant
	Content string `json:"content"`
}

// AgentToken is a piece of an agent's answer as it is written (the
// agent_token event of a streamed query).
type AgentToken struct {
	Role string `json:"role"`
	Peer string `json:"peer"`
	Text string `json:"text"`
}

// Event is one server-sent event of a streamed query: "agent" (an agent
// finished; Agent set), "agent_token" (an agent's text as it writes;
// AgentToken set), "token" (final answer text; Text set), "reasoning"
// (the final answer's reasoning as it is written, apart from its text;
// Text set), "trace"
// (pipeline progress; Trace set), "result" (Result set) or "error". Raw
// is the event's JSON.
type Event struct {
	Type       string
	Agent      *answer.Agent
	AgentToken *AgentToken
	Text       string
	Trace      *answer.Trace
	Result     *answer.Result
	Raw        json.RawMessage
}

// Query runs a query. With req.Stream, onEvent sees each event as it
// arrives; the result is returned either way.
func (c *Client) Query(ctx context.Context, req QueryRequest, onEvent func(Event)) (*answer.Result, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if !req.Stream {
		var out answer.Result
		if err := c.do(ctx, http.MethodPost, "/v1/swarm/query", bytes.NewReader(body), &out); err != nil {
			return nil, err
		}
		return &out, nil
	}
	resp, err := c.send(ctx, http.MethodPost, "/v1/swarm/query", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var result *answer.Result
	err = readSSE(resp, func(event string, data []byte) error {
		ev := Event{Type: event, Raw: data}
		switch event {
		case "agent":
			ev.Agent = &answer.Agent{}
			if err := json.Unmarshal(data, ev.Agent); err != nil {
				return err
			}
		case "agent_token":
			ev.AgentToken = &AgentToken{}
			if err := json.Unmarshal(data, ev.AgentToken); err != nil {
				return err
			}
		case "trace":
			ev.Trace = &answer.Trace{}
			if err := json.Unmarshal(data, ev.Trace); err != nil {
				return err
			}
		case "token", "reasoning":
			var t struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(data, &t); err != nil {
				return err
			}
			ev.Text = t.Text
		case "result":
			result = &answer.Result{}
			if err := json.Unmarshal(data, result); err != nil {
				return err
			}
			ev.Result = result
		case "error":
			var e Error
			if err := json.Unmarshal(data, &e); err != nil {
				return err
			}
			return &APIError{Status: e.Error.Status, Message: e.Error.Message, Type: e.Error.Type, Streamed: true}
		}
		if onEvent != nil {
			onEvent(ev)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if result == nil {
		return nil, fmt.Errorf("swarmd at %s: stream ended without a result", c.addr)
	}
	return result, nil
}

// readSSE reads server-sent events until the body ends.
func readSSE(resp *http.Response, fn func(event string, data []byte) error) error {
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	event, data := "", []byte(nil)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data != nil {
				if err := fn(event, data); err != nil {
					return err
				}
			}
			event, data = "", nil
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[len("event:"):])
		case strings.HasPrefix(line, "data:"):
			d := strings.TrimPrefix(line[len("data:"):], " ")
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, d...)
		}
	}
	return sc.Err()
}
