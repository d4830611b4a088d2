package node_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/api"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/node/client"
	"github.com/llmswarm/llmswarm/node/nodetest"
	"github.com/llmswarm/llmswarm/shards"
)

// TestLoadTasks: a peer's loads are tasks its status lists with their
// progress: a role given at start (loaded before the peer joins), a shard
// file (sliced and loaded in the background while the API answers). A
// role whose file is no whole model stops the start, naming it.
func TestLoadTasks(t *testing.T) {
	model := nodetest.TinyModel(t, "q8_0")
	cfg := nodetest.Config(t.TempDir())
	cfg.Roles = map[string]string{"reasoner": model}
	cfg.Shards = []string{model + ":0-2"}
	cfg.Engine.Threads = 1
	p := nodetest.Start(t, cfg)
	c := client.New(p.APIAddr(), "")
	want := map[string]bool{"load role reasoner": false, "slice " + model: false, "load shard": false}
	var st client.Status
	var err error
	nodetest.Eventually(t, 20*time.Second, "the role's and the shard's tasks done", func() bool {
		if st, err = c.Status(t.Context()); err != nil {
			return false
		}
		for _, tk := range st.Tasks {
			for k := range want {
				if strings.HasPrefix(tk.Kind+" "+tk.Name, k) && tk.State == "done" {
					want[k] = true
				}
			}
		}
		return want["load role reasoner"] && want["slice "+model] && want["load shard"]
	})
	for _, tk := range st.Tasks {
		if tk.Kind == "load" && (tk.Done != 100 || tk.Unit != "percent" || tk.Stage != "weights") {
			t.Errorf("load task %+v: want the weights at 100%%", tk)
		}
	}

	slice := filepath.Join(t.TempDir(), "slice.gguf")
	if _, err := shards.SliceFile(model, slice, 0, 2); err != nil {
		t.Fatal(err)
	}
	bad := nodetest.Config(t.TempDir())
	bad.Roles = map[string]string{"writer": slice}
	n := &node.Node{Config: bad}
	n.API = api.New(n, nil)
	err = n.Start(context.Background())
	n.Close()
	if err == nil || !strings.Contains(err.Error(), "role writer") {
		t.Fatalf("a slice as a role: %v, want the start refused naming the role", err)
	}
}
