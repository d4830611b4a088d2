package moa

import (
	"bufio"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
)

// harmonyAnswer is a GPT-OSS chat answer in the harmony format: its
// reasoning on the analysis channel, its answer on the final one.
const (
	harmonyAnswer = "<|channel|>analysis<|message|>" + harmonyThought + "<|end|>" +
		"<|start|>assistant<|channel|>final<|message|>Paris.<|return|>"
	harmonyThought = "The user asks for the capital of France; it is Paris."
)

// gptossModel is a tiny synthetic GPT-OSS (the real vocabulary's harmony
// tokens, random weights).
func gptossModel(t *testing.T) string {
	synthModel(t, "tiny", "f32") // sets modelDir: synthOther's file then outlives this test
	return synthOther(t, "gptoss", 11)
}

// replayHarmony answers p's MoA streams (of the protocol IDs given) with
// harmonyAnswer's tokens of the model's own vocabulary, decoded by its
// chat decoder and framed by the server's TokenWriter: random weights never
// write harmony structure, so the tokens a trained GPT-OSS writes are
// replayed in place of sampling. Each request is sent to reqs.
func replayHarmony(t *testing.T, p *testPeer, reqs chan<- *Request, ids ...protocol.ID) {
	t.Helper()
	replayHarmonyCut(t, p, reqs, 0, ids...)
}

// replayHarmonyCut is replayHarmony that, when cut > 0, ends the stream
// after sending cut frames, with no done frame: a peer that dies
// mid-answer; when cut < 0, it stops writing after -cut frames and holds
// the stream open until the caller resets it: a peer stuck mid-answer
// (its process alive, answering pings).
func replayHarmonyCut(t *testing.T, p *testPeer, reqs chan<- *Request, cut int, ids ...protocol.ID) {
	t.Helper()
	tok, err := engine.LoadTokenizer(gptossModel(t))
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := tok.Encode(harmonyAnswer, false)
	if err != nil {
		t.Fatal(err)
	}
	cid := p.srv.Roles()[0].ModelCID
	handler := func(st network.Stream) {
		defer st.Close()
		req, err := DecodeRequest(bufio.NewReader(st))
		if err != nil {
			st.Reset()
			return
		}
		if reqs != nil {
			reqs <- req
		}
		w := bufio.NewWriter(st)
		send := TokenWriter(w, st.Protocol())
		dec := tok.NewChatDecoder()
		n, sent := 0, 0
		for _, id := range tokens {
			n++
			if tok.IsEOG(id) {
				break
			}
			text, reasoning, err := dec.Step(id)
			if err != nil {
				st.Reset()
				return
			}
			if text == "" && reasoning == "" {
				continue
			}
			if cut > 0 && sent == cut {
				w.Flush()
				st.CloseWrite() // the frames sent arrive; no done frame follows
				return
			}
			if cut < 0 && sent == -cut {
				w.Flush()
				<-t.Context().Done() // stuck: the caller gives up on it
				return
			}
			if err := send(text, reasoning); err != nil {
				return
			}
			sent++
		}
		writeFrame(w, &Reply{Type: ReplyDone, Done: &Done{Role: req.Role, Model: "gpt-oss", ModelCID: cid, Tokens: n, Reason: "stop"}})
		w.Flush()
	}
	for _, id := range ids {
		p.h.SetStreamHandler(id, handler)
	}
}

