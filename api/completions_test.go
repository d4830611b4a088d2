package api_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/nodetest"
)

// complete posts body to /v1/completions: the status, and the text (the
// streamed chunks' together) or the error body.
func complete(t *testing.T, api, body string) (int, string, string) {
	t.Helper()
	resp, err := http.Post("http://"+api+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, "", string(b)
	}
	type choice struct {
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	}
	var c struct {
		Object  string   `json:"object"`
		Choices []choice `json:"choices"`
	}
	if !strings.Contains(body, `"stream":true`) {
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.Object != "text_completion" || len(c.Choices) != 1 || c.Choices[0].FinishReason == nil {
			t.Fatalf("completion: %v %+v", err, c)
		}
		return 200, c.Choices[0].Text, ""
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	done, finished := false, false
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			break
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil || c.Object != "text_completion" || len(c.Choices) != 1 {
			t.Fatalf("chunk %q: %v", line, err)
		}
		text.WriteString(c.Choices[0].Text)
		finished = finished || c.Choices[0].FinishReason != nil
	}
	if !done || !finished {
		t.Fatalf("stream ended without a finish_reason and [DONE]: %q", text.String())
	}
	return 200, text.String(), ""
}

// TestCompletions: POST /v1/completions continues a raw prompt with the
// writer's model (whole and streamed, the same greedy text); echo=true, a
// prompt that is not a string and unknown fields are 400s naming why.
func TestCompletions(t *testing.T) {
	cfg := nodetest.Config(t.TempDir())
	cfg.Roles = map[string]string{"writer": nodetest.TinyModel(t, "f32")}
	cfg.Engine.Threads, cfg.Engine.Context = 1, 256
	api := nodetest.Start(t, cfg).APIAddr()
	waitModel(t, api, "writer")
	req := `{"model":"swarm","prompt":"Once upon a time","max_tokens":12,"temperature":0`
	status, whole, errBody := complete(t, api, req+`}`)
	if status != 200 || whole == "" {
		t.Fatalf("whole: %d %q %s", status, whole, errBody)
	}
	if status, streamed, errBody := complete(t, api, req+`,"stream":true}`); status != 200 || streamed != whole {
		t.Fatalf("streamed: %d %q (%s), want the whole answer %q", status, streamed, errBody, whole)
	}
	if status, named, _ := complete(t, api, strings.Replace(req, `"swarm"`, `"writer"`, 1)+`,"echo":false}`); status != 200 || named != whole {
		t.Fatalf("the writer named: %d %q, want %q", status, named, whole)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"echo", req + `,"echo":true}`, "echo=true is not supported"},
		{"echo streamed", req + `,"echo":true,"stream":true}`, "echo=true is not supported"},
		{"prompt array", `{"model":"swarm","prompt":["a","b"]}`, "prompt: want a string"},
		{"empty prompt", `{"model":"swarm","prompt":" "}`, "prompt must not be empty"},
		{"unknown field", req + `,"colour":"blue"}`, `unknown field \"colour\"`},
		{"logit_bias", req + `,"logit_bias":{}}`, "logit bias is not supported"},
		{"n", req + `,"n":2}`, "n=2"},
	} {
		if status, _, body := complete(t, api, tc.body); status != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want a 400 naming %q", tc.name, status, body, tc.want)
		}
	}
}
