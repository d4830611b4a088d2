package engine

import (
	"strings"
	"testing"
)

// TestHarmonyChannels: a GPT-OSS chat answer shows only its final
// channel's text: the analysis message, roles and channel names are not
// the answer. <|end|> ends a message, not the answer (it was an
// end-of-generation token, so an answer stopped after its reasoning);
// <|return|> and <|call|> end it. Raw completion, and other formats, show
// every token but the control ones, as before.
func TestHarmonyChannels(t *testing.T) {
	tok, err := LoadTokenizer(synthFile(t, "gptoss", "tiny", "f32"))
	if err != nil {
		t.Fatal(err)
	}
	const answer = "<|channel|>analysis<|message|>The user greets; reply briefly.<|end|>" +
		"<|start|>assistant<|channel|>final<|message|>Hello there.<|return|>"
	ids, err := tok.Encode(answer, false)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(d *StreamDecoder) string {
		var sb strings.Builder
		for _, id := range ids {
			if tok.IsEOG(id) {
				break
			}
			s, err := d.Next(id)
			if err != nil {
				t.Fatal(err)
			}
			sb.WriteString(s)
		}
		return sb.String() + d.Flush()
	}
	if got := decode(tok.NewChatDecoder()); got != "Hello there." {
		t.Errorf("chat answer %q, want only the final channel's %q", got, "Hello there.")
	}
	if got, want := decode(tok.NewStreamDecoder()), "analysisThe user greets; reply briefly.assistantfinalHello there."; got != want {
		t.Errorf("raw completion %q, want every token but the control ones: %q", got, want)
	}
	for name, eog := range map[string]bool{"<|end|>": false, "<|return|>": true, "<|call|>": true} {
		id, err := tok.Encode(name, false)
		if err != nil || len(id) != 1 {
			t.Fatalf("%s: %v %v", name, id, err)
		}
		if tok.IsEOG(id[0]) != eog {
			t.Errorf("%s ends the answer: %v, want %v", name, tok.IsEOG(id[0]), eog)
		}
	}
	// A message on no named channel is shown; one on commentary (tool
	// calls) is not.
	ids, err = tok.Encode("<|message|>Plain.<|end|><|start|>assistant<|channel|>commentary to=functions.f<|message|>{}<|end|>", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := decode(tok.NewChatDecoder()); got != "Plain." {
		t.Errorf("unnamed and commentary channels: %q, want %q", got, "Plain.")
	}
	// Another format: a chat decoder shows what a stream decoder does.
	qt, err := LoadTokenizer(synthFile(t, "qwen3", "tiny", "f32"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err = qt.Encode("<|im_start|>assistant\nHi.", false)
	if err != nil {
		t.Fatal(err)
	}
	tok = qt
	if a, b := decode(qt.NewChatDecoder()), decode(qt.NewStreamDecoder()); a != b || a != "assistant\nHi." {
		t.Errorf("qwen3: chat %q, stream %q, want both %q", a, b, "assistant\nHi.")
	}
}

// TestHarmonyReasoning: a GPT-OSS chat answer's reasoning (the analysis
// channel) comes apart from its answer, token by token and whole: not in
// the answer, not lost. Commentary (tool calls) is neither; raw
// completion and other formats have no reasoning.
func TestHarmonyReasoning(t *testing.T) {
	tok, err := LoadTokenizer(synthFile(t, "gptoss", "tiny", "f32"))
	if err != nil {
		t.Fatal(err)
	}
	// "é" and "…" are several bytes, which byte-level tokens can split:
	// they stay in their own channel.
	const answer = "<|channel|>analysis<|message|>The user greets (café…); reply briefly.<|end|>" +
		"<|start|>assistant<|channel|>commentary to=functions.f<|message|>{\"x\":1}<|end|>" +
		"<|start|>assistant<|channel|>final<|message|>Hello — there.<|return|>"
	ids, err := tok.Encode(answer, false)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(d *StreamDecoder) (text, reasoning string, pieces int) {
		var tb, rb strings.Builder
		for _, id := range ids {
			if tok.IsEOG(id) {
				break
			}
			s, r, err := d.Step(id)
			if err != nil {
				t.Fatal(err)
			}
			if s != "" && r != "" {
				t.Errorf("token %d gave text %q and reasoning %q at once", id, s, r)
			}
			if r != "" {
				pieces++
			}
			tb.WriteString(s)
			rb.WriteString(r)
		}
		s, r := d.FlushStep()
		return tb.String() + s, rb.String() + r, pieces
	}
	text, reasoning, pieces := decode(tok.NewChatDecoder())
	if text != "Hello — there." {
		t.Errorf("answer %q, want %q", text, "Hello — there.")
	}
	if want := "The user greets (café…); reply briefly."; reasoning != want {
		t.Errorf("reasoning %q, want %q", reasoning, want)
	}
	if pieces < 2 {
		t.Errorf("reasoning came in %d pieces, want one per token", pieces)
	}
	text, reasoning, _ = decode(tok.NewStreamDecoder())
	if reasoning != "" || !strings.Contains(text, "The user greets") {
		t.Errorf("raw completion: text %q reasoning %q, want every token as text", text, reasoning)
	}
	qt, err := LoadTokenizer(synthFile(t, "qwen3", "tiny", "f32"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err = qt.Encode("<|im_start|>assistant\nHi.", false)
	if err != nil {
		t.Fatal(err)
	}
	tok = qt
	if text, reasoning, _ := decode(qt.NewChatDecoder()); text != "assistant\nHi." || reasoning != "" {
		t.Errorf("qwen3: text %q reasoning %q", text, reasoning)
	}
}
