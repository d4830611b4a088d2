package node_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
	"github.com/llmswarm/llmswarm/shards"
)

// TestSettleLayersVerified: to settle a dispute, an originator loads the
// disputed layers from weights checked on arrival against the model's
// manifest. From a holder sending a slice with one weight changed alone it
// loads nothing (the dispute stays undecided); once an honest holder is
// there it loads theirs, which verify, and removes the fetched slice when
// done. A range beyond max_memory is refused, naming the budget.
func TestSettleLayersVerified(t *testing.T) {
	full := tinyModel(t)
	_, _, root, err := shards.BuildManifest(full)
	if err != nil {
		t.Fatal(err)
	}
	const lo, hi = 2, 4
	liarCfg := nodetest.Config(t.TempDir())
	liarCfg.Shards = []string{full + ":2-4"}
	liarCfg.Engine = node.EngineConfig{Threads: 1}
	liar := nodetest.Start(t, liarCfg)
	boot := liar.Addr(t)
	cfg := nodetest.Config(t.TempDir())
	cfg.Bootstrap = []string{boot}
	cfg.Engine = node.EngineConfig{Threads: 1}
	origin := nodetest.Start(t, cfg)
	nodetest.Eventually(t, 30*time.Second, "origin sees the liar announce the layers", func() bool {
		return nodetest.SeesShards(origin, liar.ID())
	})
	// Announced, the liar changes one weight of the slice it sends.
	lst, err := shards.OpenStore(filepath.Join(liarCfg.DataDir, "models"))
	if err != nil {
		t.Fatal(err)
	}
	se, ok := lst.Slice(root.String(), lo, hi)
	if !ok {
		t.Fatal("the liar stores no slice of the layers")
	}
	raw, err := os.ReadFile(se.Path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-16] ^= 0x40
	if err := os.WriteFile(se.Path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := origin.SettleLayersForTest(t.Context(), root.String(), lo, hi); err == nil {
		t.Fatal("layers loaded from a holder of tampered weights alone")
	} else {
		t.Logf("from the liar alone: %v", err)
	}
	st, err := shards.OpenStore(filepath.Join(cfg.DataDir, "models"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Slice(root.String(), lo, hi); ok {
		t.Fatal("the tampered slice was stored")
	}

	honestCfg := nodetest.Config(t.TempDir())
	honestCfg.Bootstrap = []string{boot}
	honestCfg.Shards = []string{full + ":2-4"}
	honestCfg.Engine = node.EngineConfig{Threads: 1}
	honest := nodetest.Start(t, honestCfg)
	nodetest.Eventually(t, 30*time.Second, "origin sees the honest holder announce the layers", func() bool {
		return nodetest.SeesShards(origin, honest.ID())
	})
	path, release, err := origin.SettleLayersForTest(t.Context(), root.String(), lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	m, _, ok := st.Manifest(root.String())
	if !ok {
		t.Fatal("no manifest kept")
	}
	if err := m.VerifySlice(path, root.String(), lo, hi); err != nil {
		t.Fatalf("the layers loaded do not verify: %v", err)
	}
	t.Logf("settle: layers [%d,%d) fetched and loaded, %d bytes", lo, hi, fi.Size())
	release()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the slice fetched to settle is still stored: %v", err)
	}

	smallCfg := nodetest.Config(t.TempDir())
	smallCfg.Bootstrap = []string{boot}
	smallCfg.MaxMemory = 1 << 20
	smallCfg.Engine = node.EngineConfig{Threads: 1}
	small := nodetest.Start(t, smallCfg)
	nodetest.Eventually(t, 30*time.Second, "a small peer sees the honest holder", func() bool {
		return nodetest.SeesShards(small, honest.ID())
	})
	if _, _, err := small.SettleLayersForTest(t.Context(), root.String(), lo, hi); err == nil || !strings.Contains(err.Error(), "memory budget") {
		t.Errorf("beyond max_memory: %v, want the budget named", err)
	}
}
