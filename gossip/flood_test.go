package gossip_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// scoreWatch starts a victim whose scores of its peers the test reads.
func scoreWatch(t *testing.T, ctx context.Context) (*testPeer, func(peer.ID) (float64, bool)) {
	var mu sync.Mutex
	scores := map[peer.ID]float64{}
	victim := newPeer(t, ctx, "", gossip.NewGate(nil, 0), gossip.WithHeartbeat(200*time.Millisecond),
		gossip.WithScoreInspectForTest(func(m map[peer.ID]float64) {
			mu.Lock()
			defer mu.Unlock()
			scores = m
		}))
	return victim, func(id peer.ID) (float64, bool) {
		mu.Lock()
		defer mu.Unlock()
		s, ok := scores[id]
		return s, ok
	}
}

// TestQuietMeshPeerKeepsScore: records go out only when they change, so
// an honest mesh peer of a quiet swarm delivers nothing for minutes. It
// must not score below zero for that (it would be pruned from every mesh,
// its records unheard): past the mesh delivery activation period it
// still scores at least zero.
func TestQuietMeshPeerKeepsScore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	victim, score := scoreWatch(t, ctx)
	quiet := newPeer(t, ctx, "", nil, gossip.WithHeartbeat(200*time.Millisecond))
	connect(t, ctx, quiet.h, victim.h)
	if err := quiet.r.PublishCapability(ctx, &gossip.Capability{PeerID: quiet.h.ID().String(), Seq: 1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the quiet peer tracked", func() bool { _, ok := score(quiet.h.ID()); return ok })
	// Past the activation period (10 s) and the decay of its first
	// delivery, the quiet peer must never have scored below zero.
	end := time.Now().Add(14 * time.Second)
	for time.Now().Before(end) {
		if s, _ := score(quiet.h.ID()); s < 0 {
			t.Fatalf("the quiet honest mesh peer scores %v", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFlooderScoredDown: a peer that publishes valid records of its own
// far faster than the flood limit (one per heartbeat, a burst of ten) has
// its excess dropped and scores below the gossip threshold; the records
// within the limit are heard.
func TestFlooderScoredDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	victim, score := scoreWatch(t, ctx)
	flood := newPeer(t, ctx, "", nil, gossip.WithHeartbeat(time.Millisecond*10))
	connect(t, ctx, flood.h, victim.h)
	eventually(t, 10*time.Second, "the flooder tracked", func() bool { _, ok := score(flood.h.ID()); return ok })
	eventually(t, 10*time.Second, "the victim in the flooder's topic", func() bool {
		return len(flood.r.PubSub().ListPeers(gossip.CapsTopic)) > 0
	})
	go func() {
		for seq := uint64(1); ctx.Err() == nil && seq < 2000; seq++ {
			flood.r.PublishCapability(ctx, &gossip.Capability{PeerID: flood.h.ID().String(), Seq: seq})
			time.Sleep(5 * time.Millisecond)
		}
	}()
	eventually(t, 20*time.Second, "the flooder below the gossip threshold", func() bool {
		s, _ := score(flood.h.ID())
		return s < gossip.GossipThreshold
	})
	if n := victim.heard(flood.h.ID()); n < 1 || n > 200 {
		t.Fatalf("the victim heard %d of the flooder's records: want a few (the limit's burst and rate)", n)
	}
}
