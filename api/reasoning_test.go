package api_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// A GPT-OSS chat answer in the harmony format: reasoning on the analysis
// channel, the answer on the final one.
const (
	harmonyThought = "The user asks for the capital of France; it is Paris."
	harmonyAnswer  = "<|channel|>analysis<|message|>" + harmonyThought + "<|end|>" +
		"<|start|>assistant<|channel|>final<|message|>Paris.<|return|>"
)

// replayHarmony answers h's /swarm/moa/1.1.0 streams with harmonyAnswer's
// tokens of model's vocabulary, decoded by its chat decoder and framed by
// the MoA server's own TokenWriter: random weights never write harmony
// structure, so the tokens a trained GPT-OSS writes are replayed in place
// of sampling.
func replayHarmony(t *testing.T, p *nodetest.Peer, model string) {
	t.Helper()
	tok, err := engine.LoadTokenizer(model)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := tok.Encode(harmonyAnswer, false)
	if err != nil {
		t.Fatal(err)
	}
	p.Host().SetStreamHandler(moa.ReasoningProtocolID, func(st network.Stream) {
		defer st.Close()
		req, err := moa.DecodeRequest(bufio.NewReader(st))
		if err != nil {
			st.Reset()
			return
		}
		w := bufio.NewWriter(st)
		send := moa.TokenWriter(w, st.Protocol())
		dec := tok.NewChatDecoder()
		for _, id := range tokens {
			if tok.IsEOG(id) {
				break
			}
			text, reasoning, err := dec.Step(id)
			if err == nil && (text != "" || reasoning != "") {
				err = send(text, reasoning)
			}
			if err != nil {
				st.Reset()
				return
			}
		}
		// The done frame, as the protocol frames it: a uvarint length,
		// then JSON.
		b, _ := json.Marshal(moa.Reply{Type: moa.ReplyDone, Done: &moa.Done{Role: req.Role, Model: "gpt-oss", Tokens: len(tokens), Reason: "stop"}})
		w.Write(binary.AppendUvarint(nil, uint64(len(b))))
		w.Write(b)
		w.Flush()
	})
}

// TestReasoningContent: a GPT-OSS answer's reasoning reaches an OpenAI
// client apart from its answer, as message.reasoning_content and streamed
// delta.reasoning_content, and /v1/swarm/query has it as reasoning: on
// real peers, the role peer's answer the tokens of a harmony answer
// (replayHarmony) sent over the real MoA wire.
func TestReasoningContent(t *testing.T) {
	model := filepath.Join(t.TempDir(), "gptoss.gguf")
	if err := engine.Synth(context.Background(), model, engine.SynthSpec{Arch: "gptoss", Size: "tiny", Type: "f32", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	peers := nodetest.Cluster(t, 2, func(i int, c *node.Config) {
		c.Engine.Threads, c.Engine.Context = 1, 256
		if i == 0 {
			c.MoA.Unverified = "ask" // no copy of the model to check the holder with
		} else {
			c.Roles = map[string]string{"reasoner": model}
		}
	})
	api := peers[0].APIAddr()
	waitModel(t, api, "reasoner")
	replayHarmony(t, peers[1], model)
	body := `{"model":"reasoner","max_tokens":64,"messages":[{"role":"user","content":"The capital of France?"}]}`

	whole := chat(t, api, body, false)
	if whole.status != 200 || whole.text != "Paris." || whole.reasoning != harmonyThought {
		t.Fatalf("chat completion: %d content %q reasoning_content %q %s; want %q apart from %q",
			whole.status, whole.text, whole.reasoning, whole.errBody, harmonyThought, "Paris.")
	}
	streamed := chat(t, api, body, true)
	if streamed.status != 200 || streamed.text != "Paris." || streamed.reasoning != harmonyThought {
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
	if res.FinalAnswer != "Paris." || res.Reasoning != harmonyThought || len(res.AgentResponses) != 1 ||
		res.AgentResponses[0].Content != "Paris." || res.AgentResponses[0].Reasoning != harmonyThought {
		t.Fatalf("query answer: %s", b)
	}
}
