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
