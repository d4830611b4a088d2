package node_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/nodetest"
	"github.com/llmswarm/llmswarm/shards"
)

// TestRolesLoadInBackground: a peer's configured roles load after its API
// is up, as tasks the status lists with their progress; a role whose file
// turns out unusable while loading leaves the peer running, with the
// failure in its warnings and its task. (A file whose header is broken or
// that does not fit max_memory still stops the start: TestMemoryBudget,
// TestStartErrors.)
func TestRolesLoadInBackground(t *testing.T) {
	model := nodetest.TinyModel(t, "q8_0")
	// A slice passes the start's checks (a readable header that fits the
	// budget) but is no whole model: its role fails while loading.
	broken := filepath.Join(t.TempDir(), "slice.gguf")
	if _, err := shards.SliceFile(model, broken, 0, 2); err != nil {
		t.Fatal(err)
	}
	cfg := nodetest.Config(t.TempDir())
	cfg.Roles = map[string]string{"reasoner": model, "writer": broken}
	cfg.Engine.Threads = 1
	p := nodetest.Start(t, cfg)
	c := client.New(p.APIAddr(), "")
	var st client.Status
	var err error
	nodetest.Eventually(t, 20*time.Second, "both loads ended, the failed one named in the warnings", func() bool {
		st, err = c.Status(t.Context())
		ended := 0
		for _, tk := range st.Tasks {
			if tk.Kind == "load" && tk.State != "running" {
				ended++
			}
		}
		// The warning is set just after the task ends.
		return err == nil && ended == 2 && strings.Contains(strings.Join(st.Warnings, "\n"), "role writer")
	})
	for _, tk := range st.Tasks {
		switch {
		case strings.Contains(tk.Name, "role reasoner"):
			if tk.State != "done" || tk.Done != 100 || tk.Unit != "percent" {
				t.Errorf("reasoner's load: %+v", tk)
			}
		case strings.Contains(tk.Name, "role writer"):
			if tk.State != "failed" || tk.Error == "" {
				t.Errorf("writer's load: %+v", tk)
			}
		}
	}
	ps, err := c.PS(t.Context())
	if err != nil || len(ps.Models) != 1 || ps.Models[0].Roles[0] != "reasoner" {
		t.Fatalf("ps: %+v %v", ps, err)
	}
}

// TestQueryRightAfterLoads: a question that comes the moment the shards
// given at start have loaded, before this peer's own record in its view
// lists them, is answered: it waits for that record, not only for the
// loads.
func TestQueryRightAfterLoads(t *testing.T) {
	model := nodetest.TinyModel(t, "q8_0")
	for i := range 3 {
		cfg := nodetest.Config(t.TempDir())
		cfg.Shards = []string{model + ":0-4"}
		cfg.Engine.Threads = 1
		p := nodetest.Start(t, cfg)
		<-p.StartLoadsDoneForTest()
		out, err := p.Query(t.Context(), client.QueryRequest{Query: "hello", Mode: "pipeline", MaxTokens: 2}, nil)
		if err != nil {
			t.Fatalf("try %d: a pipeline question right after the loads: %v", i, err)
		}
		if out.CompletionTokens == 0 {
			t.Fatalf("try %d: no tokens: %+v", i, out)
		}
		p.Close()
	}
}
