package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/nodetest"
)

// TestReasoningContent: a GPT-OSS answer's reasoning reaches an OpenAI
// client apart from its answer, as message.reasoning_content and streamed
// delta.reasoning_content, and /v1/swarm/query has it as reasoning: on
// real peers, the role peer's answer the tokens of a harmony answer
// (replayHarmony) sent over the real MoA wire.
func TestReasoningContent(t *testing.T) {
	api := nodetest.HarmonyReasoner(t)
	body := `{"model":"reasoner","max_tokens":64,"messages":[{"role":"user","content":"The capital of France?"}]}`

	whole := chat(t, api, body, false)
	if whole.status != 200 || whole.text != nodetest.HarmonyFinal || whole.reasoning != nodetest.HarmonyThought {
		t.Fatalf("chat completion: %d content %q reasoning_content %q %s; want %q apart from %q",
			whole.status, whole.text, whole.reasoning, whole.errBody, nodetest.HarmonyThought, nodetest.HarmonyFinal)
	}
	streamed := chat(t, api, body, true)
	if streamed.status != 200 || streamed.text != nodetest.HarmonyFinal || streamed.reasoning != nodetest.HarmonyThought {
		t.Fatalf("streamed: %d content %q reasoning_content %q %s", streamed.status, streamed.text, streamed.reasoning, streamed.errBody)
	}

	resp, err := http.Post("http://"+api+"/v1/swarm/query", "application/json",
		strings.NewReader(`{"query":"The capital of France?","mode":"reasoner","max_tokens":64}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var res struct {
		FinalAnswer    string `json:"final_answer"`
		Reasoning      string `json:"reasoning"`
		AgentResponses []struct {
			Content, Reasoning string
		} `json:"agent_responses"`
	}
	if err := json.Unmarshal(b, &res); err != nil || resp.StatusCode != 200 {
		t.Fatalf("query: %d %s %v", resp.StatusCode, b, err)
	}
	if res.FinalAnswer != nodetest.HarmonyFinal || res.Reasoning != nodetest.HarmonyThought || len(res.AgentResponses) != 1 ||
		res.AgentResponses[0].Content != nodetest.HarmonyFinal || res.AgentResponses[0].Reasoning != nodetest.HarmonyThought {
		t.Fatalf("query answer: %s", b)
	}
}
