package node_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// synthModel writes a tiny synthetic qwen3 with spec's template settings.
func synthModel(t *testing.T, name string, seed uint64, spec engine.SynthSpec) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name+".gguf")
	spec.Arch, spec.Size, spec.Type, spec.Seed = "qwen3", "tiny", "f32", seed
	if err := engine.Synth(t.Context(), p, spec); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCompleteMode: a raw completion (mode complete) is answered by the
// writer's model, by the role the query names, or by a pipeline model; a
// base model (no chat template) answers it, and a chat to that model is
// the caller's mistake (400) naming why, on the role path and the
// pipeline path alike. A model carrying Gemma 3's real template answers a
// chat through it, as a role and as a pipeline.
func TestCompleteMode(t *testing.T) {
	gemmaSrc, err := os.ReadFile(filepath.Join("..", "internal", "engine", "testdata", "templates", "gemma3.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	base := synthModel(t, "base", 11, engine.SynthSpec{NoChatTemplate: true})
	gemma := synthModel(t, "gemma", 12, engine.SynthSpec{ChatTemplate: string(gemmaSrc)})
	baseStages := synthModel(t, "base-stages", 13, engine.SynthSpec{NoChatTemplate: true})
	origin := nodetest.Start(t, nodetest.Config(t.TempDir()))
	peer := func(edit func(c *node.Config)) *nodetest.Peer {
		cfg := nodetest.Config(t.TempDir())
		cfg.Bootstrap = []string{origin.Addr(t)}
		cfg.Engine = node.EngineConfig{Threads: 1, Context: 256}
		cfg.Heartbeat = node.Duration(300 * time.Millisecond)
		edit(&cfg)
		return nodetest.Start(t, cfg)
	}
	roles := peer(func(c *node.Config) { c.Roles = map[string]string{"writer": gemma, "reasoner": base} })
	holder := peer(func(c *node.Config) { c.Shards = []string{baseStages + ":0-4", gemma + ":0-4"} })
	nodetest.Eventually(t, 30*time.Second, "origin sees the roles and the shards", func() bool {
		p, ok := origin.Swarm().View().Get(roles.ID())
		if !ok || !p.Alive || len(p.Cap.Roles) != 2 || !nodetest.SeesShards(origin, holder.ID()) {
			return false
		}
		h, _ := origin.Swarm().View().Get(holder.ID())
		return len(h.Cap.Shards) == 2
	})
	c := client.New(origin.APIAddr(), "")
	p, _ := origin.Swarm().View().Get(roles.ID())
	var gemmaCID, stagesCID string
	for _, r := range p.Cap.Roles {
		if r.Role == "writer" {
			gemmaCID = r.ModelCID
		}
	}
	sh, err := c.Shards(t.Context())
	if err != nil || len(sh.Models) != 2 {
		t.Fatalf("shards: %+v, %v", sh, err)
	}
	for _, m := range sh.Models {
		if m.ModelCID != gemmaCID {
			stagesCID = m.ModelCID
		}
	}
	ask := func(req client.QueryRequest) (*answer.Result, error) {
		req.MaxTokens = 6
		return c.Query(t.Context(), req, nil)
	}
	prompt := "Once upon a time"
	for _, tc := range []struct {
		name string
		req  client.QueryRequest
		mode string // the answer's mode: who answered
	}{
		{"writer by default", client.QueryRequest{Query: prompt, Mode: answer.ModeComplete}, "writer"},
		{"the role named", client.QueryRequest{Query: prompt, Mode: answer.ModeComplete, Role: "reasoner"}, "reasoner"},
		{"a pipeline model", client.QueryRequest{Query: prompt, Mode: answer.ModeComplete, Model: stagesCID}, "pipeline"},
		{"Gemma 3's template, role chat", client.QueryRequest{Query: "Hi", Mode: "writer"}, "writer"},
		{"Gemma 3's template, pipeline chat", client.QueryRequest{Query: "Hi", Mode: "pipeline", Model: gemmaCID}, "pipeline"},
	} {
		res, err := ask(tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res.Mode != tc.mode || res.FinalAnswer == "" {
			t.Fatalf("%s: mode %q answer %q, want %s to answer", tc.name, res.Mode, res.FinalAnswer, tc.mode)
		}
	}
	for _, tc := range []struct {
		name string
		req  client.QueryRequest
		want string
	}{
		{"chat to a base role model", client.QueryRequest{Query: "Hi", Mode: "reasoner"}, "no usable chat template"},
		{"chat to a base pipeline model", client.QueryRequest{Query: "Hi", Mode: "pipeline", Model: stagesCID}, "no usable chat template"},
		{"history", client.QueryRequest{Query: prompt, Mode: answer.ModeComplete, History: []client.Message{{Role: "user", Content: "x"}}}, "no history"},
		{"role outside complete", client.QueryRequest{Query: prompt, Mode: "moa", Role: "writer"}, "only complete mode"},
		{"unknown role", client.QueryRequest{Query: prompt, Mode: answer.ModeComplete, Role: "poet"}, "want one of"},
	} {
		_, err := ask(tc.req)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, tc.want) {
			t.Fatalf("%s: %v, want a 400 naming %q", tc.name, err, tc.want)
		}
	}
}
