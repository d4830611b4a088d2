package pipeline

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
)

// longPrompt is a raw prompt of some hundreds of tokens, varied enough
// that a wrong position shows in the answer.
func longPrompt(lines int) string {
	var b strings.Builder
	for i := range lines {
		fmt.Fprintf(&b, "Line %d of the ledger: peer %d served %d tokens to peer %d and took %d back.\n", i, i*7%13, 40+i*3, i*5%11, 17+i)
	}
	return b.String()
}

// promptLen is how many tokens prompt is to the model at full.
func promptLen(t *testing.T, full, prompt string) int {
	t.Helper()
	tok, err := engine.LoadTokenizer(full)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	return len(ids)
}

// TestPrefillPartsSameTokens: a prompt of some hundreds of tokens sent
// down a 3-stage route whole, in parts sized by the originator, and in
// parts of 256, gives one machine's tokens each way, for f32, q8_0 and
// q4_k weights; the parts are as many as the prompt cut that way.
func TestPrefillPartsSameTokens(t *testing.T) {
	for _, typ := range []string{"f32", "q8_0", "q4_k"} {
		t.Run(typ, func(t *testing.T) {
			size, layers := "tiny", 4
			if typ == "q4_k" {
				size, layers = "small", 8
			}
			const n = 16
			full, cid := modelOf(t, "qwen3", size, typ)
			prompt := longPrompt(9)
			np := promptLen(t, full, prompt)
			if np <= 3*engine.DefaultPrefillChunk {
				t.Fatalf("prompt of %d tokens: want more than 3 prefill chunks", np)
			}
			want := referenceRequest(t, full, engine.Request{Prompt: prompt}, n)
			o, _, _ := cutRoute(t, full, cid, []int{0, 1, layers - 1, layers})
			for _, c := range []struct {
				chunk, parts int // parts -1: more than one, as the originator sizes them
			}{{-1, 0}, {0, -1}, {256, (np + 255) / 256}, {0, -1}} {
				o.PrefillChunk = c.chunk
				res, err := o.Generate(t.Context(), Request{Prompt: prompt, MaxTokens: n, Sampling: greedy})
				if err != nil {
					t.Fatal(err)
				}
				if res.PromptTokens != np {
					t.Fatalf("%d prompt tokens, want %d", res.PromptTokens, np)
				}
				if !sameTokens(res.Tokens, want) {
					t.Fatalf("prefill chunk %d (%d parts): tokens differ from one machine:\n got %v\nwant %v", c.chunk, res.PrefillParts, res.Tokens, want)
				}
				if c.parts >= 0 && res.PrefillParts != c.parts || c.parts < 0 && res.PrefillParts < 2 {
					t.Fatalf("prefill chunk %d: the prompt of %d tokens went in %d parts, want %d", c.chunk, np, res.PrefillParts, c.parts)
				}
				t.Logf("prefill chunk %d: %d parts, ttft %.0f ms", c.chunk, res.PrefillParts, res.TTFTMS)
			}
		})
	}
}

