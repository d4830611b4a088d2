package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// QueryRequest is POST /v1/swarm/query.
type QueryRequest struct {
	Query string `json:"query"`
	// History is the conversation before Query, oldest first (a chat's
	// earlier turns): roles system, user and assistant.
	History []Message `json:"history,omitempty"`
	Mode    string    `json:"mode,omitempty"`    // auto (default), moa, speed, pipeline
	Model   string    `json:"model,omitempty"`   // pipeline mode: model name or CID
	DType   string    `json:"dtype,omitempty"`   // pipeline mode: f32 (default) or f16
	Standby *bool     `json:"standby,omitempty"` // pipeline mode: keep a warm standby route (default: the peer's config)
	// Speculate, in pipeline mode: draft with the peer's pipeline.draft and
	// have the route verify (default: when the peer has a draft model and
	// the query is greedy).
	Speculate   *bool    `json:"speculate,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Temperature *float32 `json:"temperature,omitempty"`
	Seed        *uint64  `json:"seed,omitempty"`
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

// AgentResponse is one agent's answer (or failure) in a query result.
type AgentResponse struct {
	Role      string  `json:"role"`
	Peer      string  `json:"peer"`
	Model     string  `json:"model"`
	ModelCID  string  `json:"model_cid,omitempty"`
	Content   string  `json:"content"`
	Tokens    int     `json:"tokens"`
	TokPerSec float64 `json:"tok_s"`
	MS        float64 `json:"ms"`
	ServerMS  float64 `json:"server_ms"`
	TTFTMS    float64 `json:"ttft_ms"`
	Prompt    int     `json:"prompt_tokens"`
	Weight    float64 `json:"weight"`
	Thermal   string  `json:"thermal,omitempty"`
	Battery   int     `json:"battery,omitempty"`
	// Conn is how the originator reached the agent: "local", "direct",
	// "punched" or "relayed".
	Conn string `json:"conn,omitempty"`
	// Unverified: from a peer whose claim to its role model the
	// originator has not verified (it had no copy to check it with).
	Unverified bool `json:"unverified,omitempty"`
	// Partial: cut off (by its deadline, or a holder that hung mid-answer)
	// and used as far as it goes.
	Partial       bool     `json:"partial,omitempty"`
	PartialReason string   `json:"partial_reason,omitempty"`
	Skipped       []string `json:"skipped,omitempty"` // holders tried first, with why they were left
	// Draft: the answer was drafted by another model (speed mode).
	Draft *AgentDraft `json:"draft,omitempty"`
	Error string      `json:"error,omitempty"`
}

// AgentDraft is how a speculative speed-mode answer was drafted: by which
// peer's drafter, how many tokens it proposed, how many of them the
// answering model accepted, in how many verify steps, and why drafting
// did not start or stopped early ("": it did not).
type AgentDraft struct {
	Peer     string `json:"peer"`
	Drafted  int    `json:"drafted"`
	Accepted int    `json:"accepted"`
	Rounds   int    `json:"rounds"`
	Error    string `json:"error,omitempty"`
}

// AgentToken is a piece of an agent's answer as it is written (the
// agent_token event of a streamed query).
type AgentToken struct {
	Role string `json:"role"`
	Peer string `json:"peer"`
	Text string `json:"text"`
}

// QueryResult is the answer of POST /v1/swarm/query.
type QueryResult struct {
	Query           string          `json:"query"`
	QueryType       string          `json:"query_type"`
	Classifier      string          `json:"classifier"`
	Mode            string          `json:"mode"`
	AgentResponses  []AgentResponse `json:"agent_responses"`
	FailedAgents    []AgentResponse `json:"failed_agents,omitempty"`
	Aggregator      *AgentResponse  `json:"aggregator,omitempty"`
	FinalAnswer     string          `json:"final_answer"`
	TotalTimeMS     float64         `json:"total_time_ms"`
	AgentsResponded int             `json:"agents_responded"`
	// Pipeline is set in pipeline mode.
	Pipeline json.RawMessage `json:"pipeline,omitempty"`
}

// Event is one server-sent event of a streamed query: "agent" (an agent
// finished; Agent set), "agent_token" (an agent's text as it writes;
// AgentToken set), "token" (final answer text; Text set), "trace"
// (pipeline progress; Raw set), "result" (Result set) or "error".
type Event struct {
	Type       string
	Agent      *AgentResponse
	AgentToken *AgentToken
	Text       string
	Result     *QueryResult
	Raw        json.RawMessage
}

// Query runs a query. With req.Stream, onEvent sees each event as it
// arrives; the result is returned either way.
func (c *Client) Query(ctx context.Context, req QueryRequest, onEvent func(Event)) (*QueryResult, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if !req.Stream {
		var out QueryResult
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
	var result *QueryResult
	err = readSSE(resp, func(event string, data []byte) error {
		ev := Event{Type: event, Raw: data}
		switch event {
		case "agent":
			ev.Agent = &AgentResponse{}
			if err := json.Unmarshal(data, ev.Agent); err != nil {
				return err
			}
		case "agent_token":
			ev.AgentToken = &AgentToken{}
			if err := json.Unmarshal(data, ev.AgentToken); err != nil {
				return err
			}
		case "token":
			var t struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(data, &t); err != nil {
				return err
			}
			ev.Text = t.Text
		case "result":
			result = &QueryResult{}
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
