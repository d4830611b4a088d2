package api_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/shards/hubtest"
)

// TestPull: POST /v1/models/pull against a local hub that serves
// synthetic GGUFs as Hugging Face does: streamed progress, the model
// stored under its CID and announced (a second peer fetches its layers
// peer-to-peer), a second pull that downloads nothing, a short name whose
// quant follows the memory budget, and the hub's errors as API errors.
func TestPull(t *testing.T) {
	q8, err := os.ReadFile(nodetest.TinyModel(t, "q8_0"))
	if err != nil {
		t.Fatal(err)
	}
	f32, err := os.ReadFile(nodetest.TinyModel(t, "f32"))
	if err != nil {
		t.Fatal(err)
	}
	hub := hubtest.New(t)
	hub.Add("test/Tiny-GGUF", "tiny-Q8_0.gguf", q8, false)
	hub.Add("test/Tiny-GGUF", "tiny-F32.gguf", f32, false)
	hub.Add("test/Gated-GGUF", "tiny-Q8_0.gguf", q8, true)
	// A short name's repo, served by the local hub.
	// Its Q8_0 is too big for the peer's budget (never downloaded).
	hub.Add("unsloth/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf", make([]byte, 3<<20), false)
	hub.Add("unsloth/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q4_K_M.gguf", q8, false)

	peers := nodetest.Cluster(t, 2, func(i int, c *node.Config) {
		c.Hub.Endpoint = hub.URL
		if i == 0 {
			// Room for the tiny file with headroom, not the 3 MiB one.
			c.MaxMemory = 2 << 20
		}
	})
	c := client.New(peers[0].APIAddr(), "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var tasks []client.Task
	p, err := c.Pull(ctx, client.PullRequest{Model: "hf.co/test/Tiny-GGUF:q8_0", Stream: true}, func(tk client.Task) { tasks = append(tasks, tk) })
	if err != nil {
		t.Fatal(err)
	}
	_, _, root, err := shards.BuildManifest(nodetest.TinyModel(t, "q8_0"))
	if err != nil {
		t.Fatal(err)
	}
	if p.CID != root.String() || p.Quant != "Q8_0" || p.Size != int64(len(q8)) || p.Already || p.Layers == 0 || p.Arch != "qwen3" {
		t.Fatalf("pulled %+v, want CID %s", p, root)
	}
	if b, err := os.ReadFile(p.Path); err != nil || string(b) != string(q8) {
		t.Fatalf("stored file %s: %v", p.Path, err)
	}
	stages := map[string]bool{}
	for _, tk := range tasks {
		stages[tk.Stage] = true
	}
	last := tasks[len(tasks)-1]
	if !stages["resolve"] || !stages["download"] || last.State != "done" || last.Kind != "pull" || last.Done != int64(len(q8)) {
		t.Fatalf("task events: %+v", tasks)
	}

	again, err := c.Pull(ctx, client.PullRequest{Model: "hf.co/test/Tiny-GGUF/tiny-Q8_0.gguf"}, nil)
	if err != nil || !again.Already || again.CID != p.CID {
		t.Fatalf("second pull: %+v %v", again, err)
	}
	if n := len(hub.Ranges()); n != 1 {
		t.Fatalf("the CDN was asked %d times, want once", n)
	}

	// Announced: the other peer finds it by CID and fetches layers of it.
	other := client.New(peers[1].APIAddr(), "")
	nodetest.Eventually(t, 30*time.Second, "a shard of the pulled model fetched by the other peer", func() bool {
		sh, err := other.AddShard(ctx, p.CID+":0-2")
		return err == nil && sh.ModelCID == p.CID
	})

	short, err := c.Pull(ctx, client.PullRequest{Model: "qwen3:0.6b"}, nil)
	if err != nil || short.Quant != "Q4_K_M" {
		t.Fatalf("short name under a small budget: %+v %v, want the Q4_K_M file", short, err)
	}
	if p, err := c.Pull(ctx, client.PullRequest{Model: "qwen3:0.6b-q4_k_m"}, nil); err != nil || !p.Already {
		t.Fatalf("short name with a quant: %+v %v", p, err)
	}

	for _, tc := range []struct {
		req    client.PullRequest
		status int
		want   string
	}{
		{client.PullRequest{Model: "hf.co/test/Tiny-GGUF:Q2_K"}, 404, "quants: Q8_0, F32"},
		{client.PullRequest{Model: "hf.co/test/Tiny-GGUF"}, 400, "name one with :QUANT"},
		{client.PullRequest{Model: "hf.co/test/Gated-GGUF:Q8_0"}, 403, "set HF_TOKEN"},
		{client.PullRequest{Model: "hf.co/test/Gated-GGUF:Q8_0", Token: "wrong"}, 403, "may not read this repo"},
		{client.PullRequest{Model: "qwen9:1b"}, 400, "not a short name"},
		{client.PullRequest{Model: ""}, 400, "model is empty"},
	} {
		_, err := c.Pull(ctx, tc.req, nil)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != tc.status || !strings.Contains(ae.Message, tc.want) {
			t.Errorf("pull %+v: %v, want %d mentioning %q", tc.req, err, tc.status, tc.want)
		}
	}
	if g, err := c.Pull(ctx, client.PullRequest{Model: "hf.co/test/Gated-GGUF:Q8_0", Token: hub.Token}, nil); err != nil || g.CID != p.CID {
		t.Fatalf("gated with the token: %+v %v", g, err)
	}
	if n := hub.CDNAuth(); n != 0 {
		t.Fatalf("the hub token reached the CDN %d times", n)
	}
}
