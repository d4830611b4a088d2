package node_test

import (
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// A peer with pipeline.draft answers greedy pipeline queries speculatively:
// the same tokens as without drafting, with the draft's rounds in the
// result; a query may turn it off.
func TestSpeculativeQuery(t *testing.T) {
	model := tinyModel(t)
	boot := ""
	stage := func(spec string) *nodetest.Peer {
		cfg := nodetest.Config(t.TempDir())
		if boot != "" {
			cfg.Bootstrap = []string{boot}
		}
		cfg.Shards = []string{model + ":" + spec}
		cfg.Engine = node.EngineConfig{Threads: 1}
		p := nodetest.Start(t, cfg)
		if boot == "" {
			boot = p.Addr(t)
		}
		return p
	}
	a, b := stage("0-2"), stage("2-4")
	cfg := nodetest.Config(t.TempDir())
	cfg.Bootstrap = []string{boot}
	cfg.Engine = node.EngineConfig{Threads: 1}
	cfg.Pipeline.Draft = model
	cfg.Pipeline.DraftMin = 2 // on loopback, drafting by cost would soon stop
	origin := nodetest.Start(t, cfg)
	nodetest.Eventually(t, 10*time.Second, "origin sees both stages", func() bool {
		return nodetest.SeesShards(origin, []peer.ID{a.ID(), b.ID()}...)
	})
	c := client.New(origin.APIAddr(), "")
	zero := float32(0)
	ask := func(speculate *bool) *answer.Pipeline {
		t.Helper()
		res, err := c.Query(t.Context(), client.QueryRequest{Query: "Tell me about the swarm.", Mode: "pipeline",
			MaxTokens: 24, Temperature: &zero, Speculate: speculate}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Pipeline == nil {
			t.Fatalf("pipeline answer without its pipeline: %+v", res)
		}
		return res.Pipeline
	}
	off := false
	plain, spec := ask(&off), ask(nil)
	if len(plain.Tokens) == 0 || !slices.Equal(plain.Tokens, spec.Tokens) {
		t.Fatalf("speculative tokens %v, plain %v", spec.Tokens, plain.Tokens)
	}
	if plain.DraftRounds != 0 || spec.DraftRounds == 0 || spec.DraftAccepted*10 < spec.Drafted*8 {
		t.Fatalf("plain drafted in %d rounds; speculative: %d of %d accepted in %d rounds", plain.DraftRounds,
			spec.DraftAccepted, spec.Drafted, spec.DraftRounds)
	}
	t.Logf("%d tokens: %d of %d drafts accepted, %d verify steps", len(spec.Tokens), spec.DraftAccepted, spec.Drafted, spec.DraftRounds)
}

// A peer with pipeline.draft_swarm and no draft model of its own drafts
// pipeline answers with another peer's drafter role of the same tokenizer,
// over the network: the same tokens as without drafting.
func TestSpeculativeQueryFromSwarm(t *testing.T) {
	model := tinyModel(t)
	boot := ""
	start := func(edit func(*node.Config)) *nodetest.Peer {
		cfg := nodetest.Config(t.TempDir())
		if boot != "" {
			cfg.Bootstrap = []string{boot}
		}
		cfg.Engine = node.EngineConfig{Threads: 1}
		edit(&cfg)
		p := nodetest.Start(t, cfg)
		if boot == "" {
			boot = p.Addr(t)
		}
		return p
	}
	a := start(func(c *node.Config) { c.Shards = []string{model + ":0-2"} })
	b := start(func(c *node.Config) { c.Shards = []string{model + ":2-4"} })
	d := start(func(c *node.Config) { c.Roles = map[string]string{"drafter": model} })
	origin := start(func(c *node.Config) {
		c.Pipeline.DraftSwarm = true
		c.Pipeline.DraftMin = 2 // on loopback, drafting by cost would soon stop
	})
	nodetest.Eventually(t, 20*time.Second, "origin sees both stages and the drafter", func() bool {
		if !nodetest.SeesShards(origin, a.ID(), b.ID()) {
			return false
		}
		q, ok := origin.Swarm().View().Get(d.ID())
		return ok && q.Alive && len(q.Cap.Roles) == 1 && q.Cap.Roles[0].Vocab != ""
	})
	c := client.New(origin.APIAddr(), "")
	zero := float32(0)
	ask := func(speculate bool) (tokens []int32, drafted, rounds int) {
		t.Helper()
		res, err := c.Query(t.Context(), client.QueryRequest{Query: "Tell me about the swarm.", Mode: "pipeline",
			MaxTokens: 24, Temperature: &zero, Speculate: &speculate}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := res.Pipeline
		if r == nil {
			t.Fatalf("pipeline answer without its pipeline: %+v", res)
		}
		return r.Tokens, r.Drafted, r.DraftRounds
	}
	plain, _, _ := ask(false)
	spec, drafted, rounds := ask(true)
	if len(plain) == 0 || !slices.Equal(plain, spec) || rounds == 0 || drafted == 0 {
		t.Fatalf("drafted by the swarm: %v (%d proposals, %d rounds)\nplain %v", spec, drafted, rounds, plain)
	}
	t.Logf("%d tokens, %d proposals in %d rounds from %s's drafter", len(spec), drafted, rounds, d.ID())
}
