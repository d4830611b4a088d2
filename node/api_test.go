package node_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/node/nodetest"
)

// TestAPIBadRequests: malformed requests get the right status and an
// OpenAI-shaped error naming the problem.
func TestAPIBadRequests(t *testing.T) {
	p := nodetest.Start(t, nodetest.Config(t.TempDir()))
	base := "http://" + p.APIAddr()
	cases := []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"GET", "/nope", "", 404, "no such endpoint"},
		{"GET", "/v1/chat/completions", "", 405, "not allowed"},
		{"POST", "/v1/swarm/peers", "", 405, "not allowed"},
		{"POST", "/v1/swarm/query", "{", 400, "not valid JSON"},
		{"POST", "/v1/swarm/query", `{"query":"hi","colour":1}`, 400, "colour"},
		{"POST", "/v1/swarm/query", `{"query":"  "}`, 400, "empty"},
		{"POST", "/v1/swarm/query", `{"query":"hi","max_tokens":-3}`, 400, "max_tokens"},
		{"POST", "/v1/swarm/query", `{"query":"hi","mode":"psychic"}`, 400, "psychic"},
		{"POST", "/v1/swarm/query", `{"query":"hi","dtype":"f8"}`, 400, "dtype"},
		{"POST", "/v1/swarm/query", `{"query":"hi"}`, 503, "no live peer serves"},
		{"POST", "/v1/chat/completions", `{"model":"swarm","messages":[]}`, 400, "messages"},
		{"POST", "/v1/chat/completions", `{"model":"swarm","messages":[{"role":"robot","content":"x"}]}`, 400, "robot"},
		{"POST", "/v1/chat/completions", `{"model":"swarm","messages":[{"role":"user","content":"x"}],"n":3}`, 400, "n must be 1"},
		{"POST", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, "gpt-9"},
		{"POST", "/v1/chat/completions", `{"model":"swarm","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, "image_url"},
		{"GET", "/v1/swarm/plan?model=nothing", "", 404, "nothing"},
	}
	for _, tc := range cases {
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, base+tc.path, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.want) || !strings.Contains(string(b), `"error"`) {
			t.Errorf("%s %s %s: %d %s; want %d mentioning %q", tc.method, tc.path, tc.body, resp.StatusCode, b, tc.status, tc.want)
		}
	}
}
