package moa

import (
	"bufio"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/ledger"
	"github.com/llmswarm/llmswarm/swarm"
)

// plainReasoner is the reasoner's own answer to q, undrafted.
func plainReasoner(t *testing.T, o *Originator, r *testPeer, q Query) string {
	t.Helper()
	var text strings.Builder
	if _, err := Call(t.Context(), o.Host, r.h.ID(), o.request(Reasoner, q, q.Prompt), func(s, _ string) { text.WriteString(s) }); err != nil {
		t.Fatal(err)
	}
	return text.String()
}

// Speed mode with a drafter and a reasoner on other peers sharing a
// tokenizer: the reasoner answers, drafted over the network by the
// drafter, and the answer is the reasoner's own undrafted answer (greedy,
// f32), in fewer steps than tokens. A drafter with other weights (same
// tokenizer) is mostly refused and changes nothing. The draft length is
// fixed at 4 for that; chosen by cost (the default), the answer is still
// the same. A drafter with another tokenizer is never
// paired, and speed mode verifies its text instead.
func TestSpeculativeSpeedMode(t *testing.T) {
	origin := newTestPeer(t, 1)
	reasoner := newTestPeer(t, 2, Reasoner)
	same := newTestPeer(t, 2, Drafter)
	other := newTestPeerWith(t, func(t *testing.T) string { return synthOther(t, "qwen3", 11) }, 2, Drafter)
	q := Query{Prompt: "Why do swarms draft?", Mode: ModeSpeed, MaxTokens: 32}
	var mu sync.Mutex
	drafted := map[peer.ID]int64{} // the drafter's work the reasoner acknowledged
	reasoner.srv.Acknowledge = func(p peer.ID, it ledger.Item) {
		mu.Lock()
		defer mu.Unlock()
		if it.Kind == ledger.KindDraft {
			drafted[p] += it.Tokens
		}
	}
	for _, c := range []struct {
		name     string
		d        *testPeer
		agrees   bool
		min, max int
	}{{"same model", same, true, 4, 4}, {"other weights", other, false, 4, 4}, {"by cost", same, true, 0, 0}} {
		t.Run(c.name, func(t *testing.T) {
			reasoner.srv.DraftMin, reasoner.srv.DraftMax = c.min, c.max
			connect(t, reasoner, c.d)
			o := &Originator{Host: origin.h, View: viewOf(origin, reasoner, c.d)}
			want := plainReasoner(t, o, reasoner, q)
			res, streamed := askDrafted(t, o, q)
			if len(res.AgentResponses) != 1 || res.AgentResponses[0].Role != Reasoner {
				t.Fatalf("agents: %+v", res.AgentResponses)
			}
			a := res.AgentResponses[0]
			if a.Content != want || res.FinalAnswer != want || streamed != want {
				t.Fatalf("drafted answer %q (streamed %q)\nthe reasoner's own %q", a.Content, streamed, want)
			}
			d := a.Draft
			if d == nil || d.Peer != c.d.h.ID().String() || d.Rounds == 0 || d.Error != "" {
				t.Fatalf("draft %+v", d)
			}
			if c.min == 0 {
				// How much the cost model drafts here depends on measured
				// times (TestSpecCost checks its choices); the answer may
				// not.
			} else if c.agrees && (d.Accepted*10 < d.Drafted*9 || d.Rounds*2 > a.Tokens) {
				t.Fatalf("the same model drafting: %d of %d accepted in %d rounds for %d tokens", d.Accepted, d.Drafted, d.Rounds, a.Tokens)
			}
			if !c.agrees && d.Accepted*2 > d.Drafted {
				t.Fatalf("other weights drafting: %d of %d accepted", d.Accepted, d.Drafted)
			}
			t.Logf("%d of %d drafts accepted in %d rounds for %d tokens", d.Accepted, d.Drafted, d.Rounds, a.Tokens)
			mu.Lock()
			work := drafted[c.d.h.ID()]
			drafted[c.d.h.ID()] = 0
			mu.Unlock()
			if work < int64(d.Drafted) {
				t.Fatalf("the reasoner acknowledged %d tokens of the drafter's work, which proposed %d", work, d.Drafted)
			}
		})
	}
	t.Run("other tokenizer", func(t *testing.T) {
		llama := newTestPeerWith(t, func(t *testing.T) string { return synthOther(t, "llama", 7) }, 2, Drafter)
		if llama.srv.Roles()[0].Vocab == reasoner.srv.Roles()[0].Vocab {
			t.Fatal("llama and qwen3 synthetic models share a tokenizer fingerprint")
		}
		o := &Originator{Host: origin.h, View: viewOf(origin, reasoner, llama)}
		res, err := o.Ask(t.Context(), Query{Prompt: "What is 2+2?", Mode: ModeSpeed, MaxTokens: 6})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.AgentResponses) != 2 || res.AgentResponses[0].Role != Drafter || res.AgentResponses[1].Draft != nil {
			t.Fatalf("speed mode with another tokenizer: %+v", res.AgentResponses)
		}
	})
}

