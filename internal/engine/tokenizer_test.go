package engine

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestTokenizerRoundTrip(t *testing.T) {
	texts := []string{
		"Hello, world!",
		"  leading spaces\tand tabs\nand\r\nnewlines  ",
		"unicode: héllo wörld — 你好 🚀 ñ",
		"numbers 1234567890 and punctuation ?!.,;:'\"()[]{}",
		"<|im_start|>user\nhi<|im_end|>",
		"",
	}
	for _, arch := range Architectures {
		path := synthFile(t, arch, "tiny", "f32")
		tok, err := LoadTokenizer(path) // metadata only
		if err != nil {
			t.Fatal(err)
		}
		m := loadT(t, path, Options{Slots: 1})
		for _, s := range texts {
			ids, err := tok.Encode(s, false)
			if err != nil {
				t.Fatal(err)
			}
			ids2, _ := m.Tokenizer().Encode(s, false)
			if !slices.Equal(ids, ids2) {
				t.Fatalf("%s: LoadTokenizer and the model's tokenizer disagree on %q", arch, s)
			}
			back, err := tok.Decode(ids)
			if err != nil {
				t.Fatal(err)
			}
			if back != s {
				t.Errorf("%s: %q -> %v -> %q", arch, s, ids, back)
			}
			// streaming decode yields whole characters and the same text
			d := tok.NewStreamDecoder()
			var sb strings.Builder
			for _, id := range ids {
				p, err := d.Add(id)
				if err != nil {
					t.Fatal(err)
				}
				if !utf8.ValidString(p) {
					t.Fatalf("%s: stream piece %q splits a character", arch, p)
				}
				sb.WriteString(p)
			}
			sb.WriteString(d.Flush())
			if sb.String() != s {
				t.Errorf("%s: streamed %q, want %q", arch, sb.String(), s)
			}
		}
		ids, _ := tok.Encode("hi", true)
		if arch == "llama" && (len(ids) == 0 || tok.Token(ids[0]) != "<|begin_of_text|>") {
			t.Errorf("llama: no BOS in %v", ids)
		}
		if arch != "llama" && tok.Token(ids[0]) == "<|endoftext|>" {
			t.Errorf("%s: unexpected BOS", arch)
		}
		if _, err := tok.Decode([]int32{int32(tok.VocabSize())}); err == nil {
			t.Errorf("%s: out-of-range id decoded", arch)
		}
		eog := map[string]bool{}
		for _, id := range tok.EOG() {
			eog[tok.Token(id)] = true
		}
		want := map[string][]string{"qwen3": {"<|im_end|>", "<|endoftext|>"}, "qwen2": {"<|im_end|>", "<|endoftext|>"}, "llama": {"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"}}[arch]
		for _, w := range want {
			if !eog[w] {
				t.Errorf("%s: %s is not an end-of-generation token (have %v)", arch, w, eog)
			}
		}
	}
}

func TestChatFormatDetection(t *testing.T) {
	want := map[string]ChatFormat{"qwen3": ChatQwen3, "qwen2": ChatML, "llama": ChatLlama3}
	for arch, f := range want {
		tok, err := LoadTokenizer(synthFile(t, arch, "tiny", "f32"))
		if err != nil {
			t.Fatal(err)
		}
		if tok.ChatFormat() != f {
			t.Errorf("%s: format %q, want %q", arch, tok.ChatFormat(), f)
		}
		// rendered chat tokenizes with the template's specials as single tokens
		ids, err := tok.EncodeChat([]Message{{Role: "user", Content: "hi"}}, ChatOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var special int
		for _, id := range ids {
			if tok.IsControl(id) {
				special++
			}
		}
		if special < 3 {
			t.Errorf("%s: only %d control tokens in %v", arch, special, ids)
		}
	}
	if f, _ := detectChatFormat("{{ messages }}"); f != ChatNone {
		t.Errorf("unknown template detected as %q", f)
	}
}

func TestChatGolden(t *testing.T) {
	on, off := true, false
	conv := []Message{
		{Role: "system", Content: "You are a careful assistant."},
		{Role: "user", Content: "What is 2+2?"},
		{Role: "assistant", Content: "<think>\nsimple sum\n</think>\n\n4"},
		{Role: "user", Content: "  And 3+3?  "},
	}
	noSystem := []Message{{Role: "user", Content: "Hello!"}}
	cases := []struct {
		name   string
		format ChatFormat
		qwen25 bool
		msgs   []Message
		opts   ChatOptions
	}{
		{"chatml-conversation", ChatML, false, conv, ChatOptions{}},
		{"chatml-no-generation-prompt", ChatML, false, noSystem, ChatOptions{NoGenerationPrompt: true}},
		{"qwen25-default-system", ChatML, true, noSystem, ChatOptions{}},
		{"qwen3-conversation", ChatQwen3, false, conv, ChatOptions{}},
		{"qwen3-think-on", ChatQwen3, false, noSystem, ChatOptions{Think: &on}},
		{"qwen3-think-off", ChatQwen3, false, noSystem, ChatOptions{Think: &off}},
		{"llama3-conversation", ChatLlama3, false, conv, ChatOptions{}},
		{"llama3-user-only", ChatLlama3, false, noSystem, ChatOptions{}},
	}
	for _, c := range cases {
		got, err := renderChat(c.format, c.qwen25, c.msgs, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join("testdata", "chat", c.name+".golden")
		if *update {
			if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%v (run with -update to create)", err)
		}
		if got != string(want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, want)
		}
	}
	if _, err := renderChat(ChatNone, false, noSystem, ChatOptions{}); err != ErrNoChatTemplate {
		t.Errorf("no template: %v", err)
	}
}
