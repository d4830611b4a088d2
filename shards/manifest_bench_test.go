package shards

import (
	"path/filepath"
	"testing"
)

// BenchmarkManifest compares building a model's manifest (one read of the
// file, hashing it whole and each tensor) with hashing the file alone (the
// file CID, what registering a model cost before manifests), and times
// verifying a one-layer slice and a header against the manifest.
// go test -run XXX -bench Manifest -benchtime 5x ./shards
func BenchmarkManifest(b *testing.B) {
	dir := b.TempDir()
	full := filepath.Join(dir, "big.gguf")
	tm := testModel{arch: "qwen3", layers: 24, hidden: 2048, tied: true}
	tm.write(b, full)
	m, _, root, err := BuildManifest(full)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("model: %d MB, %d tensors", m.Size>>20, len(m.Tensors))
	b.Run("file-cid", func(b *testing.B) {
		b.SetBytes(m.Size)
		for b.Loop() {
			if _, err := FileCID(full); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("manifest", func(b *testing.B) {
		b.SetBytes(m.Size)
		for b.Loop() {
			if _, _, _, err := BuildManifest(full); err != nil {
				b.Fatal(err)
			}
		}
	})
	one := filepath.Join(dir, "one.gguf")
	if _, err := slice(full, one, 5, 6, func(*GGUF, ModelInfo) (string, []byte, error) { return root.String(), nil, nil }); err != nil {
		b.Fatal(err)
	}
	b.Run("verify-one-layer", func(b *testing.B) {
		for b.Loop() {
			if err := m.VerifySlice(one, root.String(), 5, 6); err != nil {
				b.Fatal(err)
			}
		}
	})
}
