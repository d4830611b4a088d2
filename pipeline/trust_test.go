package pipeline

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
)

// countStreams counts the stage streams p is opened (its real hops).
func countStreams(p *stagePeer) *atomic.Int32 {
	var n atomic.Int32
	p.h.SetStreamHandler(ProtocolID, func(st network.Stream) {
		n.Add(1)
		p.srv.handle(st)
	})
	return &n
}

// announce re-announces p with its shards' MsPerLayer replaced, as a
// liar's own validly signed record would.
func announce(v *swarm.View, p *stagePeer, msPerLayer float64) {
	shs := p.srv.Shards()
	for i := range shs {
		shs[i].MsPerLayer = msPerLayer
	}
	var addrs []string
	for _, a := range p.addrs() {
		addrs = append(addrs, a.String())
	}
	v.Observe(&gossip.Capability{PeerID: p.h.ID().String(), Seq: 100, Addrs: addrs, Shards: shs, Load: gossip.Load{Capacity: 4}, Platform: gossip.Platform{Arch: engine.ComputeArch()}}, time.Now())
}

// vetLog is a Vet hook for these tests: the peers in fail fail their
// check (the ledger bans them, as the real checker does), the others
// pass. It records whom it was asked about.
type vetLog struct {
	trust *swarm.Trust
	fail  map[peer.ID]bool
	mu    sync.Mutex
	asked []swarm.Claim
	peers []peer.ID
}

func (v *vetLog) vet(_ context.Context, id peer.ID, c swarm.Claim) error {
	v.mu.Lock()
	v.asked = append(v.asked, c)
	v.peers = append(v.peers, id)
	v.mu.Unlock()
	if v.fail[id] {
		v.trust.Fail(id, "test: wrong numbers")
		return errors.New("failed its check")
	}
	v.trust.Pass(id, c)
	return nil
}

// TestAdvertisedSpeedOnlySlows: a holder announcing 0.001 ms per layer
// does not win the route from a holder this peer measured, and is never
// even vetted; the liar's stage gets no stream.
func TestAdvertisedSpeedOnlySlows(t *testing.T) {
	origin, honest, liar := newStagePeer(t), newStagePeer(t), newStagePeer(t)
	honest.serve(t, "qwen3", 0, 4)
	liar.serve(t, "qwen3", 0, 4)
	liarHops := countStreams(liar)
	full, cid := model(t, "qwen3")
	o := originatorTrusting(t, full, swarm.NewTrust(), origin, honest, liar)
	announce(o.View, liar, 0.001)
	o.View.Trust().Measure(honest.h.ID(), swarm.MsPerLayerKey(cid), 2) // slower than the liar says it is
	vl := &vetLog{trust: o.View.Trust()}
	o.Vet = vl.vet
	think := false
	res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: 4, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hops) != 1 || res.Hops[0].Peer != honest.h.ID().String() {
		t.Fatalf("route %+v, want the measured honest peer", res.Hops)
	}
	if slices.Contains(vl.peers, liar.h.ID()) || liarHops.Load() != 0 {
		t.Fatalf("the liar was vetted (%v) or got %d stage streams", vl.peers, liarHops.Load())
	}
}

// TestVetBeforeFirstHop: new peers on a planned route are vetted first,
// all at once; one that fails is left out and the route planned again;
// the liar gets no stage stream, then or in a later generation (it is
// banned), and a verified peer is not vetted again.
func TestVetBeforeFirstHop(t *testing.T) {
	origin, a, b, liar := newStagePeer(t), newStagePeer(t), newStagePeer(t), newStagePeer(t)
	a.serve(t, "qwen3", 0, 2)
	b.serve(t, "qwen3", 2, 4)
	liar.serve(t, "qwen3", 0, 4)
	liarHops := countStreams(liar)
	full, _ := model(t, "qwen3")
	o := originatorTrusting(t, full, swarm.NewTrust(), origin, a, b, liar)
	announce(o.View, liar, 0.001) // unmeasured: priced DefaultMsPerLayer, it is still the cheapest (one hop)
	vl := &vetLog{trust: o.View.Trust(), fail: map[peer.ID]bool{liar.h.ID(): true}}
	o.Vet = vl.vet
	think := false
	for range 2 {
		res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: 4, Sampling: greedy})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Hops) != 2 || res.Hops[0].Peer != a.h.ID().String() || res.Hops[1].Peer != b.h.ID().String() {
			t.Fatalf("route %+v, want a then b", res.Hops)
		}
	}
	_, cid := model(t, "qwen3")
	want := []swarm.Claim{{Model: cid, Start: 0, End: 4}, {Model: cid, Start: 0, End: 2}, {Model: cid, Start: 2, End: 4}}
	slices.SortFunc(vl.asked, func(x, y swarm.Claim) int { return x.Start*100 + x.End - y.Start*100 - y.End })
	slices.SortFunc(want, func(x, y swarm.Claim) int { return x.Start*100 + x.End - y.Start*100 - y.End })
	if !slices.Equal(vl.asked, want) {
		t.Fatalf("vetted %v, want %v (each once)", vl.asked, want)
	}
	if n := liarHops.Load(); n != 0 {
		t.Fatalf("the liar got %d stage streams after failing its check", n)
	}
	if banned, _ := o.View.Trust().Banned(liar.h.ID()); !banned {
		t.Fatal("liar not banned")
	}
}

// TestBannedHolderLeavesAGap: when the only holder of some layers is
// banned, planning says which layers are missing.
func TestBannedHolderLeavesAGap(t *testing.T) {
	origin, a, b := newStagePeer(t), newStagePeer(t), newStagePeer(t)
	a.serve(t, "qwen3", 0, 2)
	b.serve(t, "qwen3", 2, 4)
	full, _ := model(t, "qwen3")
	o := originatorTrusting(t, full, swarm.NewTrust(), origin, a, b)
	o.View.Trust().Fail(b.h.ID(), "test: wrong numbers")
	think := false
	_, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: 2, Sampling: greedy})
	var gap *GapError
	if !errors.As(err, &gap) || len(gap.Missing) != 1 || gap.Missing[0] != [2]int{2, 4} {
		t.Fatalf("err %v, want a gap at [2,4)", err)
	}
}
