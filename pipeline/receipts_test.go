package pipeline

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/ledger"
	"github.com/llmswarm/llmswarm/shards"
)

// TestRouteAcknowledged: after a generation on a 3-hop route, each hop's
// ledger holds the originator's receipt for the positions the route ran
// (the prompt and every token fed back), by its share of the layers; the
// originator's ledger holds the same work taken from each. The prompt goes
// in parts: they count once, as the prompt's positions.
func TestRouteAcknowledged(t *testing.T) {
	full, cid := modelOf(t, "qwen3", "tiny", "f32")
	origin := newStagePeer(t)
	stages := servingPeers(t, full, cid, [2]int{0, 1}, [2]int{1, 3}, [2]int{3, 4})
	o := originatorForFile(t, full, origin, stages...)
	mine, err := ledger.NewExchange(o.Host, ledger.New(o.Host.ID(), ledger.Options{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	mine.Delay = 10 * time.Millisecond
	t.Cleanup(mine.Close)
	o.Acknowledge = mine.Ack
	theirs := map[string]*ledger.Exchange{}
	for _, sp := range stages {
		e, err := ledger.NewExchange(sp.h, ledger.New(sp.h.ID(), ledger.Options{}), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		theirs[sp.h.ID().String()] = e
	}
	var hops []Hop
	onTrace := func(ev answer.Trace) {
		if ev.Kind == "route" && hops == nil {
			hops = ev.Route
		}
	}
	const n = 6
	prompt := longPrompt(3)
	res, err := o.Generate(t.Context(), Request{Prompt: prompt, MaxTokens: n, Sampling: greedy, OnTrace: onTrace})
	if err != nil {
		t.Fatal(err)
	}
	sent := float64(res.PromptTokens + len(res.Tokens) - 1) // the last token is never fed back
	if res.PromptTokens <= engine.DefaultPrefillChunk || res.PrefillParts < 2 {
		t.Fatalf("prompt of %d tokens in %d parts: want parts", res.PromptTokens, res.PrefillParts)
	}
	for _, h := range hops {
		want := sent * float64(h.End-h.Start) / 4
		e := theirs[h.Peer]
		var got float64
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if s := e.Ledger.Snapshot(); len(s) == 1 {
				got = s[0].Given
				break
			}
		}
		if math.Abs(got-want) > 0.01*want {
			t.Errorf("hop %v counted %.2f given, want %.2f (%g positions through %d of 4 layers)", h, got, want, sent, h.End-h.Start)
		}
	}
	var taken float64
	for _, a := range mine.Ledger.Snapshot() {
		taken += a.Taken
	}
	if math.Abs(taken-sent) > 0.01*sent {
		t.Fatalf("originator took %.2f in all, want %g (the whole model's worth of each position)", taken, sent)
	}
}

// TestContendedStageRanksOpens: a stage with one slot, held; two peers
// open sessions on it, the one ranked higher second: when the slot frees,
// the higher one gets it, and the other once that one closes.
func TestContendedStageRanksOpens(t *testing.T) {
	full, cid := modelOf(t, "qwen3", "tiny", "f32")
	st := newStagePeer(t)
	out := filepath.Join(t.TempDir(), "all.gguf")
	if _, err := shards.Slice(full, out, 0, 4); err != nil {
		t.Fatal(err)
	}
	sh, err := LoadShard(t.Context(), out, cid, 0, 4, engine.Options{Threads: 1, Slots: 1, Queue: 4, Context: 256, Isolated: true})
	if err != nil {
		t.Fatal(err)
	}
	st.srv.Add(sh)
	blocker, low, high := newStagePeer(t), newStagePeer(t), newStagePeer(t)
	rank := map[peer.ID]float64{low.h.ID(): -0.5, high.h.ID(): 0.5}
	st.srv.Rank = func(id peer.ID) float64 { return rank[id] }
	open := func(p *stagePeer) (*chain, error) {
		p.h.Peerstore().AddAddrs(st.h.ID(), st.h.Addrs(), time.Hour)
		o := &Originator{Host: p.h}
		return o.openChain(t.Context(), Open{Session: rand.Uint64() | 1, Model: cid, Layers: 4, Hidden: 64, DType: DTypeF32,
			Route: []RouteHop{{Peer: st.h.ID().String(), Start: 0, End: 4}}})
	}
	held, err := open(blocker)
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan string, 2)
	chains := make(chan *chain, 2)
	for _, c := range []struct {
		name string
		p    *stagePeer
	}{{"low", low}, {"high", high}} {
		go func() {
			ch, err := open(c.p)
			if err != nil {
				t.Error(err)
				return
			}
			opened <- c.name
			chains <- ch
		}()
		for want := map[string]int{"low": 1, "high": 2}[c.name]; sh.Model.Queue().Waiting < want; time.Sleep(5 * time.Millisecond) {
		}
	}
	held.close()
	if first := <-opened; first != "high" {
		t.Fatalf("the slot went to %s first, want the peer ranked higher", first)
	}
	(<-chains).close()
	if second := <-opened; second != "low" {
		t.Fatalf("second: %s", second)
	}
	(<-chains).close()
}
