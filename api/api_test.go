package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/nodetest"
)

// apiCase is one request to the API and what its answer must be.
type apiCase struct {
	method, path, body string
	header             map[string]string // Content-Type defaults to application/json on POST
	status             int
	want               string // in the body
	notWant            string // not in the body
}

func (tc apiCase) run(t *testing.T, base string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), tc.method, base+tc.path, strings.NewReader(tc.body))
	if err != nil {
		t.Fatal(err)
	}
	if tc.method == "POST" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range tc.header {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.want) ||
		(tc.notWant != "" && strings.Contains(string(b), tc.notWant)) ||
		(tc.status >= 400 && !strings.Contains(string(b), `"error"`)) {
		t.Errorf("%s %s %s %v: %d %s; want %d mentioning %q", tc.method, tc.path, trim(tc.body), tc.header, resp.StatusCode, b, tc.status, tc.want)
	}
}

func trim(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

const hi = `"messages":[{"role":"user","content":"x"}]`

// TestAPIBadRequests: malformed requests get the right status and an
// OpenAI-shaped error naming the problem.
func TestAPIBadRequests(t *testing.T) {
	p := nodetest.Start(t, nodetest.Config(t.TempDir()))
	base := "http://" + p.APIAddr()
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	cases := []apiCase{
		{method: "GET", path: "/nope", status: 404, want: "no such endpoint"},
		{method: "GET", path: "/v1/chat/completions", status: 405, want: "not allowed"},
		{method: "PUT", path: "/v1/chat/completions", status: 405, want: "POST"},
		{method: "DELETE", path: "/v1/models", status: 405, want: "GET"},
		{method: "OPTIONS", path: "/v1/swarm/query", status: 405, want: "not allowed"},
		{method: "PATCH", path: "/healthz", status: 405, want: "not allowed"},
		{method: "POST", path: "/v1/swarm/peers", status: 405, want: "not allowed"},
		{method: "POST", path: "/v1/swarm/query", body: "{", status: 400, want: "not valid JSON"},
		{method: "POST", path: "/v1/swarm/query", body: "", status: 400, want: "empty"},
		{method: "POST", path: "/v1/swarm/query", body: `{"query":"hi","colour":1}`, status: 400, want: `unknown field \"colour\"`, notWant: "not valid JSON"},
		{method: "POST", path: "/v1/swarm/query", body: `{"query":"  "}`, status: 400, want: "empty"},
		{method: "POST", path: "/v1/swarm/query", body: `{"query":"hi","max_tokens":-3}`, status: 400, want: "max_tokens"},
		{method: "POST", path: "/v1/swarm/query", body: `{"query":"hi","max_tokens":"many"}`, status: 400, want: "field max_tokens"},
		{method: "POST", path: "/v1/swarm/query", body: `{"query":"hi","mode":"psychic"}`, status: 400, want: "psychic"},
		{method: "POST", path: "/v1/swarm/query", body: `{"query":"hi","dtype":"f8"}`, status: 400, want: "dtype"},
		{method: "POST", path: "/v1/swarm/query", body: `{"query":"hi"}`, status: 503, want: "no live peer serves"},
		// An error before the first event keeps its status, stream or not.
		{method: "POST", path: "/v1/swarm/query", body: `{"query":"hi","stream":true}`, status: 503, want: "no live peer serves"},
		{method: "POST", path: "/v1/swarm/query", body: `{"query":"hi"}`, header: form, status: 415, want: "application/json"},
		{method: "POST", path: "/v1/chat/completions", body: `{` + hi + `}`, header: map[string]string{"Content-Type": "text/plain"}, status: 415, want: "application/json"},
		{method: "POST", path: "/v1/chat/completions", body: "--x--", header: map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, status: 415, want: "application/json"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `,"pad":"` + strings.Repeat("x", 1<<20) + `"}`, status: 413, want: "larger than"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm","messages":[]}`, status: 400, want: "messages"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm","messages":[{"role":"robot","content":"x"}]}`, status: 400, want: "robot"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `,"n":3}`, status: 400, want: "n must be 1"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"gpt-9",` + hi + `}`, status: 404, want: "gpt-9"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, status: 400, want: "image_url"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `,"colour":1}`, status: 400, want: `unknown field \"colour\"`, notWant: "not valid JSON"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm","messages":[{"role":"user","content":"x","mood":"glad"}]}`, status: 400, want: `unknown field \"mood\"`},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `,"tools":[]}`, status: 400, want: "tool calls are not supported"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `,"logprobs":true}`, status: 400, want: "logprobs is not supported"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `,"top_logprobs":3}`, status: 400, want: "top_logprobs is not supported"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `,"response_format":{"type":"json_schema","json_schema":{}}}`, status: 400, want: "json_schema"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `,"response_format":{"type":"xml"}}`, status: 400, want: "xml"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `,"stop":["a","b","c","d","e"]}`, status: 400, want: "stop: 5 strings"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `,"stop":7}`, status: 400, want: "stop: want a string"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `,"stop":[""]}`, status: 400, want: "empty stop"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `,"seed":"lucky"}`, status: 400, want: "field seed"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"swarm",` + hi + `,"temperature":"hot"}`, status: 400, want: "field temperature"},
		{method: "POST", path: "/v1/chat/completions", body: `{"model":"writer",` + hi + `,"stream":true}`, status: 503, want: "no live peer serves writer"},
		{method: "GET", path: "/v1/models/swarm-moa", status: 200, want: `"id": "swarm-moa"`},
		{method: "GET", path: "/v1/models/gpt-9", status: 404, want: "gpt-9"},
		{method: "GET", path: "/v1/swarm/plan?model=nothing", status: 404, want: "nothing"},
	}
	for _, tc := range cases {
		tc.run(t, base)
	}
}
