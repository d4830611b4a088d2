package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/llmswarm/llmswarm/nodetest"
)

// chatAnswer is what a chat completion call gave, streamed or not.
type chatAnswer struct {
	status int
	header http.Header
	text   string
	// reasoning is message.reasoning_content, or the streamed
	// delta.reasoning_content pieces together.
	reasoning string
	finish    string
	usage     map[string]int
	chunks    []map[string]any // streamed: every data line but [DONE]
	errBody   string
}

// chat posts body (a JSON object without "stream") to the OpenAI API.
func chat(t *testing.T, api, body string, stream bool) chatAnswer {
	t.Helper()
	if stream {
		body = strings.TrimSuffix(body, "}") + `,"stream":true}`
	}
	resp, err := http.Post("http://"+api+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := chatAnswer{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		a.errBody = string(b)
		return a
	}
	if !stream {
		var cc struct {
			Choices []struct {
				Message struct {
					Content   string
					Reasoning string `json:"reasoning_content"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage map[string]int `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&cc); err != nil || len(cc.Choices) != 1 {
			t.Fatalf("chat answer: %v %+v", err, cc)
		}
		a.text, a.finish, a.usage = cc.Choices[0].Message.Content, cc.Choices[0].FinishReason, cc.Usage
		a.reasoning = cc.Choices[0].Message.Reasoning
		return a
	}
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		a.chunks = append(a.chunks, c)
		if e, ok := c["error"]; ok {
			b, _ := json.Marshal(e)
			a.errBody = string(b)
		}
		if u, ok := c["usage"].(map[string]any); ok {
			a.usage = map[string]int{}
			for k, v := range u {
				a.usage[k] = int(v.(float64))
			}
		}
		for _, ch := range asList(c["choices"]) {
			choice := ch.(map[string]any)
			if d, ok := choice["delta"].(map[string]any); ok {
				s, _ := d["content"].(string)
				a.text += s
				r, _ := d["reasoning_content"].(string)
				a.reasoning += r
			}
			if f, ok := choice["finish_reason"].(string); ok {
				a.finish = f
			}
		}
	}
	if !done {
		t.Fatalf("stream did not end with [DONE]: %v", a.chunks)
	}
	return a
}

func asList(v any) []any { l, _ := v.([]any); return l }

// TestOpenAISchema: the OpenAI fields the swarm honours, on a peer serving
// a role with a synthetic model, each streamed and not.
func TestOpenAISchema(t *testing.T) {
	cfg := nodetest.Config(t.TempDir())
	cfg.Roles = map[string]string{"reasoner": nodetest.TinyModel(t, "f32")}
	cfg.Engine.Threads, cfg.Engine.Context = 1, 256
	api := nodetest.Start(t, cfg).APIAddr()
	waitModel(t, api, "reasoner")
	req := func(extra string) string {
		return `{"model":"reasoner","max_tokens":24,"messages":[{"role":"user","content":"Tell me a story."}]` + extra + `}`
	}
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "whole", true: "streamed"}[stream]
		t.Run(name, func(t *testing.T) {
			greedy := chat(t, api, req(`,"temperature":0`), stream)
			if greedy.status != 200 || len(greedy.text) < 8 || greedy.header.Get("X-Swarm-Seed") != "" {
				t.Fatalf("greedy: %+v", greedy)
			}

			// seed: the same seed samples the same text; no seed, a fresh one.
			a := chat(t, api, req(`,"temperature":1,"seed":-7`), stream)
			b := chat(t, api, req(`,"temperature":1,"seed":-7`), stream)
			if a.status != 200 || a.text != b.text || a.header.Get("X-Swarm-Seed") != b.header.Get("X-Swarm-Seed") {
				t.Fatalf("same seed, different answers:\n%q\n%q", a.text, b.text)
			}
			// An omitted temperature is OpenAI's 1.0: sampled, fresh seeds.
			texts, seeds := map[string]bool{}, map[string]bool{}
			for range 3 {
				c := chat(t, api, req(""), stream)
				texts[c.text], seeds[c.header.Get("X-Swarm-Seed")] = true, true
			}
			if len(texts) < 2 || len(seeds) != 3 || seeds[""] {
				t.Fatalf("no seed: %d distinct texts, seeds %v", len(texts), seeds)
			}

			// stop: the text ends before the first stop string.
			stop := stopIn(t, greedy.text)
			want := greedy.text[:strings.Index(greedy.text, stop)]
			for _, field := range []string{
				`,"stop":` + quote(stop),
				`,"stop":["never-said", ` + quote(stop) + `]`,
			} {
				s := chat(t, api, req(`,"temperature":0`+field), stream)
				if s.status != 200 || s.text != want || s.finish != "stop" {
					t.Fatalf("stop %s: %d %q finish %s %s; want %q", field, s.status, s.text, s.finish, s.errBody, want)
				}
			}
			if n := chat(t, api, req(`,"temperature":0,"stop":null`), stream); n.text != greedy.text {
				t.Fatalf("stop null: %q, want %q", n.text, greedy.text)
			}

			// response_format json_object: checked, and a random model's
			// text is not JSON: a clear error with its real status.
			j := chat(t, api, req(`,"temperature":0,"response_format":{"type":"json_object"}`), stream)
			if j.status != 502 || !strings.Contains(j.errBody, "not a JSON object") {
				t.Fatalf("json_object: %d %s", j.status, j.errBody)
			}
			if tx := chat(t, api, req(`,"temperature":0,"response_format":{"type":"text"}`), stream); tx.text != greedy.text {
				t.Fatalf("response_format text: %q", tx.text)
			}

			// Metadata fields: accepted, ignored, and said so.
			m := chat(t, api, req(`,"temperature":0,"user":"u1","metadata":{"k":"v"},"store":false,"n":1,"logprobs":false`), stream)
			if m.status != 200 || m.text != greedy.text || m.header.Get("X-Swarm-Ignored-Fields") != "user, metadata, store" {
				t.Fatalf("metadata: %d %q %v", m.status, m.errBody, m.header)
			}
		})
	}

	// stream_options.include_usage: a last chunk with the usage, no choices.
	u := chat(t, api, req(`,"temperature":0,"stream_options":{"include_usage":true}`), true)
	last := u.chunks[len(u.chunks)-1]
	if len(asList(last["choices"])) != 0 || u.usage["completion_tokens"] == 0 || u.usage["prompt_tokens"] == 0 ||
		u.usage["total_tokens"] != u.usage["completion_tokens"]+u.usage["prompt_tokens"] {
		t.Fatalf("include_usage: last chunk %v", last)
	}
	if n := chat(t, api, req(`,"temperature":0`), true); n.usage != nil {
		t.Fatalf("usage chunk sent unasked: %v", n.chunks)
	}
}

