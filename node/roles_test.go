package node_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestRolesAtRunTime: a role is added to a running peer through the API,
// announced and answered (by another peer's question too); replaced by
// another file; removed, after which it is no longer announced, questions
// find no agent, and its memory is given back. Bad requests are refused,
// naming the problem.
func TestRolesAtRunTime(t *testing.T) {
	f32, q8 := tinyModel(t), q8Model(t)
	cfg := nodetest.Config(t.TempDir())
	cfg.Engine = node.EngineConfig{Threads: 1, Context: 256}
	p := nodetest.Start(t, cfg)
	ocfg := nodetest.Config(t.TempDir())
	ocfg.Bootstrap = []string{p.Addr(t)}
	origin := nodetest.Start(t, ocfg)
	c, oc := client.New(p.APIAddr(), ""), client.New(origin.APIAddr(), "")

	r, err := c.AddRole(t.Context(), moa.Writer, q8)
	if err != nil || r.Role != moa.Writer || r.ModelCID == "" {
		t.Fatalf("add writer: %+v, %v", r, err)
	}
	nodetest.Eventually(t, 10*time.Second, "origin sees the new writer", func() bool {
		return len(origin.Swarm().View().ByRole(moa.Writer)) == 1
	})
	res, err := oc.Query(t.Context(), client.QueryRequest{Query: "hi", Mode: moa.Writer, MaxTokens: 3}, nil)
	if err != nil || res.AgentResponses[0].Peer != p.ID().String() {
		t.Fatalf("asked from another peer: %v %+v", err, res)
	}
	st, _ := c.Status(t.Context())
	used := st.Memory.UsedBytes
	if used <= 0 {
		t.Fatalf("memory %+v after adding a role", st.Memory)
	}

	// Replaced by another file: the new one answers.
	r2, err := c.AddRole(t.Context(), moa.Writer, f32)
	if err != nil || r2.ModelCID == r.ModelCID {
		t.Fatalf("replace writer: %+v, %v", r2, err)
	}
	ps, _ := c.PS(t.Context())
	if len(ps.Models) != 1 || ps.Models[0].Path != f32 {
		t.Fatalf("after the replacement: %+v", ps.Models)
	}

	if err := c.RemoveRole(t.Context(), moa.Writer); err != nil {
		t.Fatal(err)
	}
	nodetest.Eventually(t, 10*time.Second, "origin sees the writer gone", func() bool {
		return len(origin.Swarm().View().ByRole(moa.Writer)) == 0
	})
	if _, err := oc.Query(t.Context(), client.QueryRequest{Query: "hi", Mode: moa.Writer, MaxTokens: 3}, nil); err == nil {
		t.Fatal("a removed role answered")
	}
	nodetest.Eventually(t, 5*time.Second, "the memory given back", func() bool {
		st, _ := c.Status(t.Context())
		return st.Memory.UsedBytes == 0
	})

	var ae *client.APIError
	for _, bad := range []struct{ role, path, want string }{
		{"poet", q8, "unknown role"},
		{moa.Critic, "", "no model file"},
		{moa.Critic, "/no/such.gguf", "no such file"},
	} {
		if _, err := c.AddRole(t.Context(), bad.role, bad.path); !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("add %q %q: %v, want 400 naming %q", bad.role, bad.path, err, bad.want)
		}
	}
	if err := c.RemoveRole(t.Context(), moa.Critic); !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("remove a role not served: %v, want 404", err)
	}
}

