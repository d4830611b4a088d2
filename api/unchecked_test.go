package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestUncheckedPipeline: real daemons, one model cut at layer 2. Two
// peers hold layers [0,2), one alone holds [2,4): an answer through it
// names [2,4) on it as unchecked, in the X-Swarm-Unchecked header, the
// body's swarm.pipeline.unchecked and a stream's last chunk; a peer with
// pipeline.require_checked refuses the route: 503 unchecked_route naming
// the layers.
func TestUncheckedPipeline(t *testing.T) {
	model := nodetest.TinyModel(t, "f32")
	peers := nodetest.Cluster(t, 3, func(i int, c *node.Config) {
		c.Shards = []string{model + ":0-2"}
		if i == 1 {
			c.Shards = []string{model + ":2-4"}
		}
		c.Pipeline.RequireChecked = i == 2
		c.Engine.Threads, c.Engine.Context = 1, 256
	})
	a, b, strict := peers[0], peers[1], peers[2]
	for _, p := range []*nodetest.Peer{a, strict} {
		nodetest.Eventually(t, 30*time.Second, "the peer sees every shard", func() bool {
			return nodetest.SeesShards(p, a.ID(), b.ID(), strict.ID())
		})
	}
	want := "2-4@" + b.ID().String()
	body := `{"model":"swarm","max_tokens":8,"temperature":0,"messages":[{"role":"user","content":"Tell me a story."}]}`

	resp, err := http.Post("http://"+a.APIAddr()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var whole struct {
		Swarm answer.Result `json:"swarm"`
	}
	err = json.NewDecoder(resp.Body).Decode(&whole)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("X-Swarm-Unchecked") != want {
		t.Fatalf("whole: %d %v, X-Swarm-Unchecked %q, want %q", resp.StatusCode, err, resp.Header.Get("X-Swarm-Unchecked"), want)
	}
	if p := whole.Swarm.Pipeline; p == nil || len(p.Unchecked) != 1 ||
		p.Unchecked[0] != (answer.Hop{Peer: b.ID().String(), Start: 2, End: 4}) {
		t.Fatalf("swarm.pipeline: %+v", whole.Swarm.Pipeline)
	}
	// Drawn for a check (b is not proven) with no second route: the
	// unchecked layers say it, not a lost check besides.
	if l := resp.Header.Get("X-Swarm-Check-Lost"); l != "" || whole.Swarm.Pipeline.CheckLost != nil {
		t.Fatalf("an unchecked answer also says check lost: %q, %+v", l, whole.Swarm.Pipeline.CheckLost)
	}

	s := chat(t, a.APIAddr(), body, true)
	last := s.chunks[len(s.chunks)-1]
	u := asList(last["swarm_unchecked"])
	if s.status != 200 || s.header.Get("X-Swarm-Unchecked") != want || len(u) != 1 ||
		u[0].(map[string]any)["peer"] != b.ID().String() {
		t.Fatalf("streamed: %d, X-Swarm-Unchecked %q, last chunk %v", s.status, s.header.Get("X-Swarm-Unchecked"), last)
	}

	for _, stream := range []bool{false, true} {
		r := chat(t, strict.APIAddr(), body, stream)
		if r.status != http.StatusServiceUnavailable || !strings.Contains(r.errBody, "unchecked_route") ||
			!strings.Contains(r.errBody, "layers [2,4)") {
			t.Fatalf("require_checked (stream %v): %d %s", stream, r.status, r.errBody)
		}
	}
}
