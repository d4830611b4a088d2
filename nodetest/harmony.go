package nodetest

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/moa"
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
