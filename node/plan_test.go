package node_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestPlanCountsHead: the plan an originator answers sizes the model from
// its manifest (fetched from a holder): the head's and the embedding's
// cost and bytes are there, the last stage is charged the head and the
// first the embedding.
func TestPlanCountsHead(t *testing.T) {
	model := q8Model(t)
	origin := nodetest.Start(t, nodetest.Config(t.TempDir()))
	holder := func(layers string) *nodetest.Peer {
		cfg := nodetest.Config(t.TempDir())
		cfg.Bootstrap = []string{origin.Addr(t)}
		cfg.Engine = node.EngineConfig{Threads: 1, Context: 256}
		cfg.Shards = []string{model + ":" + layers}
		cfg.Heartbeat = node.Duration(300 * time.Millisecond)
		return nodetest.Start(t, cfg)
	}
	a, b := holder("0-2"), holder("2-4")
	nodetest.Eventually(t, 15*time.Second, "origin sees both holders' shards", func() bool {
		return nodetest.SeesShards(origin, a.ID(), b.ID())
	})
	p, err := client.New(origin.APIAddr(), "").Plan(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	// The tiny shape: 64 hidden, 512 tokens; a head of about one layer.
	if p.Layers != 4 || p.LayerBytes <= 0 || p.HeadLayers < 0.2 || p.HeadLayers > 5 || p.HeadBytes <= 0 ||
		p.EmbedLayers <= 0 || p.EmbedLayers > 0.1 || p.EmbedBytes <= 0 {
		t.Fatalf("plan shape: %d layers of %d bytes, head %v layers %d bytes, embedding %v layers %d bytes",
			p.Layers, p.LayerBytes, p.HeadLayers, p.HeadBytes, p.EmbedLayers, p.EmbedBytes)
	}
	if len(p.Stages) == 0 {
		t.Fatalf("no stages: %+v", p)
	}
	first, last := p.Stages[0], p.Stages[len(p.Stages)-1]
	if first.Start != 0 || first.EmbedMS <= 0 || last.End != 4 || last.HeadMS <= 0 || last.HeadMS >= last.StageMS {
		t.Fatalf("stages %+v: want the embedding charged to the first and the head to the last", p.Stages)
	}
	for _, s := range p.Stages[:len(p.Stages)-1] {
		if s.HeadMS != 0 {
			t.Fatalf("stage %+v is charged the head but is not the last", s)
		}
	}
}

// TestPipelineWhichModel: a pipeline question or a plan that does not say
// which model while several are held is the caller's mistake (400, naming
// the models to choose from); a model that nobody holds is 404 for both.
func TestPipelineWhichModel(t *testing.T) {
	f32, q8 := tinyModel(t), q8Model(t)
	cfg := nodetest.Config(t.TempDir())
	cfg.Engine = node.EngineConfig{Threads: 1, Context: 256}
	cfg.Shards = []string{f32 + ":0-4", q8 + ":0-4"}
	p := nodetest.Start(t, cfg)
	<-p.StartLoadsDoneForTest()
	nodetest.Eventually(t, 15*time.Second, "the peer sees its own two models", func() bool {
		sh, err := p.Shards()
		return err == nil && len(sh.Models) == 2
	})
	sh, _ := p.Shards()
	c := client.New(p.APIAddr(), "")
	status := func(err error) (int, string) {
		var ae *client.APIError
		if !errors.As(err, &ae) {
			return 0, fmt.Sprint(err)
		}
		return ae.Status, ae.Message
	}
	for _, tc := range []struct {
		what   string
		err    error
		status int
	}{
		{"ask, no model", func() error {
			_, err := c.Query(t.Context(), client.QueryRequest{Query: "hi", Mode: "pipeline", MaxTokens: 2}, nil)
			return err
		}(), 400},
		{"plan, no model", func() error { _, err := c.Plan(t.Context(), ""); return err }(), 400},
		{"ask, model nosuch", func() error {
			_, err := c.Query(t.Context(), client.QueryRequest{Query: "hi", Mode: "pipeline", Model: "nosuch", MaxTokens: 2}, nil)
			return err
		}(), 404},
		{"ask auto, model nosuch", func() error {
			_, err := c.Query(t.Context(), client.QueryRequest{Query: "hi", Model: "nosuch", MaxTokens: 2}, nil)
			return err
		}(), 404},
		{"plan nosuch", func() error { _, err := c.Plan(t.Context(), "nosuch"); return err }(), 404},
	} {
		got, msg := status(tc.err)
		if got != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.what, got, msg, tc.status)
		}
		if tc.status == 400 {
			for _, m := range sh.Models {
				if !strings.Contains(msg, m.ModelCID) {
					t.Errorf("%s: %q does not name %s", tc.what, msg, m.ModelCID)
				}
			}
		}
	}
	// Named by its CID, either model answers.
	if _, err := c.Query(t.Context(), client.QueryRequest{Query: "hi", Mode: "pipeline", Model: sh.Models[0].ModelCID, MaxTokens: 2}, nil); err != nil {
		t.Fatalf("ask with model %s: %v", sh.Models[0].ModelCID, err)
	}
}
