package engine

import (
	"context"
	"testing"

	"github.com/llmswarm/llmswarm/shards"
)

// TestSynthTypes: every synthetic type loads and generates, and the file
// reports the quantization it was asked for.
func TestSynthTypes(t *testing.T) {
	cases := []struct {
		arch, size, typ, quant string
	}{
		{"qwen3", "tiny", "f16", "F16"},
		{"qwen2", "tiny", "q8_0", "Q8_0"},
		{"llama", "tiny", "q4_k", "Q4_K_M"},
		{"qwen3", "small", "q4_k", "Q4_K_M"},
		{"llama", "small", "f32", "F32"},
	}
	for _, c := range cases {
		p := synthFile(t, c.arch, c.size, c.typ)
		mi, err := shards.ReadModelInfo(p)
		if err != nil {
			t.Fatal(err)
		}
		if mi.Quant != c.quant || mi.Arch != c.arch || !mi.HasHead || !mi.HasEmbedding {
			t.Errorf("%v: info %+v", c, mi)
		}
		m := loadT(t, p, Options{Slots: 1, Context: 128})
		if m.Info().VocabSize != mi.VocabSize || m.Info().Layers != mi.Layers {
			t.Errorf("%v: engine info %+v, file %+v", c, m.Info(), mi)
		}
		res, err := m.Generate(context.Background(), Request{Prompt: "The swarm", MaxTokens: 6}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Tokens) == 0 {
			t.Errorf("%v: no tokens", c)
		}
		m.Close()
	}
	// the same seed gives the same file; another seed another
	a, b := t.TempDir()+"/a.gguf", t.TempDir()+"/b.gguf"
	for i, p := range []string{a, b} {
		if err := Synth(context.Background(), p, SynthSpec{Arch: "qwen2", Size: "tiny", Type: "f32", Seed: uint64(7 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	ca, _ := shards.FileCID(a)
	cb, _ := shards.FileCID(b)
	cc, _ := shards.FileCID(synthFile(t, "qwen2", "tiny", "f32"))
	if ca == cb || ca == cc {
		t.Error("different seeds gave the same file")
	}
	p := t.TempDir() + "/again.gguf"
	if err := Synth(context.Background(), p, SynthSpec{Arch: "qwen2", Size: "tiny", Type: "f32", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if c2, _ := shards.FileCID(p); c2 != cc {
		t.Error("the same seed gave a different file")
	}
	if err := Synth(context.Background(), p, SynthSpec{Arch: "gpt2", Size: "tiny", Type: "f32"}); err == nil {
		t.Error("unknown arch accepted")
	}
}
