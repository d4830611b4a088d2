package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestEstimateMatchesLoad: what Estimate reads from the header is what
// Load then holds, for whole models and slices, f32 and quantized.
func TestEstimateMatchesLoad(t *testing.T) {
	dir := t.TempDir()
	for _, typ := range []string{"f32", "q8_0"} {
		p := filepath.Join(dir, typ+".gguf")
		if err := Synth(context.Background(), p, SynthSpec{Arch: "qwen3", Size: "tiny", Type: typ, Seed: 3}); err != nil {
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
