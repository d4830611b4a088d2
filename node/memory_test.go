package node_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/api"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

func TestByteSize(t *testing.T) {
	for in, want := range map[string]node.ByteSize{"1.5GiB": 3 << 29, "800MB": 800e6, "4096B": 4096, " 2 KiB": 2048, "0.5TiB": 1 << 39} {
		got, err := node.ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "12", "GiB", "-1GiB", "1.5XB", "1e400GiB", "NaNGiB"} {
		if _, err := node.ParseByteSize(in); err == nil || !strings.Contains(err.Error(), "want a number with a unit") {
			t.Errorf("ParseByteSize(%q): %v, want an error asking for a unit", in, err)
		}
	}
	var c node.Config
	if err := json.Unmarshal([]byte(`{"max_memory": 3000000}`), &c); err == nil || !strings.Contains(err.Error(), "with a unit") {
		t.Errorf("a bare number: %v", err)
	}
	if err := json.Unmarshal([]byte(`{"max_memory": "3GiB"}`), &c); err != nil || c.MaxMemory != 3<<30 || c.MaxMemory.String() != "3GiB" {
		t.Errorf("3GiB: %v %d %s", err, c.MaxMemory, c.MaxMemory)
	}
	if b, _ := json.Marshal(c); !strings.Contains(string(b), `"max_memory":"3221225472B"`) {
		t.Errorf("marshals as %s", b)
	}
	if err := (node.Config{DataDir: t.TempDir(), MaxMemory: 1000}).Validate(); err == nil || !strings.Contains(err.Error(), "max_memory") {
		t.Errorf("a 1000-byte budget: %v", err)
	}
}

// TestMemoryBudget: roles are counted against max_memory before they are
// loaded (weights and the KV caches of every slot); one that does not fit
// stops the peer with an error naming it, its needs and what was left;
// with room for both, the status shows what they take; without
// max_memory, the budget is half the device's RAM.
func TestMemoryBudget(t *testing.T) {
	f32, q8 := tinyModel(t), q8Model(t)
	opts := engine.Options{Threads: 1, Context: 256}
	need := func(path string) int64 {
		m, eff, err := engine.Estimate(path, opts)
		if err != nil {
			t.Fatal(err)
		}
		return m.Weights + int64(eff.Slots)*m.KVPerSession
	}
	both := need(f32) + need(q8)
	cfg := func(budget int64) node.Config {
		c := nodetest.Config(t.TempDir())
		c.Engine = node.EngineConfig{Threads: 1, Context: 256}
		c.Roles = map[string]string{moa.Reasoner: f32, moa.Writer: q8}
		c.MaxMemory = node.ByteSize(budget)
		return c
	}
	n := &node.Node{Config: cfg(both - 1)}
	n.API = api.New(n, nil)
	err := n.Start(context.Background())
	n.Close()
	if err == nil || !strings.Contains(err.Error(), "does not fit in this peer's memory budget: role writer") ||
		!strings.Contains(err.Error(), "4 slots of 256 tokens") || !strings.Contains(err.Error(), "(max_memory)") {
		t.Fatalf("start with room for one role: %v, want the writer refused, naming its needs", err)
	}

	p := nodetest.Start(t, cfg(both))
	st, err := p.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Memory.MaxBytes != both || st.Memory.UsedBytes != both {
		t.Fatalf("memory %+v, want %d of %d used", st.Memory, both, both)
	}
	nodetest.Eventually(t, 5*time.Second, "the peer's own record lists both roles", func() bool {
		for _, q := range p.Swarm().View().Peers() {
			if q.Self && q.ID == p.ID() {
				return len(q.Cap.Roles) == 2
			}
		}
		return false
	})

	d := nodetest.Start(t, nodetest.Config(t.TempDir()))
	if st, _ := d.Status(); st.Memory.MaxBytes <= 0 || !strings.Contains(st.Memory.Source, "half of this device's") {
		t.Fatalf("default budget %+v, want half the RAM", st.Memory)
	}
}

// TestReferenceCountsAgainstBudget: the one-layer slices a peer loads to
// check other peers' claims count against max_memory. With no room for
// one, the claims stay unchecked (the peers are used, not proven, not
// banned); with room, they are proven.
func TestReferenceCountsAgainstBudget(t *testing.T) {
	model := filepath.Join(t.TempDir(), "small-q8_0.gguf") // a layer of it takes more than 1 MiB
	if err := engine.Synth(context.Background(), model, engine.SynthSpec{Arch: "qwen3", Size: "small", Type: "q8_0", Seed: 5}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		budget node.ByteSize
		proven bool
	}{{1 << 20, false}, {1 << 30, true}} {
		ocfg := nodetest.Config(t.TempDir())
		ocfg.MaxMemory = c.budget
		origin := nodetest.Start(t, ocfg)
		var ids []peer.ID
		for _, r := range []string{":0-4", ":4-8"} {
			cfg := nodetest.Config(t.TempDir())
			cfg.Bootstrap = []string{origin.Addr(t)}
			cfg.Engine = node.EngineConfig{Threads: 1, Context: 256}
			cfg.Shards = []string{model + r}
			ids = append(ids, nodetest.Start(t, cfg).ID())
		}
		cl := client.New(origin.APIAddr(), "")
		// Shard files load in the background: alive first, then announced.
		nodetest.Eventually(t, 15*time.Second, "origin sees both stages with their layers", func() bool {
			sh, err := cl.Shards(t.Context())
			return nodetest.SeesAlive(origin, ids...) && err == nil && len(sh.Models) == 1 && sh.Models[0].Covered
		})
		if _, err := cl.Query(t.Context(), client.QueryRequest{Query: "Tell me about the swarm.", Mode: "pipeline", MaxTokens: 4}, nil); err != nil {
			t.Fatalf("budget %s: %v", c.budget, err)
		}
		st, _ := origin.Status()
		for _, id := range ids {
			banned, _ := origin.Trust().Banned(id)
			if banned || origin.Trust().Proven(id) != c.proven {
				t.Fatalf("budget %s: stage banned %v, proven %v; want proven %v (memory %+v)", c.budget, banned,
					origin.Trust().Proven(id), c.proven, st.Memory)
			}
		}
		if st.Memory.UsedBytes > st.Memory.MaxBytes || (c.proven && st.Memory.UsedBytes == 0) {
			t.Fatalf("budget %s: memory %+v", c.budget, st.Memory)
		}
	}
}
