package node_test

import (
	"slices"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestPS: GET /v1/swarm/ps lists a model file serving two roles once,
// with both, and a shard; the KV cache the answered question allocated
// shows, within the slots' bound; the memory budget's use is their sum.
func TestPS(t *testing.T) {
	model := q8Model(t)
	cfg := nodetest.Config(t.TempDir())
	cfg.Engine = node.EngineConfig{Threads: 1, Context: 256, Slots: 2}
	cfg.Roles = map[string]string{moa.Reasoner: model, moa.Writer: model}
	cfg.Shards = []string{tinyModel(t) + ":0-2"}
	p := nodetest.Start(t, cfg)
	nodetest.Eventually(t, 10*time.Second, "the peer's view holds its own roles", func() bool {
		return len(p.Swarm().View().ByRole(moa.Writer)) == 1
	})
	c := client.New(p.APIAddr(), "")
	if _, err := c.Query(t.Context(), client.QueryRequest{Query: "hi", Mode: moa.Writer, MaxTokens: 2}, nil); err != nil {
		t.Fatal(err)
	}
	ps, err := c.PS(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var roles, shards []client.Loaded
	for _, m := range ps.Models {
		switch m.Kind {
		case "role":
			roles = append(roles, m)
		case "shard":
			shards = append(shards, m)
		}
	}
	if len(roles) != 1 || !slices.Equal(roles[0].Roles, []string{moa.Reasoner, moa.Writer}) || roles[0].Slots != 2 ||
		roles[0].KVBytes <= 0 || roles[0].KVBytes > 2*roles[0].KVPerSessionBytes || roles[0].Context != 256 || roles[0].TokPerSec <= 0 {
		t.Fatalf("roles %+v: want one model serving reasoner and writer, 2 slots, a KV cache allocated", roles)
	}
	if len(shards) != 1 || shards[0].Start != 0 || shards[0].End != 2 || shards[0].WeightsBytes <= 0 || shards[0].MsPerLayer <= 0 {
		t.Fatalf("shards %+v: want layers [0,2)", shards)
	}
	if ps.Memory.UsedBytes <= roles[0].WeightsBytes+shards[0].WeightsBytes {
		t.Fatalf("memory %+v: want more than the weights (the KV caches of every slot)", ps.Memory)
	}
}

// TestPSReferences: a challenge reference (a layer loaded to check another
// peer's claim) is not a model the user loaded: ps and the event feed's
// snapshot list it apart, under references, not among the models.
func TestPSReferences(t *testing.T) {
	model := tinyModel(t)
	cfg := nodetest.Config(t.TempDir())
	cfg.Engine = node.EngineConfig{Threads: 1, Context: 256}
	cfg.Shards = []string{model + ":0-2"}
	p := nodetest.Start(t, cfg)
	<-p.StartLoadsDoneForTest()
	if err := p.LoadReferenceForTest(t.Context(), model, "bafkreference", 3); err != nil {
		t.Fatal(err)
	}
	c := client.New(p.APIAddr(), "")
	ps, err := c.PS(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	snap, err := p.EventsSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]client.PS{"ps": ps, "events snapshot": snap.PS} {
		if len(got.Models) != 1 || got.Models[0].Kind != "shard" {
			t.Errorf("%s models %+v: want the shard alone", name, got.Models)
		}
		if len(got.References) != 1 || got.References[0].Kind != "reference" || got.References[0].ModelCID != "bafkreference" {
			t.Errorf("%s references %+v: want the one loaded", name, got.References)
		}
	}
}
