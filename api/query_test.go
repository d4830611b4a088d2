package api_test

import (
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestQueryHistoryAndStop: POST /v1/swarm/query carries a conversation
// (its turns reach the model: the prompt grows, the answer changes) and
// stop strings (the answer ends before the first), streamed and not.
func TestQueryHistoryAndStop(t *testing.T) {
	cfg := nodetest.Config(t.TempDir())
	cfg.Roles = map[string]string{"reasoner": nodetest.TinyModel(t, "q8_0")}
	cfg.Engine.Threads, cfg.Engine.Context = 1, 512
	addr := nodetest.Start(t, cfg).APIAddr()
	waitModel(t, addr, "reasoner")
	c := client.New(addr, "")
	ask := func(req client.QueryRequest) *answer.Result {
		t.Helper()
		req.Mode, req.MaxTokens = "reasoner", 24
		var streamed strings.Builder
		var on func(client.Event)
		if req.Stream {
			on = func(ev client.Event) {
				if ev.Type == "token" {
					streamed.WriteString(ev.Text)
				}
			}
		}
		res, err := c.Query(t.Context(), req, on)
		if err != nil {
			t.Fatal(err)
		}
		if req.Stream && streamed.String() != res.FinalAnswer {
			t.Fatalf("streamed %q, final %q", streamed.String(), res.FinalAnswer)
		}
		return res
	}
	for _, stream := range []bool{false, true} {
		plain := ask(client.QueryRequest{Query: "And then?", Stream: stream})
		hist := []client.Message{{Role: "system", Content: "You are terse."},
			{Role: "user", Content: "Tell me a story about a fox."}, {Role: "assistant", Content: "A fox ran."}}
		withHist := ask(client.QueryRequest{Query: "And then?", History: hist, Stream: stream})
		if p, h := plain.AgentResponses[0].Prompt, withHist.AgentResponses[0].Prompt; h <= p+8 {
			t.Fatalf("stream %v: prompt tokens %d with history, %d without: the history did not reach the model", stream, h, p)
		}
		stop := stopIn(t, plain.FinalAnswer)
		cut := ask(client.QueryRequest{Query: "And then?", Stop: []string{stop}, Stream: stream})
		if want := plain.FinalAnswer[:strings.Index(plain.FinalAnswer, stop)]; cut.FinalAnswer != want {
			t.Fatalf("stream %v: stop %q: answer %q, want %q (of %q)", stream, stop, cut.FinalAnswer, want, plain.FinalAnswer)
		}
	}
	for body, want := range map[string]string{
		`{"query":"q","history":[{"role":"tool","content":"x"}]}`: `history[0].role \"tool\"`,
		`{"query":"q","stop":["a","b","c","d","e"]}`:              "stop: 5 strings, at most 4",
		`{"query":"q","stop":[""]}`:                               "stop[0] is empty",
		`{"query":"q","top_p":1.5}`:                               "top_p 1.5",
		`{"query":"q","history":[{"role":"user","text":"x"}]}`:    `unknown field \"text\"`,
	} {
		apiCase{method: "POST", path: "/v1/swarm/query", body: body, status: 400, want: want}.run(t, "http://"+addr)
	}
}
