package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/nodetest"
)

// TestSeedReplay: the seed a sampled answer reports in X-Swarm-Seed, any
// uint64, replays that answer on both APIs: given back as JSON digits or as
// a string of them, 2^63 and above included, and echoed digit for digit.
func TestSeedReplay(t *testing.T) {
	cfg := nodetest.Config(t.TempDir())
	cfg.Roles = map[string]string{"reasoner": nodetest.TinyModel(t, "f32")}
	cfg.Engine.Threads, cfg.Engine.Context = 1, 256
	api := nodetest.Start(t, cfg).APIAddr()
	waitModel(t, api, "reasoner")
	// post asks with seed (a JSON value; "" for none) and gives the text and
	// the X-Swarm-Seed header.
	post := func(path, seed string) (int, string, string) {
		t.Helper()
		body := `{"model":"reasoner","max_tokens":12,"temperature":1,"messages":[{"role":"user","content":"Tell me a story."}]`
		if path == "/v1/swarm/query" {
			body = `{"mode":"reasoner","max_tokens":12,"temperature":1,"query":"Tell me a story."`
		}
		if seed != "" {
			body += `,"seed":` + seed
		}
		resp, err := http.Post("http://"+api+path, "application/json", strings.NewReader(body+"}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return resp.StatusCode, string(b), resp.Header.Get("X-Swarm-Seed")
		}
		var out struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
			FinalAnswer string `json:"final_answer"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
		if len(out.Choices) > 0 {
			out.FinalAnswer = out.Choices[0].Message.Content
		}
		return resp.StatusCode, out.FinalAnswer, resp.Header.Get("X-Swarm-Seed")
	}
	const max = "18446744073709551615"
	for _, path := range []string{"/v1/chat/completions", "/v1/swarm/query"} {
		// No seed: a fresh one, which gives the same text back.
		st, text, seed := post(path, "")
		if st != 200 || seed == "" {
			t.Fatalf("%s without a seed: %d %q, X-Swarm-Seed %q", path, st, text, seed)
		}
		for _, given := range []string{seed, `"` + seed + `"`} {
			if st, again, echo := post(path, given); st != 200 || again != text || echo != seed {
				t.Fatalf("%s replaying seed %s: %d %q, X-Swarm-Seed %q; want %q, %s", path, given, st, again, echo, text, seed)
			}
		}
		// Seeds of 2^63 and above: accepted as numbers and as strings,
		// echoed exactly, the same answer either way.
		for _, big := range []string{"9223372036854775808", "12174805838150342771", max} {
			st, a, echo := post(path, big)
			if st != 200 || echo != big {
				t.Fatalf("%s seed %s: %d %q, X-Swarm-Seed %q", path, big, st, a, echo)
			}
			if st, b, echo := post(path, `"`+big+`"`); st != 200 || b != a || echo != big {
				t.Fatalf("%s seed %q: %d %q, X-Swarm-Seed %q; want %q", path, big, st, b, echo, a)
			}
		}
		// A rounded float is not a seed: refused, saying how to give one.
		if st, body, _ := post(path, "1.2174805838150343e19"); st != 400 || !strings.Contains(body, "as a string") {
			t.Fatalf("%s float seed: %d %s", path, st, body)
		}
		if st, body, _ := post(path, max+"0"); st != 400 || !strings.Contains(body, "field seed") {
			t.Fatalf("%s seed past 2^64: %d %s", path, st, body)
		}
	}
	// OpenAI's seeds are signed: -1 is the seed 2^64-1, and says so.
	_, maxText, _ := post("/v1/chat/completions", max)
	if st, text, echo := post("/v1/chat/completions", "-1"); st != 200 || echo != max || text != maxText {
		t.Fatalf("seed -1: %d %q, X-Swarm-Seed %q; want %q, %s", st, text, echo, maxText, max)
	}
}
