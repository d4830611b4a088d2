package engine

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/shards"
)

// TestLlama4BadHeader: a llama4 header ollama's model would divide by
// zero (a layer step of 0), run no expert of (expert_used_count 0 or past
// expert_count) or reshape past (ggml aborts: the head size ollama reads,
// attention.head_dim, 128 when absent, not the projections') is refused
// at load and by Estimate as malformed, naming the key.
func TestLlama4BadHeader(t *testing.T) {
	full := synthFile(t, "llama4", "tiny", "f32")
	for _, c := range []struct {
		name, key string
		edit      func(g *shards.GGUF)
	}{
		{"moe step 0", "interleave_moe_layer_step", func(g *shards.GGUF) { setUint32(g, "llama4.interleave_moe_layer_step", 0) }},
		{"no rope 0", "no_rope_interval", func(g *shards.GGUF) { setUint32(g, "llama4.no_rope_interval", 0) }},
		{"no experts used", "expert_used_count", func(g *shards.GGUF) { setUint32(g, "llama4.expert_used_count", 0) }},
		{"more used than experts", "expert_used_count", func(g *shards.GGUF) { setUint32(g, "llama4.expert_used_count", 5) }},
		{"head dim absent", "attention.head_dim", func(g *shards.GGUF) {
			g.KVs = slices.DeleteFunc(g.KVs, func(kv shards.KV) bool { return kv.Key == "llama4.attention.head_dim" })
		}},
		{"head dim wrong", "attention.head_dim", func(g *shards.GGUF) { setUint32(g, "llama4.attention.head_dim", 8) }},
	} {
		p := filepath.Join(t.TempDir(), "bad.gguf")
		rewriteHeader(t, full, p, c.edit)
		_, err := Load(context.Background(), p, Options{Threads: 1})
		if !errors.Is(err, ErrNotGGUF) || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s: Load: %v, want ErrNotGGUF naming %s", c.name, err, c.key)
		}
		if _, _, err := Estimate(p, Options{}); !errors.Is(err, ErrNotGGUF) {
			t.Errorf("%s: Estimate: %v, want ErrNotGGUF", c.name, err)
		}
	}
}

// TestLlama4ScoutShape: the 109b shape has Scout's parameters as Meta's
// model card counts them: 17B active per token (attention, the shared
// expert and one routed expert per layer, the embedding and the head) and
// 109B in all with the vision encoder, which the text model leaves out
// (about 108B here; the card gives no text-only count).
func TestLlama4ScoutShape(t *testing.T) {
	s, m, lay := synthShapes["llama4"]["109b"], synthExperts["llama4"]["109b"], llama4Layouts["109b"]
	q, kv := s.heads*s.headDim, s.kvHeads*s.headDim
	attn := 2*s.hidden*q + 2*s.hidden*kv + 2*s.hidden
	expert := 3 * s.hidden * m.expertFFN
	var active, total float64
	for l := range s.layers {
		if (l+1)%lay.moeStep != 0 {
			t.Fatalf("layer %d dense: every Scout layer is a mixture of experts", l)
		}
		active += float64(attn + s.hidden*m.experts + expert*(1+m.used))
		total += float64(attn + s.hidden*m.experts + expert*(1+m.experts))
	}
	embed := float64(2 * s.vocab * s.hidden)
	active, total = active+embed, total+embed
	if active < 16.5e9 || active > 17.5e9 {
		t.Errorf("%.4g active parameters, want about 17B", active)
	}
	if total < 107e9 || total > 109e9 {
		t.Errorf("%.4g parameters, want about 108B (109B with vision)", total)
	}
	if m.used != 1 || m.experts != 16 || s.tied {
		t.Errorf("Scout: 16 experts, one per token, its own head; have %+v tied %v", m, s.tied)
	}
}
