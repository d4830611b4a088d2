package shards_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/shards/hubtest"
)

// BenchmarkHubDownload: a 64 MiB pull over loopback from the test hub,
// through its redirect, written to disk and checked against its sha256.
// The figure is the pull's own cost (HTTP, the copy, the hash, fsync-less
// writes), the ceiling a fast link leaves it.
func BenchmarkHubDownload(b *testing.B) {
	data := make([]byte, 64<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	hub := hubtest.New(b)
	hub.Add("o/big", "big-Q8_0.gguf", data, false)
	h := &shards.Hub{Endpoint: hub.URL}
	ref := shards.HubRef{Repo: "o/big", Quant: "Q8_0"}
	files, err := h.Files(context.Background(), ref)
	if err != nil {
		b.Fatal(err)
	}
	f, err := shards.PickFile(files, ref)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		dst := filepath.Join(dir, "big.gguf")
		if err := h.Download(context.Background(), ref, f, dst, nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.Remove(dst)
		b.StartTimer()
	}
}
