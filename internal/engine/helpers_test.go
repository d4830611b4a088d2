package engine

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

var (
	testDir   string
	synthMu   sync.Mutex
	synthDone = map[string]string{}
)

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "engine-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testDir = d
	// ollama logs model loads at info level through the default logger
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := setupVulkan(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// synthFile returns a synthetic model file, written once per test binary.
func synthFile(t testing.TB, arch, size, typ string) string {
	t.Helper()
	synthMu.Lock()
	defer synthMu.Unlock()
	key := arch + "-" + size + "-" + typ
	if p, ok := synthDone[key]; ok {
		return p
	}
	p := filepath.Join(testDir, key+".gguf")
	if err := Synth(context.Background(), p, SynthSpec{Arch: arch, Size: size, Type: typ, Seed: 1}); err != nil {
		t.Fatalf("synth %s: %v", key, err)
	}
	synthDone[key] = p
	return p
}

func loadT(t testing.TB, path string, opts Options) *Model {
	t.Helper()
	if opts.Threads == 0 {
		opts.Threads = 1
	}
	m, err := Load(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}
