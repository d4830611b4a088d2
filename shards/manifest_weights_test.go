package shards

import (
	"path/filepath"
	"testing"
)

// TestManifestWeightsMatchSlices checks Weights against what Slice really
// writes: every slice [a,b) holds its layers, the shared tensors, the
// embedding when a is 0 and the head when b is the last layer.
func TestManifestWeightsMatchSlices(t *testing.T) {
	for _, tm := range []testModel{{"qwen3", 4, 64, false, false}, {"llama", 3, 64, true, true}} {
		full, m, _, root := buildManifest(t, tm)
		w := m.Weights()
		if len(w.Layers) != tm.layers || w.Embed == 0 || w.Head == 0 || w.EmbedRows != 4 {
			t.Fatalf("%s: weights %+v", tm.arch, w)
		}
		if tm.extra != (w.Shared > 0) {
			t.Fatalf("%s: shared bytes %d, model has rope_freqs %v", tm.arch, w.Shared, tm.extra)
		}
		if emb, _ := m.Tensor("token_embd.weight"); tm.tied && w.Head < emb.Size {
			t.Fatalf("%s: tied head counts %d bytes, less than the embedding's %d", tm.arch, w.Head, emb.Size)
		}
		dir := t.TempDir()
		for a := 0; a < tm.layers; a++ {
			for z := a + 1; z <= tm.layers; z++ {
				out := filepath.Join(dir, "s.gguf")
				mi, err := slice(full, out, a, z, func(*GGUF, ModelInfo) (string, []byte, error) { return root, nil, nil })
				if err != nil {
					t.Fatal(err)
				}
				want := w.Shared
				for l := a; l < z; l++ {
					want += w.Layers[l]
				}
				if a == 0 {
					want += w.Embed
				}
				if z == tm.layers {
					want += w.Head
				} else if a == 0 {
					want += 4 * uint64(tm.hidden) // the first stage's placeholder head
				}
				if a == 0 && z == tm.layers && tm.tied {
					// The whole model holds a tied embedding once in its
					// file; the engine loads it twice (see engine.Estimate),
					// which Head counts.
					want -= w.Embed
				}
				if uint64(mi.TensorBytes) != want {
					t.Fatalf("%s slice [%d,%d) holds %d tensor bytes, Weights says %d", tm.arch, a, z, mi.TensorBytes, want)
				}
			}
		}
	}
}
