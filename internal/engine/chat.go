package engine

import (
	"fmt"
	"strings"
)

// ChatFormat names a chat prompt format. The engine implements the formats in
// Go and picks one by inspecting the GGUF's tokenizer.chat_template; it does
// not execute Jinja.
type ChatFormat string

const (
	// ChatNone: no recognised template; RenderChat fails with ErrNoChatTemplate.
	ChatNone ChatFormat = ""
	// ChatML is <|im_start|>role\ncontent<|im_end|>\n (Qwen2, Qwen2.5).
	ChatML ChatFormat = "chatml"
	// ChatQwen3 is ChatML with Qwen3's thinking switch: thinking off adds an
	// empty <think></think> block to the generation prompt.
	ChatQwen3 ChatFormat = "qwen3"
	// ChatLlama3 is <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
	// after the BOS token <|begin_of_text|>, which Encode adds.
	ChatLlama3 ChatFormat = "llama3"
)

// qwen25System is the system prompt Qwen2.5's template inserts when the
// conversation has none.
const qwen25System = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

func detectChatFormat(src string) (f ChatFormat, qwen25 bool) {
	switch {
	case strings.Contains(src, "<|start_header_id|>"):
		return ChatLlama3, false
	case strings.Contains(src, "<|im_start|>") && (strings.Contains(src, "<think>") || strings.Contains(src, "enable_thinking")):
		return ChatQwen3, false
	case strings.Contains(src, "<|im_start|>"):
		return ChatML, strings.Contains(src, "You are Qwen, created by Alibaba Cloud")
	}
	return ChatNone, false
}

// Message is one chat turn. Role is "system", "user", "assistant" (or "tool").
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatOptions tune RenderChat.
type ChatOptions struct {
	// NoGenerationPrompt leaves out the assistant header that asks the model
	// to answer.
	NoGenerationPrompt bool
	// Think switches Qwen3 thinking; nil keeps the template's default (on).
	// Other formats ignore it.
	Think *bool
}

// RenderChat renders messages in the model's chat format, without BOS (Encode
// with addSpecial adds it).
func (t *Tokenizer) RenderChat(msgs []Message, opts ChatOptions) (string, error) {
	return renderChat(t.format, t.qwen25, msgs, opts)
}

// EncodeChat renders messages and tokenizes them (adding BOS if the model
// wants it).
func (t *Tokenizer) EncodeChat(msgs []Message, opts ChatOptions) ([]int32, error) {
	s, err := t.RenderChat(msgs, opts)
	if err != nil {
		return nil, err
	}
	return t.Encode(s, true)
}

func renderChat(f ChatFormat, qwen25 bool, msgs []Message, opts ChatOptions) (string, error) {
	for i, m := range msgs {
		if m.Role == "" {
			return "", fmt.Errorf("%w: message %d has no role", ErrBadInput, i)
		}
	}
	var sb strings.Builder
	switch f {
	case ChatML, ChatQwen3:
		if qwen25 && (len(msgs) == 0 || msgs[0].Role != "system") {
			msgs = append([]Message{{Role: "system", Content: qwen25System}}, msgs...)
		}
		lastUser := -1
		for i, m := range msgs {
			if m.Role == "user" {
				lastUser = i
			}
		}
		for i, m := range msgs {
			c := m.Content
			if f == ChatQwen3 && m.Role == "assistant" && i < lastUser {
				// Qwen3's template drops the reasoning of earlier turns.
				if _, after, ok := strings.Cut(c, "</think>"); ok {
					c = strings.TrimLeft(after, "\n")
				}
			}
			sb.WriteString("<|im_start|>" + m.Role + "\n" + c + "<|im_end|>\n")
		}
		if !opts.NoGenerationPrompt {
			sb.WriteString("<|im_start|>assistant\n")
			if f == ChatQwen3 && opts.Think != nil && !*opts.Think {
				sb.WriteString("<think>\n\n</think>\n\n")
			}
		}
	case ChatLlama3:
		for _, m := range msgs {
			sb.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + strings.TrimSpace(m.Content) + "<|eot_id|>")
		}
		if !opts.NoGenerationPrompt {
			sb.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
		}
	default:
		return "", ErrNoChatTemplate
	}
	return sb.String(), nil
}