// TestShardsAtRunTime: layers are added to a running peer through the
// API, announced, listed, and routed through; adding them again changes
// nothing; removed, they are no longer announced and their memory is
// given back. Bad requests are refused, naming the problem.
func TestShardsAtRunTime(t *testing.T) {
	model := q8Model(t)
	cfg := nodetest.Config(t.TempDir())
	cfg.Engine = node.EngineConfig{Threads: 1, Context: 256}
	p := nodetest.Start(t, cfg)
	c := client.New(p.APIAddr(), "")
	sh, err := c.AddShard(t.Context(), model+":0-4")
	if err != nil || sh.Start != 0 || sh.End != 4 || sh.ModelCID == "" {
		t.Fatalf("add shard: %+v, %v", sh, err)
	}
	again, err := c.AddShard(t.Context(), model+":0-4")
	if err != nil || again.ModelCID != sh.ModelCID {
		t.Fatalf("add it again: %+v, %v", again, err)
	}
	nodetest.Eventually(t, 10*time.Second, "the peer announces the layers", func() bool {
		return len(p.Swarm().View().HoldersOf(sh.ModelCID)) == 1
	})
	if _, err := c.Query(t.Context(), client.QueryRequest{Query: "hi", Mode: "pipeline", MaxTokens: 3}, nil); err != nil {
		t.Fatalf("pipeline through the added shard: %v", err)
	}
	ps, _ := c.PS(t.Context())
	if len(ps.Models) != 1 || ps.Models[0].Kind != "shard" || ps.Memory.UsedBytes == 0 {
		t.Fatalf("ps %+v", ps)
	}
	if err := c.RemoveShard(t.Context(), sh.ModelCID, 0, 4); err != nil {
		t.Fatal(err)
	}
	nodetest.Eventually(t, 10*time.Second, "the layers no longer announced, their memory given back", func() bool {
		st, _ := c.Status(t.Context())
		return len(p.Swarm().View().HoldersOf(sh.ModelCID)) == 0 && st.Memory.UsedBytes == 0
	})
	var ae *client.APIError
	for _, bad := range []struct{ spec, want string }{{"nonsense", "want PATH.gguf:A-B"}, {model + ":3-1", "layer range"}, {"/no/such.gguf:0-2", "no such file"}} {
		if _, err := c.AddShard(t.Context(), bad.spec); !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("add %q: %v, want 400 naming %q", bad.spec, err, bad.want)
		}
	}
	if err := c.RemoveShard(t.Context(), sh.ModelCID, 0, 4); !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("remove again: %v, want 404", err)
	}
}

// TestShardSpellings: a model's CID in another multibase spelling names
// the same model (the shard is served and announced under the canonical
// one); a name this peer knows from the shards it sees names the model
// too; anything else is refused, saying it is neither.
func TestShardSpellings(t *testing.T) {
	model := q8Model(t)
	cfg := nodetest.Config(t.TempDir())
	cfg.Engine = node.EngineConfig{Threads: 1, Context: 256}
	p := nodetest.Start(t, cfg)
	c := client.New(p.APIAddr(), "")
	sh, err := c.AddShard(t.Context(), model+":0-4")
	if err != nil {
		t.Fatalf("add shard: %+v, %v", sh, err)
	}
	nodetest.Eventually(t, 10*time.Second, "the peer announces the layers", func() bool {
		return len(p.Swarm().View().HoldersOf(sh.ModelCID)) == 1
	})
	// Upper case is the multibase base32upper spelling of the same CID.
	upper := strings.ToUpper(sh.ModelCID)
	for _, spec := range []string{upper + ":0-4" /* served already */, upper + ":1-2", sh.ModelName + ":2-3"} {
		got, err := c.AddShard(t.Context(), spec)
		if err != nil || got.ModelCID != sh.ModelCID {
			t.Errorf("add %s: %+v, %v; want layers of %s", spec, got, err, sh.ModelCID)
		}
	}
	var ae *client.APIError
	for _, bad := range []struct{ spec, want string }{
		{"notacid:0-1", `"notacid" is neither a CID nor the name of a model`},
		{"QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG:0-1", "neither a model root"},
	} {
		if _, err := c.AddShard(t.Context(), bad.spec); !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("add %q: %v, want 400 naming %q", bad.spec, err, bad.want)
		}
	}
}
