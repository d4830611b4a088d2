package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readTemplate(t testing.TB, family string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "templates", family+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestChatTemplateFamilies renders the real templates of the families
// (testdata/templates/README.md names their sources) over a short
// conversation: the text is what the authors' Jinja gives.
func TestChatTemplateFamilies(t *testing.T) {
	clock = func() time.Time { return time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC) }
	t.Cleanup(func() { clock = time.Now })
	off := false
	conv := []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"},
		{Role: "assistant", Content: "Hello!"}, {Role: "user", Content: "2+2?"}}
	noSystem := conv[1:]
	thought := []Message{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "<think>\ngreet\n</think>\n\nHello!"}, {Role: "user", Content: "2+2?"}}
	gemma := "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n"
	chatml := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
	cases := []struct {
		name, family, bos, eos string
		msgs                   []Message
		opts                   ChatOptions
		want                   string
	}{
		{"gemma3", "gemma3", "<bos>", "<eos>", conv, ChatOptions{}, gemma},
		{"gemma3n", "gemma3n", "<bos>", "<eos>", conv, ChatOptions{}, gemma},
		{"mistral", "mistral", "<s>", "</s>", noSystem, ChatOptions{}, "<s>[INST] Hi [/INST]Hello!</s>[INST] 2+2? [/INST]"},
		{"lfm2", "lfm2", "<|startoftext|>", "<|im_end|>", conv, ChatOptions{}, "<|startoftext|>" + chatml},
		{"gptoss", "gptoss", "<|startoftext|>", "<|return|>", conv, ChatOptions{},
			"<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2026-11-28\n\nReasoning: medium\n\n" +
				"# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>" +
				"<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>" +
				"<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|end|><|start|>user<|message|>2+2?<|end|><|start|>assistant"},
		{"qwen3", "qwen3", "", "<|im_end|>", conv, ChatOptions{}, chatml},
		{"qwen3-think-off", "qwen3", "", "<|im_end|>", noSystem[2:], ChatOptions{Think: &off},
			"<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
		{"qwen3-drops-old-thinking", "qwen3", "", "<|im_end|>", thought, ChatOptions{},
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"},
		{"llama3", "llama3", "<|begin_of_text|>", "<|eot_id|>", conv, ChatOptions{},
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 28 Nov 2026\n\nBe brief.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"chatml", "chatml", "", "<|im_end|>", conv, ChatOptions{}, chatml},
		{"chatml-no-generation-prompt", "chatml", "", "<|im_end|>", conv, ChatOptions{NoGenerationPrompt: true}, strings.TrimSuffix(chatml, "<|im_start|>assistant\n")},
		{"qwen2-default-system", "qwen2", "", "<|im_end|>", noSystem[2:], ChatOptions{},
			"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"},
		{"qwen2.5-synth", "", "", "<|im_end|>", noSystem[2:], ChatOptions{},
			"<|im_start|>system\n" + qwen25System + "<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"},
	}
	for _, c := range cases {
		src := qwen25Template
		if c.family != "" {
			src = readTemplate(t, c.family)
		}
		ct, err := compileTemplate(src, c.bos, c.eos)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, err := ct.render(c.msgs, c.opts)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
	// Mistral's template refuses a system message: the error says so.
	ct, err := compileTemplate(readTemplate(t, "mistral"), "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ct.render(conv, ChatOptions{})
	var te *ChatTemplateError
	if !errors.As(err, &te) || !te.Raised || !errors.Is(err, ErrChatTemplate) || !strings.Contains(err.Error(), "Conversation roles must alternate") {
		t.Errorf("mistral with a system message: %v", err)
	}
}

// TestChatTemplateBad: a template that does not parse, runs away or writes
// too much is an error naming why, in bounded time, never a crash.
func TestChatTemplateBad(t *testing.T) {
	// The bounds on work and size are tested here, not the one on time,
	// which a loaded machine would reach first.
	defer func(d time.Duration) { templateTimeout = d }(templateTimeout)
	templateTimeout = 5 * time.Minute
	msgs := []Message{{Role: "user", Content: "Hi"}}
	cases := []struct{ name, src, want string }{
		{"syntax", "{% for %}", "jinja parse"},
		{"recursion", "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "macros nested deeper than"},
		{"mutual-recursion", "{% macro f(n) -%}{{ g(n) }}{%- endmacro %}{% macro g(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "macros nested deeper than"},
		{"macro-calls", "{% macro f() %}x{% endmacro %}{% set s = 'x' * 400 %}{% for i in s %}{% for j in s %}{{ f() }}{% endfor %}{% endfor %}", "macro calls"},
		{"huge-range", "{% for i in range(10000000000) %}x{% endfor %}", "range: more than"},
		{"nested-loops", "{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}x{% endfor %}{% endfor %}{% endfor %}", "range: more than"},
		{"huge-output", "{% for i in range(99999) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}", "rendered prompt of"},
		{"too-big", strings.Repeat("x", maxTemplateBytes+1), "at most"},
		{"not-callable", "{{ nothing() }}", "chat template"},
	}
	for _, c := range cases {
		ct, err := compileTemplate(c.src, "", "")
		if err == nil {
			_, err = ct.render(msgs, ChatOptions{})
		}
		if !errors.Is(err, ErrChatTemplate) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an ErrChatTemplate naming %q", c.name, err, c.want)
		}
	}
}

// TestChatTemplateSynth: a synthetic model carrying each real template
// renders with it (no hand-written format), a broken template falls back to
// the hand-written format it resembles and says why, and a model without
// one answers raw completions while chat is a clear error.
func TestChatTemplateSynth(t *testing.T) {
	ctx := context.Background()
	synth := func(name string, spec SynthSpec) *Tokenizer {
		t.Helper()
		p := filepath.Join(t.TempDir(), name+".gguf")
		spec.Arch, spec.Size, spec.Type, spec.Seed = "qwen3", "tiny", "f32", 1
		if err := Synth(ctx, p, spec); err != nil {
			t.Fatal(err)
		}
		tok, err := LoadTokenizer(p)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	msgs := []Message{{Role: "user", Content: "Hi"}}
	for _, f := range []string{"gemma3", "gemma3n", "mistral", "lfm2", "gptoss", "qwen3", "llama3", "chatml"} {
		tok := synth(f, SynthSpec{ChatTemplate: readTemplate(t, f)})
		if ct := tok.ChatTemplate(); ct.Source != "gguf" {
			t.Errorf("%s: template %+v, want the file's", f, ct)
		}
		if _, err := tok.EncodeChat(msgs, ChatOptions{}); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	tok := synth("broken", SynthSpec{ChatTemplate: "<|im_start|>{{ nothing() }}"})
	if ct := tok.ChatTemplate(); ct.Source != "builtin:chatml" || !strings.Contains(ct.Note, "nothing") {
		t.Errorf("broken ChatML-like template: %+v, want the builtin chatml with the reason", ct)
	}
	if s, err := tok.RenderChat(msgs, ChatOptions{}); err != nil || s != "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" {
		t.Errorf("fallback render: %q, %v", s, err)
	}
	tok = synth("base", SynthSpec{NoChatTemplate: true})
	if ct := tok.ChatTemplate(); ct.Source != "none" {
		t.Errorf("no template: %+v", ct)
	}
	if _, err := tok.EncodeChat(msgs, ChatOptions{}); !errors.Is(err, ErrNoChatTemplate) || !strings.Contains(err.Error(), "no tokenizer.chat_template") {
		t.Errorf("chat without a template: %v", err)
	}
	if ids, err := tok.Encode("Once upon a time", true); err != nil || len(ids) == 0 {
		t.Errorf("raw prompt: %v, %v", ids, err)
	}
}

// TestChatTemplateGenerate: a whole model with Gemma 3's template answers
// a chat, and one without a template answers a raw prompt.
func TestChatTemplateGenerate(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		spec SynthSpec
		req  Request
	}{
		{"gemma3-chat", SynthSpec{ChatTemplate: readTemplate(t, "gemma3")}, Request{Messages: []Message{{Role: "user", Content: "Hi"}}, MaxTokens: 4}},
		{"base-raw", SynthSpec{NoChatTemplate: true}, Request{Prompt: "Once upon a time", MaxTokens: 4}},
	} {
		p := filepath.Join(t.TempDir(), c.name+".gguf")
		c.spec.Arch, c.spec.Size, c.spec.Type, c.spec.Seed = "llama", "tiny", "f32", 1
		if err := Synth(ctx, p, c.spec); err != nil {
			t.Fatal(err)
		}
		m := loadT(t, p, Options{Context: 256})
		res, err := m.Generate(ctx, c.req, nil)
		if err != nil || len(res.Tokens) == 0 {
			t.Errorf("%s: %v, %d tokens", c.name, err, len(res.Tokens))
		}
	}
}

// BenchmarkChatTemplateRender: the cost of rendering a four-message
// conversation with the largest and a small real template, per request.
func BenchmarkChatTemplateRender(b *testing.B) {
	conv := []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"},
		{Role: "assistant", Content: "Hello!"}, {Role: "user", Content: "2+2?"}}
	for _, f := range []string{"gptoss", "qwen3", "gemma3"} {
		ct, err := compileTemplate(readTemplate(b, f), "<bos>", "<eos>")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(f, func(b *testing.B) {
			for b.Loop() {
				if _, err := ct.render(conv, ChatOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
