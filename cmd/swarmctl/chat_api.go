package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/llmswarm/llmswarm/node/client"
)

// chat talks to swarmd's OpenAI chat completions API: of the two query
// APIs it is the one that carries a conversation (POST /v1/swarm/query
// takes one question). node/client has no call for it, so this file holds
// the little of the OpenAI wire format that chat needs.

// chatMessage is one turn of the conversation.
type chatMessage struct {
	Role    string `json:"role"` // user or assistant
	Content string `json:"content"`
}

// chatRequest is the subset of an OpenAI chat completion request chat sends.
type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	Temperature   *float32       `json:"temperature,omitempty"`
	Seed          *int64         `json:"seed,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatChunk is one streamed chunk; Error is set on an error that ended the
// stream after it began.
type chatChunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage        `json:"usage"`
	Error *client.ErrorBody `json:"error"`
}

type chatUsage struct {
	Prompt    int `json:"prompt_tokens"`
	Generated int `json:"completion_tokens"`
}

// chatStream is what one completion told: the answer, how it finished,
// the tokens it cost and, unstreamed, the swarm's whole result.
type chatStream struct {
	onText func(string)
	answer strings.Builder
	finish string
	usage  *chatUsage
	swarm  *client.QueryResult
}

// chatAnswer is an unstreamed completion: the swarm's result rides along
// in the swarm field (the body of POST /v1/swarm/query).
type chatAnswer struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage          `json:"usage"`
	Swarm *client.QueryResult `json:"swarm"`
}

// chatCompletion posts req to the API and feeds st as the answer arrives:
// token by token with req.Stream, else whole, with the swarm's result.
func chatCompletion(ctx context.Context, addr, token string, req chatRequest, st *chatStream) error {
	req.StreamOptions = nil
	if req.Stream {
		req.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("swarmd at %s: %w", addr, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if token != "" {
		hreq.Header.Set("Authorization", "Bearer "+token)
	}
	hc := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(hreq)
	if err != nil {
		var op *net.OpError
		if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &op) && op.Op == "dial" {
			return fmt.Errorf("%w at %s", client.ErrNotRunning, addr)
		}
		return fmt.Errorf("swarmd at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e client.Error
		if json.Unmarshal(b, &e) != nil || e.Error.Message == "" {
			e.Error.Message = strings.TrimSpace(string(b))
		}
		return &client.APIError{Status: resp.StatusCode, Message: e.Error.Message, Type: e.Error.Type}
	}
	if !req.Stream {
		return st.readWhole(io.LimitReader(resp.Body, 64<<20), addr)
	}
	return st.read(resp.Body, addr)
}

func (st *chatStream) readWhole(r io.Reader, addr string) error {
	var a chatAnswer
	if err := json.NewDecoder(r).Decode(&a); err != nil {
		return fmt.Errorf("swarmd at %s: bad chat answer: %w", addr, err)
	}
	if len(a.Choices) != 1 || a.Swarm == nil {
		return fmt.Errorf("swarmd at %s: bad chat answer: %d choices, swarm result %t", addr, len(a.Choices), a.Swarm != nil)
	}
	st.answer.WriteString(a.Choices[0].Message.Content)
	st.finish, st.usage, st.swarm = a.Choices[0].FinishReason, a.Usage, a.Swarm
	if st.onText != nil && st.answer.Len() > 0 {
		st.onText(st.answer.String())
	}
	return nil
}

// read consumes the event stream: "data: {chunk}" lines and
// "data: [DONE]" at the end; comments (": agent X done") carry nothing
// chat shows.
func (st *chatStream) read(r io.Reader, addr string) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "data:"):
			data := strings.TrimSpace(line[len("data:"):])
			if data == "[DONE]" {
				if st.finish == "" {
					return fmt.Errorf("swarmd at %s: the answer ended without a finish reason", addr)
				}
				return nil
			}
			var c chatChunk
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				return fmt.Errorf("swarmd at %s: bad chunk in the answer stream: %w", addr, err)
			}
			if c.Error != nil {
				return &client.APIError{Status: c.Error.Status, Message: c.Error.Message, Type: c.Error.Type, Streamed: true}
			}
			if c.Usage != nil {
				st.usage = c.Usage
			}
			for _, ch := range c.Choices {
				if t := ch.Delta.Content; t != "" {
					st.answer.WriteString(t)
					if st.onText != nil {
						st.onText(t)
					}
				}
				if ch.FinishReason != nil {
					st.finish = *ch.FinishReason
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("swarmd at %s: %w", addr, err)
	}
	return fmt.Errorf("swarmd at %s: the answer stream ended early", addr)
}
