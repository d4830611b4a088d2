package engine

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/shards"
)

// rewriteHeader copies the GGUF at from to to with its metadata changed by
// edit (the tensors' bytes as they were; edit may drop tensors).
func rewriteHeader(t *testing.T, from, to string, edit func(g *shards.GGUF)) {
	t.Helper()
	g, err := shards.ReadGGUFFile(from)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	offsets := map[string]int64{}
	for _, ti := range g.Tensors {
		offsets[ti.Name] = g.DataOffset + int64(ti.Offset)
	}
	edit(g)
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	err = shards.WriteGGUF(dst, g, func(i int, w io.Writer) error {
		_, err := io.Copy(w, io.NewSectionReader(src, offsets[g.Tensors[i].Name], int64(g.Tensors[i].Size)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setUint32 sets (or adds) a uint32 metadata value.
func setUint32(g *shards.GGUF, key string, v uint32) {
	for i := range g.KVs {
		if g.KVs[i].Key == key {
			g.KVs[i] = shards.KV{Key: key, Type: shards.TypeUint32, Value: v}
			return
		}
	}
	g.KVs = append(g.KVs, shards.KV{Key: key, Type: shards.TypeUint32, Value: v})
}

// TestEstimateHostileHeader: a header whose attention shape is not its
// tensors' (head counts and sizes near 2^32, which multiply past an int64,
// or twice the KV heads the projections have) is refused as malformed by
// Estimate and by Load, naming the tensor, instead of wrapping to a
// negative KV cache a memory budget lets through, or loading and then
// aborting the process (GGML_ASSERT) at the first compute.
func TestEstimateHostileHeader(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.gguf")
	if err := Synth(context.Background(), base, SynthSpec{Arch: "qwen3", Size: "tiny", Type: "q8_0", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	opts := Options{Threads: 1, Slots: 4, Context: 4096}
	for name, edit := range map[string]func(g *shards.GGUF){
		"huge": func(g *shards.GGUF) {
			setUint32(g, "qwen3.attention.head_count_kv", 1<<32-1)
			setUint32(g, "qwen3.attention.key_length", 1<<32-1)
			setUint32(g, "qwen3.attention.value_length", 1<<32-1)
		},
		"doubled": func(g *shards.GGUF) {
			setUint32(g, "qwen3.attention.head_count_kv", uint32(2*g.Uint("qwen3.attention.head_count_kv")))
		},
	} {
		hostile := filepath.Join(dir, name+".gguf")
		rewriteHeader(t, base, hostile, edit)
		mem, _, err := Estimate(hostile, opts)
		if !errors.Is(err, ErrNotGGUF) || !strings.Contains(err.Error(), "attn_k.weight") {
			t.Errorf("%s: Estimate %+v, %v: want a malformed-file error naming attn_k", name, mem, err)
		}
		if m, err := Load(context.Background(), hostile, Options{Threads: 1, Slots: 1, Context: 256}); !errors.Is(err, ErrNotGGUF) {
			if m != nil {
				m.Close()
			}
			t.Errorf("%s: Load: %v, want it refused", name, err)
		}
	}
	// The honest file still estimates.
	if mem, _, err := Estimate(base, opts); err != nil || mem.KVPerSession <= 0 || mem.Weights <= 0 {
		t.Fatalf("base: %+v, %v", mem, err)
	}
	if _, ok := mulBytes(1<<20, 1<<20, 1<<21, 4); ok {
		t.Error("mulBytes: 2^61 x 4 counted")
	}
}
