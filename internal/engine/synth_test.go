package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	fsggml "github.com/ollama/ollama/fs/ggml"
	ggmlbackend "github.com/ollama/ollama/ml/backend/ggml"

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
		{"gemma3", "tiny", "q8_0", "Q8_0"},
		{"gemma3", "small", "q4_k", "Q4_K_M"},
		{"mistral3", "tiny", "q8_0", "Q8_0"},
		{"lfm2", "small", "q4_k", "Q4_K_M"},
		{"lfm2moe", "small", "q4_k", "Q4_K_M"},
		{"qwen3next", "small", "q4_k", "Q4_K_M"},
		{"nemotron_h", "small", "q4_k", "Q4_K_M"},
		{"nemotron_h_moe", "small", "q4_k", "Q4_K_M"},
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

// TestSynthDirectBlocks: quantized blocks written directly, dequantized by
// ggml itself, have mean zero and the std the float path draws with, for
// the scales of embeddings (0.5), matrices (1/sqrt(4096)) and the widest
// down projections (1/sqrt(18944), where Q4_K's d is an f16 subnormal).
func TestSynthDirectBlocks(t *testing.T) {
	const n = 256 * 1024
	for _, typ := range []fsggml.TensorType{fsggml.TensorTypeQ8_0, fsggml.TensorTypeQ4_K, fsggml.TensorTypeQ6_K} {
		for _, std := range []float64{0.5, 1 / math.Sqrt(4096), 1 / math.Sqrt(18944)} {
			var buf bytes.Buffer
			if _, err := writeDirect(&buf, typ, n, std, rand.New(rand.NewPCG(1, 2))); err != nil {
				t.Fatal(err)
			}
			if want := (&fsggml.Tensor{Kind: uint32(typ), Shape: []uint64{n}}).Size(); uint64(buf.Len()) != want {
				t.Fatalf("%v: %d bytes, want %d", typ, buf.Len(), want)
			}
			mean, sd, pos := moments(ggmlbackend.ConvertToF32(buf.Bytes(), uint32(typ), n))
			if math.Abs(sd/std-1) > 0.02 || math.Abs(mean) > 0.01*std || math.Abs(pos-0.5) > 0.01 {
				t.Errorf("%v, std %g: dequantized mean %g, std %g, %.3f positive", typ, std, mean, sd, pos)
			}
		}
	}
	var buf bytes.Buffer
	if _, err := writeDirect(&buf, fsggml.TensorTypeQ4_K, 100, 1, rand.New(rand.NewPCG(1, 2))); err == nil {
		t.Error("100 values written as Q4_K blocks")
	}
}

// moments returns the mean and standard deviation of f, and the fraction
// of its nonzero values that are positive.
func moments(f []float32) (mean, sd, pos float64) {
	var s, s2 float64
	var np, nn int
	for _, v := range f {
		s += float64(v)
		s2 += float64(v) * float64(v)
		switch {
		case v > 0:
			np++
		case v < 0:
			nn++
		}
	}
	n := float64(len(f))
	mean = s / n
	return mean, math.Sqrt(s2/n - mean*mean), float64(np) / float64(np+nn)
}

