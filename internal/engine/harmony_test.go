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
