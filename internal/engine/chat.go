package engine

import (
	"errors"
	"fmt"
	"strings"
)

// ChatFormat names a hand-written chat prompt format. The engine renders the
// GGUF's own tokenizer.chat_template (template.go); these formats, picked by
// inspecting that template, are its fallback when the template does not
// render.
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

// ChatTemplateInfo says how a model's conversations are rendered.
type ChatTemplateInfo struct {
	// Source is "gguf" (the file's own template), "builtin:<format>" (a
	// hand-written format, the file's template not rendering) or "none"
	// (raw completion only).
	Source string `json:"source"`
	// Note says why the file's template is not used ("" when it is).
	Note string `json:"note,omitempty"`
}

// probe is the conversation every chat template must render: a template
// that fails it is not used.
var probe = []Message{{Role: "user", Content: "Hello"}}

// chooseTemplate compiles the file's template and renders the probe with
// it; the hand-written format detected from it is kept as the fallback.
func (t *Tokenizer) chooseTemplate(src string) {
	var note string
	if src == "" {
		note = "the file has no tokenizer.chat_template"
	} else if ct, err := compileTemplate(src, t.special(t.vocab.BOS), t.special(t.vocab.EOS)); err != nil {
		note = err.Error()
	} else if _, err := ct.render(probe, ChatOptions{}); err != nil {
		note = err.Error()
	} else {
		t.tmpl, t.chat = ct, ChatTemplateInfo{Source: "gguf"}
		return
	}
	t.chat = ChatTemplateInfo{Source: "none", Note: note}
	if t.format != ChatNone {
		t.chat.Source = "builtin:" + string(t.format)
	}
}

// special is the text of the first of ids, "" if none is in the vocabulary.
func (t *Tokenizer) special(ids []int32) string {
	if len(ids) > 0 && ids[0] >= 0 && int(ids[0]) < len(t.vocab.Values) {
		return t.vocab.Values[ids[0]]
	}
	return ""
}

// ChatTemplate says how conversations are rendered: the file's template,
// a hand-written fallback, or not at all.
func (t *Tokenizer) ChatTemplate() ChatTemplateInfo { return t.chat }

// RenderChat renders messages with the model's chat template, without BOS
// (Encode with addSpecial adds it; a BOS the template writes first is cut).
func (t *Tokenizer) RenderChat(msgs []Message, opts ChatOptions) (string, error) {
	if t.tmpl == nil {
		s, err := renderChat(t.format, t.qwen25, msgs, opts)
		if errors.Is(err, ErrNoChatTemplate) && t.chat.Note != "" {
			err = fmt.Errorf("%w (%s)", err, t.chat.Note)
		}
		return s, err
	}
	for i, m := range msgs {
		if m.Role == "" {
			return "", fmt.Errorf("%w: message %d has no role", ErrBadInput, i)
		}
	}
	s, err := t.tmpl.render(msgs, opts)
	if err != nil {
		return "", err
	}
	if t.vocab.AddBOS && t.tmpl.bos != "" {
		s = strings.TrimPrefix(s, t.tmpl.bos)
	}
	return s, nil
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