// TestSynthQuantizedFiles: directly quantized files load and generate,
// the same tokens for the same seed and others for another seed, and their
// tensors, dequantized by ggml, have the std the float path draws with.
func TestSynthQuantizedFiles(t *testing.T) {
	for _, c := range []struct {
		arch, size, typ string
		tensors         map[string]float64 // name -> intended std
	}{
		{"qwen3", "tiny", "q8_0", map[string]float64{"token_embd.weight": 0.5, "blk.0.ffn_up.weight": 1 / 8.0, "blk.1.ffn_down.weight": 1 / math.Sqrt(128)}},
		{"llama", "small", "q4_k", map[string]float64{"token_embd.weight": 0.5, "output.weight": 1 / 16.0, "blk.2.attn_q.weight": 1 / 16.0, "blk.0.ffn_down.weight": 1 / math.Sqrt(768)}},
	} {
		gen := func(p string) []int32 {
			m := loadT(t, p, Options{Slots: 1, Context: 64})
			defer m.Close()
			res, err := m.Generate(context.Background(), Request{Prompt: "The swarm", MaxTokens: 8}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return res.Tokens
		}
		a := synthFile(t, c.arch, c.size, c.typ)
		b := filepath.Join(t.TempDir(), "seed2.gguf")
		if err := Synth(context.Background(), b, SynthSpec{Arch: c.arch, Size: c.size, Type: c.typ, Seed: 2}); err != nil {
			t.Fatal(err)
		}
		ta, ta2, tb := gen(a), gen(a), gen(b)
		if !slices.Equal(ta, ta2) || slices.Equal(ta, tb) {
			t.Errorf("%v: seed 1 gave %v then %v, seed 2 %v", c, ta, ta2, tb)
		}
		if len(ta) == 0 || len(slices.Compact(slices.Clone(ta))) < 2 {
			t.Errorf("%v: seed 1 gave %v: want varied tokens", c, ta)
		}
		g, err := shards.ReadGGUFFile(a)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(a)
		if err != nil {
			t.Fatal(err)
		}
		for name, std := range c.tensors {
			ti, ok := g.Tensor(name)
			if !ok {
				t.Fatalf("%v: no %s", c, name)
			}
			data := make([]byte, ti.Size)
			if _, err := f.ReadAt(data, g.DataOffset+int64(ti.Offset)); err != nil {
				t.Fatal(err)
			}
			n := uint64(1)
			for _, d := range ti.Dims {
				n *= d
			}
			mean, sd, _ := moments(ggmlbackend.ConvertToF32(data, uint32(ti.Type), n))
			if math.Abs(sd/std-1) > 0.05 || math.Abs(mean) > 0.05*std {
				t.Errorf("%v: %s (type %d) has mean %g, std %g, want 0, %g", c, name, ti.Type, mean, sd, std)
			}
		}
		f.Close()
	}
}

// TestSynthSizes: every arch has the test sizes and its real ones, and a
// size another arch has is refused with the sizes this one offers.
func TestSynthSizes(t *testing.T) {
	for arch, want := range map[string][]string{
		"qwen3":          {"tiny", "small", "0.6b", "1.7b", "4b", "8b"},
		"qwen2":          {"tiny", "small", "0.6b", "1.5b", "7b"},
		"llama":          {"tiny", "small", "0.6b", "1b", "8b", "70b"},
		"gemma3":         {"tiny", "small", "1b", "4b"},
		"mistral3":       {"tiny", "small", "3b"},
		"lfm2":           {"tiny", "small"},
		"lfm2moe":        {"tiny", "small"},
		"qwen3moe":       {"tiny", "small", "30b"},
		"gptoss":         {"tiny", "small", "20b"},
		"gpt-oss":        {"tiny", "small", "20b"},
		"gemma2":         {"tiny", "small", "2b", "9b"},
		"olmo3":          {"tiny", "small", "7b"},
		"deepseek2":      {"tiny", "small"},
		"glm4moelite":    {"tiny", "small"},
		"llama4":         {"tiny", "small", "109b"},
		"qwen3next":      {"tiny", "small", "80b"},
		"nemotron_h":     {"tiny", "small", "8b"},
		"nemotron_h_moe": {"tiny", "small"},
		"gemma3n":        {"tiny", "small"},
		"gpt2":           nil,
	} {
		if got := SynthSizesFor(arch); !slices.Equal(got, want) {
			t.Errorf("%s: sizes %v, want %v", arch, got, want)
		}
	}
	p := filepath.Join(t.TempDir(), "x.gguf")
	for _, c := range []struct{ arch, size, want string }{
		{"qwen2", "8b", `synth size "8b" for qwen2 (tiny | small | 0.6b | 1.5b | 7b)`},
		{"llama", "1.7b", `synth size "1.7b" for llama (tiny | small | 0.6b | 1b | 8b | 70b)`},
		{"qwen3", "70b", `synth size "70b" for qwen3`},
	} {
		err := Synth(context.Background(), p, SynthSpec{Arch: c.arch, Size: c.size, Type: "q4_k"})
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v, want %q", c.arch, c.size, err, c.want)
		}
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("a refused synth left a file: %v", err)
	}
}

// TestSynthTying: a tied shape has no output.weight (the head is
// token_embd), an untied one has its own, whatever the arch (Llama-3.2-1B
// is tied, Qwen3-8B is not); rope_freqs comes with the shape, and either
// way the model loads and generates.
func TestSynthTying(t *testing.T) {
	for _, c := range []struct {
		arch            string
		tied, ropeFreqs bool
	}{
		{"llama", true, true},
		{"llama", false, false},
		{"qwen3", false, false},
		{"qwen2", false, false},
	} {
		s := synthShapes[c.arch]["tiny"]
		s.tied, s.ropeFreqs = c.tied, c.ropeFreqs
		p := filepath.Join(t.TempDir(), "m.gguf")
		if err := synthShaped(context.Background(), p, SynthSpec{Arch: c.arch, Size: "tiny", Type: "q8_0", Seed: 1}, s); err != nil {
			t.Fatal(err)
		}
		g, err := shards.ReadGGUFFile(p)
		if err != nil {
			t.Fatal(err)
		}
		_, out := g.Tensor("output.weight")
		_, rope := g.Tensor("rope_freqs.weight")
		if out == c.tied || rope != c.ropeFreqs {
			t.Errorf("%+v: output.weight %v, rope_freqs %v", c, out, rope)
		}
		m := loadT(t, p, Options{Slots: 1, Context: 64})
		res, err := m.Generate(context.Background(), Request{Prompt: "The swarm", MaxTokens: 4}, nil)
		if err != nil || len(res.Tokens) == 0 {
			t.Errorf("%+v: generated %v, %v", c, res.Tokens, err)
		}
		m.Close()
	}
}

