package pipeline

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// TestPipelineReasoning: the originator's own decoding of a GPT-OSS chat
// answer hands its reasoning (the harmony analysis channel) apart from its
// text, streamed and whole (answer.Pipeline.Reasoning). Random weights
// never write harmony structure, so the route's last hop answers the
// tokens a trained GPT-OSS writes, of the real vocabulary, in place of its
// own: the route and the originator are otherwise the real ones.
func TestPipelineReasoning(t *testing.T) {
	const thought = "The user asks for the capital of France; it is Paris."
	full, cid := model(t, "gptoss")
	tok, err := engine.LoadTokenizer(full)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode("<|channel|>analysis<|message|>"+thought+"<|end|>"+
		"<|start|>assistant<|channel|>final<|message|>Paris.<|return|>", false)
	if err != nil {
		t.Fatal(err)
	}
	origin := newStagePeer(t)
	first := servingPeers(t, full, cid, [2]int{0, 2})
	last := newLiar(t, full, cid, 2, 4)
	last.realOnly = true
	var step atomic.Int64
	last.result = func(r *Result) {
		k := step.Add(1) - 1
		if k >= int64(len(ids)) {
			return
		}
		r.Token = ids[k]
		for i := range r.Logits { // where the originator samples: the same token
			r.Logits[i] = 0
		}
		if len(r.Logits) > int(ids[k]) {
			r.Logits[ids[k]] = 100
		}
	}
	o := originatorForFile(t, full, origin, first[0], last.stagePeer)
	var text, reasoning strings.Builder
	think := false
	res, err := o.Generate(t.Context(), Request{Messages: []engine.Message{{Role: "user", Content: "The capital of France?"}},
		Think: &think, MaxTokens: 2 * len(ids), Sampling: greedy,
		OnToken: func(s string) { text.WriteString(s) }, OnReasoning: func(s string) { reasoning.WriteString(s) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "Paris." || res.Reasoning != thought || res.Done != "stop" {
		t.Fatalf("answer %q reasoning %q (%s), want %q apart from %q", res.Text, res.Reasoning, res.Done, thought, "Paris.")
	}
	if text.String() != res.Text || reasoning.String() != res.Reasoning {
		t.Fatalf("streamed answer %q reasoning %q, want what the result has", text.String(), reasoning.String())
	}
}