// TestPrefillPartsHungStage: the middle stage hangs in the middle of the
// prompt's parts (its link freezes after 64 KiB of them). The progress
// watch finds it, the route is planned again over the spare, and the
// text is one machine's.
func TestPrefillPartsHungStage(t *testing.T) {
	const n = 12
	full, cid := modelOf(t, "qwen3", "small", "q8_0")
	prompt := longPrompt(9)
	want := referenceRequest(t, full, engine.Request{Prompt: prompt}, n)
	origin := newStagePeer(t)
	a, mid, b, spare := newStagePeer(t), newStagePeer(t), newStagePeer(t), newStagePeer(t)
	a.serveFile(t, full, cid, 0, 2)
	mid.serveFile(t, full, cid, 2, 6)
	b.serveFile(t, full, cid, 6, 8)
	spare.serveFile(t, full, cid, 2, 6)
	proxies := map[string]func(){}
	for _, p := range []*stagePeer{mid, spare} {
		px := p.behindProxy(t)
		proxies[p.h.ID().String()] = func() { px.FreezeAfter(64 << 10) }
	}
	o := originatorForFile(t, full, origin, a, mid, b, spare)
	o.Progress = swarm.Progress{Floor: 500 * time.Millisecond, ProbeTimeout: 500 * time.Millisecond}
	var first []Hop
	onTrace := func(ev answer.Trace) {
		if ev.Kind == "route" && first == nil {
			first = ev.Route
			proxies[first[1].Peer]() // counted from here: the opens are a few hundred bytes
		}
	}
	res, err := o.Generate(t.Context(), Request{Prompt: prompt, MaxTokens: n, Sampling: greedy, OnTrace: onTrace})
	if err != nil {
		t.Fatal(err)
	}
	if !sameTokens(res.Tokens, want) {
		t.Fatalf("tokens after a stage hung in the prompt differ from one machine:\n got %v\nwant %v", res.Tokens, want)
	}
	if len(res.Reroutes) != 1 {
		t.Fatalf("want 1 re-route, got %+v", res.Reroutes)
	}
	rr := res.Reroutes[0]
	if rr.AtToken != 0 || rr.Failed != first[1].Peer || !strings.Contains(rr.Reason, "hung") {
		t.Fatalf("re-route at token %d blames %s (%s), want the frozen %s as hung in the prompt", rr.AtToken, rr.Failed, rr.Reason, first[1].Peer)
	}
	t.Logf("hung in the prompt's parts: detected in %.0f ms, replay of %d tokens %.0f ms", rr.DetectMS, rr.ReplayTokens, rr.ReplayMS)
}

// TestPartsOnTheWire: a part is refused on a session not opened for
// parts, and a probe takes none. A part a stage refuses is answered at
// once with one error frame, the rest of that prompt is dropped, and the
// session goes on from where it was, as if the refused prompt had never
// been sent. A next hop that goes away during the parts is named in the
// one error frame that answers the prompt.
func TestPartsOnTheWire(t *testing.T) {
	full, cid := model(t, "qwen3")
	origin := newStagePeer(t)
	ps := servingPeers(t, full, cid, [2]int{0, 2}, [2]int{2, 4})
	o := originatorForFile(t, full, origin, ps...)
	route := []RouteHop{{Peer: ps[0].h.ID().String(), Start: 0, End: 2}, {Peer: ps[1].h.ID().String(), Start: 2, End: 4}}
	open := func(parts bool, until int) (*chain, error) {
		hops := route
		if until > 0 {
			hops = route[:1] // a probe of the first hop's layers
		}
		return o.openChain(t.Context(), Open{Session: rand.Uint64() | 1, Model: cid, Layers: 4, Hidden: 64, DType: DTypeF32,
			Route: hops, Until: until, Parts: parts})
	}
	send := func(c *chain, s Step) {
		t.Helper()
		s.Session = c.open.Session
		typ, body := encodeStepFrame(&s)
		if err := writeFrame(c.st, typ, body); err != nil {
			t.Fatal(err)
		}
	}
	reply := func(c *chain) (byte, string) {
		t.Helper()
		c.st.SetReadDeadline(time.Now().Add(30 * time.Second))
		typ, body, err := readFrame(c.r, limitResult)
		if err != nil {
			t.Fatal(err)
		}
		if typ == frameResult {
			res, err := DecodeResult(body)
			if err != nil {
				t.Fatal(err)
			}
			return typ, fmt.Sprint(res.Token)
		}
		return typ, string(body)
	}
	if _, err := open(true, 2); err == nil || !strings.Contains(err.Error(), "a probe takes no parts") {
		t.Fatalf("a probe opened with parts: %v", err)
	}
	plain, err := open(false, 0)
	if err != nil {
		t.Fatal(err)
	}
	send(plain, Step{Tokens: []int32{1, 2}, Part: true})
	if typ, body := reply(plain); typ != frameError || !strings.Contains(body, "not opened for parts") {
		t.Fatalf("a part on a plain session: type %d %s", typ, body)
	}
	plain.close()

	// The tokens whole, for what the session must answer.
	whole, err := open(false, 0)
	if err != nil {
		t.Fatal(err)
	}
	send(whole, Step{Tokens: []int32{1, 2, 3, 4, 5}})
	_, want := reply(whole)
	whole.close()

	c, err := open(true, 0)
	if err != nil {
		t.Fatal(err)
	}
	send(c, Step{Pos: 0, Tokens: []int32{1, 2, 3}, Part: true})
	send(c, Step{Pos: 3, Tokens: []int32{1 << 30}, Part: true}) // outside the vocabulary: refused by the first hop
	send(c, Step{Pos: 4, Tokens: []int32{7}, Part: true})
	send(c, Step{Pos: 5, Tokens: []int32{8}})
	if typ, body := reply(c); typ != frameError || !strings.Contains(body, CodeBadFrame) || !strings.Contains(body, route[0].Peer) {
		t.Fatalf("a refused part: type %d %s, want one bad_frame error naming the first hop", typ, body)
	}
	send(c, Step{Pos: 3, Tokens: []int32{4, 5}})
	if typ, got := reply(c); typ != frameResult || got != want {
		t.Fatalf("after the refused prompt: type %d token %s, want the token %s of the five tokens sent whole", typ, got, want)
	}
	c.close()

	// The second hop goes away while the parts flow.
	c, err = open(true, 0)
	if err != nil {
		t.Fatal(err)
	}
	send(c, Step{Pos: 0, Tokens: []int32{1, 2, 3}, Part: true})
	ps[1].h.Close()
	for i := 1; i <= 4; i++ {
		send(c, Step{Pos: 3 * i, Tokens: []int32{1, 2, 3}, Part: true})
	}
	send(c, Step{Pos: 15, Tokens: []int32{4}})
	if typ, body := reply(c); typ != frameError || !strings.Contains(body, CodeDownstream) || !strings.Contains(body, route[1].Peer) {
		t.Fatalf("next hop gone during parts: type %d %s, want a downstream error naming it", typ, body)
	}
}