// TestSynthShapeParams: the dense real shapes have their models'
// published parameter counts (embeddings, attention, feed-forward and
// norms), so a benchmark on one costs what the real model costs.
func TestSynthShapeParams(t *testing.T) {
	for _, c := range []struct {
		arch, size string
		want       float64 // the model card's count
	}{
		{"llama", "8b", 8.030e9},  // Llama-3-8B: 8,030,261,248
		{"llama", "70b", 70.55e9}, // Llama-3-70B: 70,553,706,496
		{"qwen2", "7b", 7.62e9},   // Qwen2.5-7B: 7.61B (and the q/k/v biases)
	} {
		s := synthShapes[c.arch][c.size]
		q, kv := s.heads*s.headDim, s.kvHeads*s.headDim
		layer := s.hidden*q + 2*s.hidden*kv + q*s.hidden + 3*s.hidden*s.ffn + 2*s.hidden
		n := s.layers*layer + s.vocab*s.hidden + s.hidden
		if !s.tied {
			n += s.vocab * s.hidden
		}
		if got := float64(n); math.Abs(got/c.want-1) > 0.002 {
			t.Errorf("%s %s: %.4g parameters, want %.4g", c.arch, c.size, got, c.want)
		}
	}
}

// TestSynthGivenWeights: weights given by name are the file's (f32 exactly,
// q8_0 within half a quantization step of its block), the others stay
// random; given weights that do not fit the shape are refused, naming them.
func TestSynthGivenWeights(t *testing.T) {
	const name = "blk.1.ffn_up.weight" // llama tiny: 64 x 128
	want := make([]float32, 64*128)
	for i := range want {
		want[i] = float32(math.Sin(float64(i))) * float32(1+i%5)
	}
	read := func(p, tensor string) []float32 {
		g, err := shards.ReadGGUFFile(p)
		if err != nil {
			t.Fatal(err)
		}
		ti, ok := g.Tensor(tensor)
		if !ok {
			t.Fatalf("%s: no %s", p, tensor)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		data := make([]byte, ti.Size)
		if _, err := f.ReadAt(data, g.DataOffset+int64(ti.Offset)); err != nil {
			t.Fatal(err)
		}
		if uint32(ti.Type) == uint32(fsggml.TensorTypeF32) {
			out := make([]float32, len(data)/4)
			for i := range out {
				out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
			}
			return out
		}
		return ggmlbackend.ConvertToF32(data, uint32(ti.Type), ti.Dims[0]*ti.Dims[1])
	}
	for _, typ := range []string{"f32", "q8_0"} {
		p := filepath.Join(t.TempDir(), typ+".gguf")
		if err := Synth(context.Background(), p, SynthSpec{Arch: "llama", Size: "tiny", Type: typ, Weights: map[string][]float32{name: want}}); err != nil {
			t.Fatal(err)
		}
		got := read(p, name)
		for b := 0; b < len(want); b += 32 {
			amax := float32(0)
			for _, x := range want[b : b+32] {
				amax = max(amax, float32(math.Abs(float64(x))))
			}
			tol := float32(0)
			if typ == "q8_0" {
				tol = amax/127/2 + 1e-3*amax // half a step, and d's rounding to f16
			}
			for i := b; i < b+32; i++ {
				if d := got[i] - want[i]; d > tol || d < -tol {
					t.Fatalf("%s: value %d is %g, given %g", typ, i, got[i], want[i])
				}
			}
		}
		if other := read(p, "blk.1.ffn_gate.weight"); slices.Equal(other[:8], got[:8]) {
			t.Fatalf("%s: another tensor took the given weights", typ)
		}
	}
	for _, c := range []struct {
		typ     string
		weights map[string][]float32
		naming  string
	}{
		{"f32", map[string][]float32{name: want[:100]}, name},
		{"f32", map[string][]float32{"blk.9.ffn_up.weight": want}, "blk.9.ffn_up.weight"},
		{"q4_k", map[string][]float32{name: want}, "q4_k"},
	} {
		err := Synth(context.Background(), filepath.Join(t.TempDir(), "bad.gguf"), SynthSpec{Arch: "llama", Size: "tiny", Type: c.typ, Weights: c.weights})
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), c.naming) {
			t.Errorf("%s %v: %v, want ErrBadInput naming %s", c.typ, slices.Collect(maps.Keys(c.weights)), err, c.naming)
		}
	}
}
