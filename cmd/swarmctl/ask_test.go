package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
)

// answering is a daemon's /v1/swarm/query as the API serves it: res as a
// JSON body, or, streamed, its final answer as a token event and then a
// result event.
func answering(t *testing.T, res *answer.Result) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req client.QueryRequest
		if r.URL.Path != "/v1/swarm/query" || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		body, _ := json.Marshal(res)
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		tok, _ := json.Marshal(map[string]string{"text": res.FinalAnswer})
		fmt.Fprintf(w, "event: token\ndata: %s\n\nevent: result\ndata: %s\n\n", tok, body)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// TestAskIncomplete: an answer cut off by its deadline is printed as far
// as it goes, marked partial in the footer, and exits 3; --json prints
// the result and exits 3 too. A whole answer exits 0; a pipeline answer
// with layers nobody could check says which on stderr (in --json, under
// pipeline.unchecked) and exits 0.
func TestAskIncomplete(t *testing.T) {
	cut := &answer.Result{Mode: "writer", FinalAnswer: "The", AgentsResponded: 1, AgentResponses: []answer.Agent{
		{Role: "writer", Peer: "12D3KooWAbcdefgh", Content: "The", Tokens: 1, Partial: true, PartialReason: "cut off by its deadline"}}}
	whole := &answer.Result{Mode: "writer", FinalAnswer: "The sky.", AgentsResponded: 1, AgentResponses: []answer.Agent{
		{Role: "writer", Peer: "12D3KooWAbcdefgh", Content: "The sky.", Tokens: 3, Done: "stop"}}}
	piped := &answer.Result{Mode: "pipeline", FinalAnswer: "The", Pipeline: &answer.Pipeline{Model: "tiny", Text: "The",
		Tokens: []int32{1}, Done: "cancel"}}
	// A whole pipeline answer whose last layers one peer alone holds.
	unchecked := &answer.Result{Mode: "pipeline", FinalAnswer: "The sky.", Pipeline: &answer.Pipeline{Model: "tiny",
		Text: "The sky.", Tokens: []int32{1, 2, 3}, Done: "stop", Unchecked: []answer.Hop{{Peer: "12D3KooWAbcdefgh", Start: 2, End: 4}}}}
	// A peer died mid-answer beside another agent; the aggregator's whole
	// answer is the final one: degraded, not cut short.
	aggregated := &answer.Result{Mode: "moa", FinalAnswer: "The sky is blue.", AgentsResponded: 2, AgentResponses: []answer.Agent{
		{Role: "writer", Peer: "12D3KooWAbcdefgh", Content: "The", Tokens: 1, Partial: true, PartialReason: "stream reset"},
		{Role: "reasoner", Peer: "12D3KooWBcdefghi", Content: "Blue.", Tokens: 2, Done: "stop"}},
		Aggregator: &answer.Agent{Role: "aggregator", Peer: "12D3KooWCdefghij", Content: "The sky is blue.", Tokens: 5, Done: "stop"}}
	cases := []struct {
		name     string
		res      *answer.Result
		json     bool
		code     int
		wantErrs []string
	}{
		{"partial agent", cut, false, 3, []string{"(partial: cut off by its deadline)", "swarmctl: the answer is incomplete: writer@"}},
		{"partial agent json", cut, true, 3, []string{"swarmctl: the answer is incomplete"}},
		{"partial pipeline", piped, false, 3, []string{"partial: cut off by its deadline", "incomplete: the pipeline was cut off"}},
		{"whole", whole, false, 0, nil},
		{"unchecked pipeline", unchecked, false, 0, []string{"unchecked: layers [2,4) on "}},
		{"unchecked pipeline json", unchecked, true, 0, []string{}},
		{"aggregated beside a partial agent", aggregated, false, 0, []string{"(partial: stream reset)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"--api", answering(t, c.res), "ask", "--timeout", "1ms", "why?"}
			if c.json {
				args = append(args, "--json")
			}
			code, out, errs := ctl(t, nil, args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stdout %q, stderr %q", code, c.code, out, errs)
			}
			if !strings.Contains(out, c.res.FinalAnswer) {
				t.Errorf("stdout %q lacks the answer %q", out, c.res.FinalAnswer)
			}
			if c.json && c.res == unchecked && !strings.Contains(out, `"unchecked": [`) {
				t.Errorf("--json stdout %q lacks the pipeline's unchecked layers", out)
			} else if c.json && c.res != unchecked && !strings.Contains(out, `"partial": true`) {
				t.Errorf("--json stdout %q lacks the result's partial", out)
			}
			for _, w := range c.wantErrs {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr %q lacks %q", errs, w)
				}
			}
			if c.code == 0 && strings.Contains(errs, "incomplete") {
				t.Errorf("a whole answer's stderr says incomplete: %q", errs)
			}
		})
	}
}