// synthOther writes a tiny f32 model of arch with weights from seed.
func synthOther(t *testing.T, arch string, seed uint64) string {
	t.Helper()
	modelsMu.Lock()
	defer modelsMu.Unlock()
	key := arch + "-other"
	if p, ok := models[key]; ok {
		return p
	}
	p := filepath.Join(t.TempDir(), key+".gguf")
	if modelDir != "" {
		p = filepath.Join(modelDir, key+".gguf")
	}
	if err := engine.Synth(context.Background(), p, engine.SynthSpec{Arch: arch, Size: "tiny", Type: "f32", Seed: seed}); err != nil {
		t.Fatal(err)
	}
	models[key] = p
	return p
}

// askDrafted asks q and returns the result and the text streamed. It asks
// again (at most 4 more times) while an answer ended before its draft
// answered once: the draft opens beside the answer, which never waits for
// it, and on a loaded machine a short answer may end first, showing
// neither rounds nor an error.
func askDrafted(t *testing.T, o *Originator, q Query) (*answer.Result, string) {
	t.Helper()
	for i := 0; ; i++ {
		var streamed strings.Builder
		q := q
		q.OnToken = func(s string) { streamed.WriteString(s) }
		res, err := o.Ask(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		early := false
		for _, a := range res.AgentResponses {
			early = early || a.Draft != nil && a.Draft.Rounds == 0 && a.Draft.Error == ""
		}
		if !early || i == 4 {
			return res, streamed.String()
		}
	}
}

// connect connects from to to beforehand, as peers of a swarm are: the
// draft opens beside the answer, which never waits for it, and a dial on a
// loaded machine could outlast a short answer.
func connect(t *testing.T, from, to *testPeer) {
	t.Helper()
	if err := from.h.Connect(t.Context(), peer.AddrInfo{ID: to.h.ID(), Addrs: to.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

// liar is a peer that announces a drafter with the reasoner's tokenizer and
// speaks the draft protocol, but lies in its answers.
func liar(t *testing.T, fp string, vocab int, lie func(step DraftStep) DraftReply) *testPeer {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	p := &testPeer{h: h, srv: NewServer(nil, nil)}
	t.Cleanup(func() { h.Close() })
	h.SetStreamHandler(DraftProtocolID, func(st network.Stream) {
		defer st.Close()
		r := bufio.NewReader(st)
		var open DraftOpen
		if readFrame(r, &open, nil, 0) != nil {
			return
		}
		writeFrame(st, &DraftReply{Vocab: open.Vocab, VocabSize: vocab, Context: 2048})
		for {
			var step DraftStep
			if readFrame(r, &step, nil, 0) != nil {
				return
			}
			writeFrame(st, lie(step))
		}
	})
	return p
}

// A drafter that lies (proposals outside the vocabulary, more than asked,
// random tokens) or hangs costs the answer nothing: the reasoner checks
// each reply, drops a draft that breaks the protocol (and the originator
// leaves that drafter out of the next speed questions), never waits for
// one that hangs, and answers on its own, the same text.
func TestSpeculativeSpeedModeLiars(t *testing.T) {
	origin := newTestPeer(t, 1)
	reasoner := newTestPeer(t, 2, Reasoner)
	reasoner.srv.DraftTimeout = 300 * time.Millisecond
	reasoner.srv.DraftMin = 1
	rm := reasoner.srv.roles[Reasoner]
	fp, vocab := rm.Model.Tokenizer().Fingerprint(), rm.Model.Tokenizer().VocabSize()
	n := int32(0)
	lies := map[string]func(DraftStep) DraftReply{
		"outside the vocabulary": func(s DraftStep) DraftReply { return DraftReply{Tokens: []int32{int32(vocab) + 5}} },
		"more than asked":        func(s DraftStep) DraftReply { return DraftReply{Tokens: make([]int32, s.N+3)} },
		"random": func(s DraftStep) DraftReply {
			out := make([]int32, s.N)
			for i := range out {
				n = (n*31 + 17) % int32(vocab)
				out[i] = n
			}
			return DraftReply{Tokens: out}
		},
		"hangs": func(s DraftStep) DraftReply { time.Sleep(5 * time.Second); return DraftReply{} },
	}
	q := Query{Prompt: "Why do swarms draft?", Mode: ModeSpeed, MaxTokens: 24}
	var want string
	for name, lie := range lies {
		t.Run(name, func(t *testing.T) {
			l := liar(t, fp, vocab, lie)
			v := viewOf(origin, reasoner)
			origin.h.Peerstore().AddAddrs(l.h.ID(), l.h.Addrs(), time.Hour)
			v.Observe(&gossip.Capability{PeerID: l.h.ID().String(), Seq: 9, Load: gossip.Load{Capacity: 4},
				Roles: []gossip.Role{{Role: Drafter, ModelCID: rm.CID, Vocab: fp}}}, time.Now())
			// Verified (it answers challenges honestly): its drafts are
			// what the reasoner must catch.
			v.Trust().Pass(l.h.ID(), swarm.RoleClaim(rm.CID))
			o := &Originator{Host: origin.h, View: v}
			if want == "" {
				want = plainReasoner(t, o, reasoner, q)
			}
			connect(t, reasoner, l)
			ask := func() (answer.Agent, time.Duration) {
				start := time.Now()
				res, err := o.Ask(t.Context(), q)
				if err != nil {
					t.Fatal(err)
				}
				a := res.AgentResponses[0]
				if len(res.AgentResponses) != 1 || a.Content != want || a.Draft == nil || a.Draft.Peer != l.h.ID().String() {
					t.Fatalf("answer %q (want %q), draft %+v", a.Content, want, a.Draft)
				}
				return a, time.Since(start)
			}
			a, took := ask()
			// The draft opens beside the answer, which never waits for it:
			// on a loaded machine a short answer may end before the draft
			// has answered once, and then shows neither rounds nor error.
			for i := 0; i < 4 && name != "hangs" && a.Draft.Rounds == 0 && a.Draft.Error == ""; i++ {
				a, took = ask()
			}
			switch name {
			case "random":
				if a.Draft.Rounds == 0 || a.Draft.Error != "" {
					t.Fatalf("random proposals: %+v", a.Draft)
				}
			case "hangs":
				// Opened beside the answer, the draft never got to run the
				// prompt: the answer never waited for it.
				if a.Draft.Rounds != 0 {
					t.Fatalf("a hung drafter drafted: %+v", a.Draft)
				}
			default:
				if a.Draft.Error == "" || !o.badDrafters.recent(l.h.ID()) {
					t.Fatalf("%s: the draft was not dropped, or the drafter is still paired: %+v", name, a.Draft)
				}
			}
			if took > 4*time.Second {
				t.Fatalf("%s: the answer took %s", name, took)
			}
			t.Logf("%s: %+v", name, *a.Draft)
		})
	}
}

// The draft protocol refuses what does not fit: another tokenizer, a
// step that keeps positions the session never held, asks for no
// proposals or too many, or names tokens outside the vocabulary; a
// request naming a draft peer that is no peer id is refused.
func TestDraftProtocolRefuses(t *testing.T) {
	d := newTestPeer(t, 2, Drafter)
	c := newTestPeer(t, 1)
	c.h.Peerstore().AddAddrs(d.h.ID(), d.h.Addrs(), time.Hour)
	tok := d.srv.roles[Drafter].Model.Tokenizer()
	ai := d.h.Peerstore().PeerInfo(d.h.ID())
	ai.Addrs = d.h.Addrs()
	if _, err := DialDraft(t.Context(), c.h, ai, DraftOpen{Vocab: "00ff"}, tok.VocabSize(), 0); err == nil || !strings.Contains(err.Error(), "tokenizer") {
		t.Fatalf("another tokenizer: %v", err)
	}
	for name, step := range map[string]DraftStep{
		"keep past the end": {Keep: 5, Tokens: []int32{1}, N: 2},
		"no proposals":      {Tokens: []int32{1}, N: 0},
		"too many":          {Tokens: []int32{1}, N: engine.MaxSpecK + 1},
		"outside vocab":     {Tokens: []int32{int32(tok.VocabSize())}, N: 2},
		"no tokens":         {N: 2},
	} {
		rd, err := DialDraft(t.Context(), c.h, ai, DraftOpen{Vocab: tok.Fingerprint()}, tok.VocabSize(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rd.roundTrip(t.Context(), &step, 0); !errors.Is(err, ErrBadRequest) || strings.Count(err.Error(), "bad request") != 1 {
			t.Errorf("%s: %v, want one bad request, said once", name, err)
		}
		rd.Close()
	}
	rd, err := DialDraft(t.Context(), c.h, ai, DraftOpen{Vocab: tok.Fingerprint()}, tok.VocabSize(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	props, _, err := rd.Propose(t.Context(), []int32{3, 4, 5}, 4)
	if err != nil || len(props) != 4 || rd.Pos() != 6 {
		t.Fatalf("proposals %v at %d: %v", props, rd.Pos(), err)
	}
	bad := &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "x"}}, Draft: &DraftPeer{Peer: "not-a-peer"}}
	if err := bad.Validate(); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("draft peer %q: %v", bad.Draft.Peer, err)
	}
}

// One peer gets at most 8 draft streams at once, whatever the drafter's
// own share of its slots: the protocol's resource-manager limits refuse
// the others before the handler reads a byte.
func TestDraftStreamsBoundedPerPeer(t *testing.T) {
	srv := rcmgrHost(t, 256<<20)
	NewServer(srv, nil) // no drafter: each session held opens, then is refused
	cli, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	cli.Peerstore().AddAddrs(srv.ID(), srv.Addrs(), time.Hour)
	var held []network.Stream
	for range 12 {
		st, err := cli.NewStream(t.Context(), srv.ID(), DraftProtocolID)
		if err != nil {
			continue
		}
		// The handler waits for the open frame: a stream it took stays
		// open; one the limits refused is reset.
		st.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		var b [1]byte
		if _, err := st.Read(b[:]); errors.Is(err, network.ErrReset) {
			continue
		}
		held = append(held, st)
	}
	if len(held) == 0 || len(held) > 8 {
		t.Fatalf("%d of 12 draft streams from one peer held open (at most 8)", len(held))
	}
	t.Logf("%d of 12 draft streams from one peer held", len(held))
}

// In the field, quantized: a q8_0 reasoner drafted by a q8_0 drafter on
// another peer gives its own undrafted answer (q8_0 verify steps round as
// single ones do here: TestSpeculateMatchesGreedy), most proposals accepted.
func TestSpeculativeSpeedModeQ8(t *testing.T) {
	file := func(t *testing.T) string { return synthModel(t, "small", "q8_0") }
	origin := newTestPeer(t, 1)
	reasoner := newRolePeer(t, file, engine.Options{Threads: 1, Slots: 2, Context: 2048}, Reasoner)
	reasoner.srv.DraftMin, reasoner.srv.DraftMax = 4, 4
	drafter := newRolePeer(t, file, engine.Options{Threads: 1, Slots: 2, Context: 2048}, Drafter)
	connect(t, reasoner, drafter)
	o := &Originator{Host: origin.h, View: viewOf(origin, reasoner, drafter)}
	q := Query{Prompt: "Why do swarms draft?", Mode: ModeSpeed, MaxTokens: 40}
	want := plainReasoner(t, o, reasoner, q)
	res, _ := askDrafted(t, o, q)
	a := res.AgentResponses[0]
	if a.Content != want || a.Draft == nil || a.Draft.Rounds == 0 || a.Draft.Accepted*10 < a.Draft.Drafted*8 {
		t.Fatalf("drafted %q (draft %+v)\nundrafted %q", a.Content, a.Draft, want)
	}
	t.Logf("%d of %d accepted in %d rounds", a.Draft.Accepted, a.Draft.Drafted, a.Draft.Rounds)
}
