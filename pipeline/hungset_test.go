package pipeline

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/swarm"
)

// TestHungPeerStaysOutOfRoutes: a stage found hung is out of routes at
// once (the spares vetted for the failover see it so: their reference
// layers are not fetched from it) and for the next question (which pays
// no second detection and gives the same text), until it answers a ping
// again.
func TestHungPeerStaysOutOfRoutes(t *testing.T) {
	const n = 40
	full, cid := modelOf(t, "qwen3", "small", "q8_0")
	want := referenceFile(t, full, question, n)
	origin := newStagePeer(t)
	a, mid, b, spare := newStagePeer(t), newStagePeer(t), newStagePeer(t), newStagePeer(t)
	a.serveFile(t, full, cid, 0, 2)
	mid.serveFile(t, full, cid, 2, 6)
	b.serveFile(t, full, cid, 6, 8)
	spare.serveFile(t, full, cid, 2, 6)
	fail := failable(t, "hang", mid, spare)
	o := originatorForFile(t, full, origin, a, mid, b, spare)
	o.Progress = swarm.Progress{Floor: 500 * time.Millisecond, ProbeTimeout: 500 * time.Millisecond}
	route, onTrace, onToken := failHopAt(n/2, 1, fail)
	var mu sync.Mutex
	hungAt := map[string]bool{} // each peer vetted after the hang: was the hung one routable then?
	o.Vet = func(ctx context.Context, id peer.ID, c swarm.Claim) error {
		mu.Lock()
		defer mu.Unlock()
		if *route != nil && len(*route) > 1 && id.String() != (*route)[1].Peer {
			hung, _ := peer.Decode((*route)[1].Peer)
			hungAt[id.String()] = o.View.Routable(hung)
		}
		return nil
	}
	think := false
	res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy,
		OnTrace: onTrace, OnToken: onToken})
	if err != nil {
		t.Fatal(err)
	}
	hungPeer := (*route)[1].Peer
	if len(res.Reroutes) != 1 || res.Reroutes[0].Failed != hungPeer || !sameTokens(res.Tokens, want) {
		t.Fatalf("first question: re-routes %+v; want one, from %s, and the one-machine text", res.Reroutes, hungPeer)
	}
	other := mid
	if other.h.ID().String() == hungPeer {
		other = spare
	}
	mu.Lock()
	routable, vetted := hungAt[other.h.ID().String()]
	mu.Unlock()
	if !vetted || routable {
		t.Fatalf("the spare was vetted %v with the hung peer routable %v: its check could fetch from the hung peer", vetted, routable)
	}

	// The next question, the peer still frozen: no second detection.
	res, err = o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	var peers []string
	for _, h := range res.Hops {
		peers = append(peers, h.Peer)
	}
	if len(res.Reroutes) != 0 || slices.Contains(peers, hungPeer) || !sameTokens(res.Tokens, want) {
		t.Fatalf("second question: route %v, re-routes %+v: want no route through the hung %s", peers, res.Reroutes, hungPeer)
	}

	// Thawed, it answers a ping and may be routed through again.
	for _, p := range []*stagePeer{mid, spare} {
		if p.h.ID().String() == hungPeer {
			p.proxy.Thaw()
		}
	}
	id, _ := peer.Decode(hungPeer)
	deadline := time.Now().Add(20 * time.Second)
	for !o.View.Routable(id) {
		if time.Now().After(deadline) {
			t.Fatal("the thawed peer is still out of routes after 20 s")
		}
		o.View.RecheckHung(o.Host, time.Second)
		time.Sleep(50 * time.Millisecond)
	}
}