// TestAPIPromptTooLong: a prompt longer than the model's context is the
// caller's error (400), on both APIs, streamed or not.
func TestAPIPromptTooLong(t *testing.T) {
	cfg := nodetest.Config(t.TempDir())
	cfg.Roles = map[string]string{"reasoner": nodetest.TinyModel(t, "f32")}
	cfg.Engine.Threads, cfg.Engine.Context = 1, 64
	api := nodetest.Start(t, cfg).APIAddr()
	waitModel(t, api, "reasoner")
	long := strings.Repeat("the swarm answers every question ", 100)
	cases := []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"reasoner","messages":[{"role":"user","content":` + quote(long) + `}]}`},
		{"/v1/chat/completions", `{"model":"reasoner","stream":true,"messages":[{"role":"user","content":` + quote(long) + `}]}`},
		{"/v1/swarm/query", `{"mode":"reasoner","query":` + quote(long) + `}`},
		{"/v1/swarm/query", `{"mode":"reasoner","stream":true,"query":` + quote(long) + `}`},
	}
	for _, tc := range cases {
		apiCase{method: "POST", path: tc.path, body: tc.body, status: 400, want: "context"}.run(t, "http://"+api)
	}
}

// stopIn picks a stop string from the second half of text: two runes the
// model really produced (a synthetic model's text has invalid UTF-8, shown
// as U+FFFD, which no stop string can match).
func stopIn(t *testing.T, text string) string {
	t.Helper()
	r := []rune(text)
	for i := len(r) / 2; i+1 < len(r); i++ {
		if r[i] != utf8.RuneError && r[i+1] != utf8.RuneError {
			return string(r[i : i+2])
		}
	}
	t.Fatalf("no stop string to pick in %q", text)
	return ""
}

// waitModel waits until the peer at api lists model.
func waitModel(t *testing.T, api, model string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + api + "/v1/models/" + model); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("model %s not listed within 10s", model)
}

func quote(s string) string {
	var b bytes.Buffer
	json.NewEncoder(&b).Encode(s)
	return strings.TrimSpace(b.String())
}
