package nodetest

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node"
)

// HarmonyThought and HarmonyAnswer are a GPT-OSS chat answer in the
// harmony format: its reasoning on the analysis channel, its answer on the
// final one.
const (
	HarmonyThought = "The user asks for the capital of France; it is Paris."
	HarmonyFinal   = "Paris."
	HarmonyAnswer  = "<|channel|>analysis<|message|>" + HarmonyThought + "<|end|>" +
		"<|start|>assistant<|channel|>final<|message|>" + HarmonyFinal + "<|return|>"
)

// ReplayHarmony answers p's /swarm/moa/1.1.0 streams with HarmonyAnswer's
// tokens of model's vocabulary (a GPT-OSS file), decoded by its chat
// decoder and framed by the MoA server's own moa.TokenWriter: random
// weights never write harmony structure, so the tokens a trained GPT-OSS
// writes are replayed in place of sampling. Call it once p serves its
// roles (the node registers its handlers as it starts).
func ReplayHarmony(t testing.TB, p *Peer, model string) {
	t.Helper()
	tok, err := engine.LoadTokenizer(model)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := tok.Encode(HarmonyAnswer, false)
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

// HarmonyReasoner starts two peers: the second serves a synthetic GPT-OSS
// file as the reasoner and answers with HarmonyAnswer (ReplayHarmony);
// the first, which has no copy to check it with, asks it (moa.unverified
// ask) once it sees it. It returns the first peer's API address.
func HarmonyReasoner(t testing.TB) string {
	t.Helper()
	model := filepath.Join(t.TempDir(), "gptoss.gguf")
	if err := engine.Synth(context.Background(), model, engine.SynthSpec{Arch: "gptoss", Size: "tiny", Type: "f32", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	peers := Cluster(t, 2, func(i int, c *node.Config) {
		c.Engine.Threads, c.Engine.Context = 1, 256
		if i == 0 {
			c.MoA.Unverified = "ask" // no copy of the model to check the holder with
		} else {
			c.Roles = map[string]string{"reasoner": model}
		}
	})
	api := peers[0].APIAddr()
	Eventually(t, 30*time.Second, "the origin sees the reasoner", func() bool {
		resp, err := http.Get("http://" + api + "/v1/models/reasoner")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	ReplayHarmony(t, peers[1], model)
	return api
}