// TestReasoningOverTheWire: a role model's reasoning (GPT-OSS's analysis
// channel) reaches the originator apart from its answer, on
// /swarm/moa/1.1.0: each agent's in Agent.Reasoning, never in its content,
// never streamed as the answer, never given to the aggregator; the
// aggregator's, the final answer's, streamed to OnReasoning as it is
// written, piece by piece, before the answer's first piece.
func TestReasoningOverTheWire(t *testing.T) {
	origin := newTestPeer(t, 4)
	b := newTestPeerWith(t, gptossModel, 4, Reasoner, Concise)
	c := newTestPeerWith(t, gptossModel, 4, Aggregator)
	reqs := make(chan *Request, 16)
	replayHarmony(t, b, nil, ReasoningProtocolID, ProtocolID)
	replayHarmony(t, c, reqs, ReasoningProtocolID, ProtocolID)
	o := &Originator{Host: origin.h, View: viewOf(origin, b, c)}
	var streamed, thought strings.Builder
	pieces, early := 0, 0 // reasoning pieces, those before any text
	res, err := o.Ask(t.Context(), Query{Prompt: "What is the capital of France?", MaxTokens: 64,
		OnToken: func(s string) { streamed.WriteString(s) },
		OnReasoning: func(s string) {
			pieces++
			if streamed.Len() == 0 {
				early++
			}
			thought.WriteString(s)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.AgentResponses) != 2 {
		t.Fatalf("agents: %+v", res.AgentResponses)
	}
	for _, a := range append(res.AgentResponses, *res.Aggregator) {
		if a.Error != "" || a.Content != "Paris." || a.Reasoning != harmonyThought {
			t.Errorf("%s: content %q reasoning %q error %q; want %q apart from %q", a.Role, a.Content, a.Reasoning, a.Error, harmonyThought, "Paris.")
		}
	}
	if res.FinalAnswer != "Paris." || streamed.String() != "Paris." {
		t.Errorf("final answer %q, streamed %q; want the answer alone", res.FinalAnswer, streamed.String())
	}
	if thought.String() != harmonyThought || pieces < 5 || early != pieces {
		t.Errorf("streamed reasoning %q in %d pieces, %d before the answer; want %q as it is written, before the answer",
			thought.String(), pieces, early, harmonyThought)
	}
	agg := <-reqs
	var prompt strings.Builder
	for _, m := range agg.Messages {
		prompt.WriteString(m.Content)
	}
	if agg.Role != Aggregator || strings.Contains(prompt.String(), "capital of France; it is") || !strings.Contains(prompt.String(), "Paris.") {
		t.Errorf("the aggregator was asked (%s):\n%s\nwant the agents' answers without their reasoning", agg.Role, prompt.String())
	}
}

// TestReasoningAggregatorFails: an aggregator that dies after writing part
// of its reasoning leaves the best agent's answer final; its reasoning is
// streamed whole after what the aggregator wrote and a blank line, and the
// result's reasoning is the final answer's writer's alone.
func TestReasoningAggregatorFails(t *testing.T) {
	origin := newTestPeer(t, 4)
	b := newTestPeerWith(t, gptossModel, 4, Reasoner, Concise)
	c := newTestPeerWith(t, gptossModel, 4, Aggregator)
	replayHarmony(t, b, nil, ReasoningProtocolID, ProtocolID)
	replayHarmonyCut(t, c, nil, 3, ReasoningProtocolID, ProtocolID)
	o := &Originator{Host: origin.h, View: viewOf(origin, b, c)}
	var streamed, thought strings.Builder
	res, err := o.Ask(t.Context(), Query{Prompt: "What is the capital of France?", MaxTokens: 64,
		OnToken: func(s string) { streamed.WriteString(s) }, OnReasoning: func(s string) { thought.WriteString(s) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Aggregator == nil || res.Aggregator.Error == "" {
		t.Fatalf("aggregator: %+v; want it failed", res.Aggregator)
	}
	partial, best, ok := strings.Cut(thought.String(), "\n\n")
	if !ok || partial == "" || !strings.HasPrefix(harmonyThought, partial) || best != harmonyThought {
		t.Errorf("streamed reasoning %q; want a prefix of %q, a blank line, then it whole", thought.String(), harmonyThought)
	}
	if res.FinalAnswer != "Paris." || streamed.String() != "Paris." {
		t.Errorf("final answer %q, streamed %q", res.FinalAnswer, streamed.String())
	}
}

// TestReasoningFailover: a role asked directly whose best holder dies, or
// is stuck, after writing only reasoning (no answer text yet) is asked of
// its next holder: its reasoning streams after what the first wrote and a
// blank line, and its answer is the answer; the result's reasoning is the
// answering holder's alone.
func TestReasoningFailover(t *testing.T) {
	for _, c := range []struct {
		name string
		cut  int
	}{{"dies", 3}, {"stuck", -3}} {
		t.Run(c.name, func(t *testing.T) {
			origin := newTestPeer(t, 4)
			first := newTestPeerWith(t, gptossModel, 4, Reasoner)
			lives := newTestPeerWith(t, gptossModel, 4, Reasoner)
			replayHarmonyCut(t, first, nil, c.cut, ReasoningProtocolID, ProtocolID)
			replayHarmony(t, lives, nil, ReasoningProtocolID, ProtocolID)
			o := &Originator{Host: origin.h, View: viewOf(origin, first, lives),
				Progress: swarm.Progress{Floor: 500 * time.Millisecond, ProbeTimeout: 500 * time.Millisecond, MaxStall: 2 * time.Second}}
			o.stats.observe(first.h.ID(), 0, 1000) // ranked first
			o.stats.observe(lives.h.ID(), 0, 4)
			var streamed, thought strings.Builder
			res, err := o.Direct(t.Context(), Reasoner, Query{Prompt: "What is the capital of France?", MaxTokens: 64,
				OnToken: func(s string) { streamed.WriteString(s) }, OnReasoning: func(s string) { thought.WriteString(s) }})
			if err != nil {
				t.Fatal(err)
			}
			a := res.AgentResponses[0]
			if a.Peer != lives.h.ID().String() || len(a.Skipped) != 1 || a.Content != "Paris." || a.Reasoning != harmonyThought {
				t.Fatalf("answered by %s (skipped %q): %q, reasoning %q; want the second holder's", a.Peer, a.Skipped, a.Content, a.Reasoning)
			}
			partial, rest, ok := strings.Cut(thought.String(), "\n\n")
			if !ok || partial == "" || !strings.HasPrefix(harmonyThought, partial) || rest != harmonyThought {
				t.Errorf("streamed reasoning %q; want the first holder's start, a blank line, then the second's whole", thought.String())
			}
			if streamed.String() != "Paris." {
				t.Errorf("streamed answer %q, want the second holder's alone", streamed.String())
			}
			t.Logf("skipped: %q", a.Skipped)
		})
	}
}

// TestReasoningOldPeers: peers of /swarm/moa/1.0.0 and of 1.1.0 answer
// each other both ways. A new caller offers 1.1.0 first and an old server
// answers on 1.0.0, without reasoning; an old caller opens 1.0.0 and gets
// only frames its strict decoder knows; reasoning on a 1.0.0 stream is a
// protocol error.
func TestReasoningOldPeers(t *testing.T) {
	origin := newTestPeer(t, 4)
	b := newTestPeerWith(t, gptossModel, 4, Reasoner)
	replayHarmony(t, b, nil, ReasoningProtocolID, ProtocolID)
	ask := &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "The capital of France?"}}, MaxTokens: 64}
	call := func(p *testPeer) (text, reasoning string, err error) {
		origin.h.Peerstore().AddAddrs(p.h.ID(), p.h.Addrs(), time.Hour)
		var tb, rb strings.Builder
		_, err = Call(t.Context(), origin.h, p.h.ID(), ask, func(t, r string) { tb.WriteString(t); rb.WriteString(r) })
		return tb.String(), rb.String(), err
	}
	if text, reasoning, err := call(b); err != nil || text != "Paris." || reasoning != harmonyThought {
		t.Fatalf("new to new: %q %q %v", text, reasoning, err)
	}

	// An old caller: it opens 1.0.0 and decodes strictly into the reply
	// frame it knows, which has no reasoning.
	type oldReply struct {
		Type  string     `json:"type"`
		Text  string     `json:"text,omitempty"`
		Done  *Done      `json:"done,omitempty"`
		Error *WireError `json:"error,omitempty"`
	}
	old := func(id protocol.ID) (string, error) {
		st, err := origin.h.NewStream(t.Context(), b.h.ID(), id)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := writeFrame(st, ask); err != nil {
			t.Fatal(err)
		}
		st.CloseWrite()
		r := bufio.NewReader(st)
		var text strings.Builder
		for {
			_, frame, err := frames.Read(r, maxFrame, nil)
			if err != nil {
				return text.String(), err
			}
			var rep oldReply
			if err := frames.DecodeJSON(frame, &rep); err != nil {
				return text.String(), err
			}
			text.WriteString(rep.Text)
			if rep.Type != ReplyToken {
				return text.String(), nil
			}
		}
	}
	if text, err := old(ProtocolID); err != nil || text != "Paris." {
		t.Fatalf("old caller on 1.0.0: %q %v, want the answer in frames it knows", text, err)
	}
	// Why the version: an old decoder refuses a reasoning frame.
	if _, err := old(ReasoningProtocolID); !errors.Is(err, ErrProtocol) {
		t.Fatalf("reasoning frame read as a 1.0.0 frame: %v, want a protocol error", err)
	}

	// An old server: 1.0.0 only, as identify tells its callers. The new
	// caller falls back to it.
	d := newTestPeerWith(t, gptossModel, 4, Reasoner)
	d.h.RemoveStreamHandler(ReasoningProtocolID)
	replayHarmony(t, d, nil, ProtocolID)
	if text, reasoning, err := call(d); err != nil || text != "Paris." || reasoning != "" {
		t.Fatalf("new caller, old server: %q %q %v, want the answer without reasoning", text, reasoning, err)
	}
	// A server that sends reasoning on 1.0.0 breaks the protocol.
	d.h.SetStreamHandler(ProtocolID, func(st network.Stream) {
		defer st.Close()
		DecodeRequest(bufio.NewReader(st))
		writeFrame(st, &Reply{Type: ReplyToken, Reasoning: "thinking"})
	})
	if _, _, err := call(d); !errors.Is(err, ErrProtocol) {
		t.Fatalf("reasoning on 1.0.0: %v, want a protocol error", err)
	}
}
