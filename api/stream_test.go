package api_test

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/api"

	"github.com/llmswarm/llmswarm/nodetest"
)

// TestChatStreamStartsWhileAgentsWork: a streamed MoA chat completion
// sends its headers and the role delta while the agents work, and a
// comment as each agent finishes, long before the final answer's first
// token: a client's read timeout does not end a long answer that is
// still being prepared.
func TestChatStreamStartsWhileAgentsWork(t *testing.T) {
	cfg := nodetest.Config(t.TempDir())
	model := nodetest.TinyModel(t, "q8_0")
	cfg.Roles = map[string]string{"reasoner": model, "writer": model}
	cfg.Engine.Threads, cfg.Engine.Context = 1, 512
	addr := nodetest.Start(t, cfg).APIAddr()
	waitModel(t, addr, "writer")
	order := streamOrder(t, addr)
	first := strings.IndexByte(order, 'c')
	if !strings.HasPrefix(order, "r") || first < 0 || !strings.Contains(order[:first], "aa") || !strings.HasSuffix(order, "d") {
		t.Fatalf("stream order %q: want the role delta, then both agents' comments, then the answer's content, then [DONE]", order)
	}
	// A quiet stream gets comments while the agents work.
	defer api.SetStreamKeepAliveForTest(time.Millisecond)()
	if order := streamOrder(t, addr); !strings.HasPrefix(order, "r") || !strings.Contains(order, "w") {
		t.Fatalf("stream order %q: want the role delta, then keep-alive comments", order)
	}
}

// streamOrder asks addr a streamed MoA question and says what came, in
// order: r the role delta, a an agent's comment, w a keep-alive comment,
// c content, d [DONE].
func streamOrder(t *testing.T, addr string) string {
	t.Helper()
	body := `{"model":"swarm-moa","stream":true,"max_tokens":24,"temperature":0,"messages":[{"role":"user","content":"Tell me a story."}]}`
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %v", resp.StatusCode, resp.Header)
	}
	var order []byte
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ": agent "):
			order = append(order, 'a')
		case line == ": working":
			order = append(order, 'w')
		case strings.Contains(line, `"role":"assistant"`):
			order = append(order, 'r')
		case strings.Contains(line, `"content":`):
			order = append(order, 'c')
		case line == "data: [DONE]":
			order = append(order, 'd')
		}
	}
	return string(order)
}
