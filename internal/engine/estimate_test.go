package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEstimateMatchesLoad: what Estimate reads from the header is what
// Load then holds, for whole models and slices, f32 and quantized, dense
// and a mixture of experts (every expert is held, not only those a token
// runs).
func TestEstimateMatchesLoad(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ arch, typ string }{{"qwen3", "f32"}, {"qwen3", "q8_0"}, {"qwen3moe", "f32"}, {"qwen3moe", "q8_0"},
		{"llama4", "f32"}, {"llama4", "q8_0"}, {"lfm2", "q8_0"}, {"lfm2moe", "f32"}, {"lfm2moe", "q8_0"},
		{"qwen3next", "f32"}, {"qwen3next", "q8_0"}, {"gemma3n", "f32"}, {"gemma3n", "q8_0"},
		{"nemotron_h", "f32"}, {"nemotron_h", "q8_0"},
		{"nemotron_h_moe", "f32"}, {"nemotron_h_moe", "q8_0"}} {
		typ := c.arch + "-" + c.typ
		p := filepath.Join(dir, typ+".gguf")
		if err := Synth(context.Background(), p, SynthSpec{Arch: c.arch, Size: "tiny", Type: c.typ, Seed: 3}); err != nil {
			t.Fatal(err)
		}
		opts := Options{Threads: 1, Slots: 2, Context: 300}
		est, _, err := Estimate(p, opts)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Load(context.Background(), p, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := m.Memory()
		m.Close()
		if est.KVPerSession != got.KVPerSession || est.KVPerSession == 0 {
			t.Errorf("%s: estimated KV %d per session, loaded %d", typ, est.KVPerSession, got.KVPerSession)
		}
		if d := est.Weights - got.Weights; est.Weights == 0 || d*50 > got.Weights || -d*50 > got.Weights {
			t.Errorf("%s: estimated weights %d bytes, loaded %d: more than 2%% apart", typ, est.Weights, got.Weights)
		}
		if m := synthExperts[c.arch]["tiny"]; m.experts > 0 {
			s := synthShapes[c.arch]["tiny"]
			moeLayers, projs := s.layers, 3
			switch c.arch {
			case "llama4": // every moeStep-th layer
				moeLayers /= llama4Layouts["tiny"].moeStep
			case "lfm2moe": // its leading layers are dense
				moeLayers -= lfm2DenseLeading["tiny"]
			case "nemotron_h_moe": // its E layers, experts of up and down only
				moeLayers, projs = strings.Count(nemotronhLayoutOf(c.arch, "tiny").pattern, "E"), 2
			}
			bytesPer := map[string]int64{"f32": 4, "q8_0": 1}[c.typ] // q8_0: a little over one byte a weight
			if experts := int64(moeLayers*projs*s.hidden*m.expertFFN*m.experts) * bytesPer; est.Weights < experts {
				t.Errorf("%s: estimated weights %d bytes, fewer than its experts' %d", typ, est.Weights, experts)
			}
		}
	}
	if _, _, err := Estimate(filepath.Join(dir, "none.gguf"), Options{}); !os.IsNotExist(unwrapFile(err)) {
		t.Errorf("missing file: %v", err)
	}
}

func unwrapFile(err error) error {
	if fe, ok := err.(*FileError); ok {
		return fe.Err
	}
	return err
}

// TestEstimateLatentAttention: a model with absorbed latent attention
// keeps one head per position, the compressed key with its rotary part
// and the compressed key as the value, whatever the header's head count
// and lengths say of a query head (glm4moelite's do; deepseek2's say the
// cache's).
func TestEstimateLatentAttention(t *testing.T) {
	for _, arch := range []string{"glm4moelite", "deepseek2"} {
		p := synthFile(t, arch, "tiny", "f32")
		mem, opts, err := Estimate(p, Options{Context: 300})
		if err != nil {
			t.Fatal(err)
		}
		d, s := synthMLA["tiny"], synthShapes[arch]["tiny"]
		cells := int64((opts.Context + 255) / 256 * 256)
		if want := int64(s.layers) * cells * int64(d.kvLora+d.rope+d.kvLora) * 2; mem.KVPerSession != want {
			t.Errorf("%s: KV %d bytes a session, want %d (one head of %d+%d and %d f16 values a position)", arch, mem.KVPerSession, want, d.kvLora, d.rope, d.kvLora)
		}
	}
}