// TestPrefillPartsLiar: a liar in the middle of a route sends NaN hidden
// states on from the second part of a long prompt: the next hop refuses
// that part at once naming it, the originator proves it by its own check,
// bans it alone, and the text is one machine's.
func TestPrefillPartsLiar(t *testing.T) {
	const n = 8
	full, cid := modelOf(t, "qwen3", "small", "q8_0")
	prompt := longPrompt(9)
	want := referenceRequest(t, full, engine.Request{Prompt: prompt}, n)
	origin := newStagePeer(t)
	var honest []*stagePeer
	for _, r := range [][2]int{{0, 2}, {2, 6}, {6, 8}, {2, 6}} { // a route, and a spare for the liar's layers
		p := newStagePeer(t)
		p.serveFile(t, full, cid, r[0], r[1])
		honest = append(honest, p)
	}
	l := newLiar(t, full, cid, 2, 6)
	l.from, l.hidden = 1, nanHidden
	o := originatorTrusting(t, full, swarm.NewTrust(), origin, append(honest, l.stagePeer)...)
	slowDown(o, cid, [2]int{2, 6}, honest...) // so the route takes the liar's hop
	var first []Hop
	res, err := o.Generate(t.Context(), Request{Prompt: prompt, MaxTokens: n, Sampling: greedy,
		OnTrace: func(ev answer.Trace) {
			if ev.Kind == "route" && first == nil {
				first = ev.Route
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !usesPeer(first, l.h.ID().String()) {
		t.Fatalf("the liar was not on the first route %v", first)
	}
	if !sameTokens(res.Tokens, want) {
		t.Fatalf("tokens differ from one machine:\n got %v\nwant %v", res.Tokens, want)
	}
	if len(res.Reroutes) != 1 || res.Reroutes[0].AtToken != 0 {
		t.Fatalf("re-routes: %+v, want one, in the prompt", res.Reroutes)
	}
	rr := res.Reroutes[0]
	if rr.Failed != l.h.ID().String() || !rr.Proven || usesPeer(rr.NewRoute, rr.Failed) {
		t.Fatalf("re-route %+v: want the liar proven and left out", rr)
	}
	assertBans(t, o.View.Trust(), []peer.ID{l.h.ID()}, honest...)
	t.Logf("a liar in the prompt's parts: %s", rr.Reason)
}
