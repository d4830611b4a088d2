package node_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestReferenceNotFromHungPeer: a peer a call found hung (the stage a
// failover routes around) is no source for the reference layer that
// vets its spare: the layer comes from another holder at once, instead
// of the check waiting on the hung peer until its deadline.
func TestReferenceNotFromHungPeer(t *testing.T) {
	model := q8Model(t)
	ps := nodetest.Cluster(t, 3, func(i int, c *node.Config) {
		c.Engine.Threads, c.Engine.Context = 1, 256
		if i == 0 {
			// The checker holds the hung peer alive (it missed no
			// heartbeat yet) for the whole test.
			c.DeadAfterMisses = 100
		} else {
			c.Shards = []string{model + ":0-2"}
		}
	})
	checker, hung, other := ps[0], ps[1], ps[2]
	hungID := hung.ID()
	nodetest.Eventually(t, 20*time.Second, "the checker sees both holders' shards", func() bool {
		return nodetest.SeesShards(checker, hung.ID(), other.ID())
	})
	p, _ := checker.Swarm().View().Get(hung.ID())
	root := p.Cap.Shards[0].ModelCID
	if src := checker.ReferenceSourcesForTest(t.Context(), root, 1); !slices.Contains(src, hung.ID()) || !slices.Contains(src, other.ID()) {
		t.Fatalf("sources %v: want both holders while neither is hung", src)
	}
	// It stops answering (as a SIGSTOPped peer does, its pings unanswered)
	// and a call finds it hung.
	hung.Close()
	checker.Swarm().View().MarkHung(hungID)
	if src := checker.ReferenceSourcesForTest(t.Context(), root, 1); !slices.Equal(src, []peer.ID{other.ID()}) {
		t.Fatalf("sources %v: want only %s, not the hung %s", src, other.ID(), hungID)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := checker.ReferenceLayerForTest(ctx, root, 1); err != nil {
		t.Fatal(err)
	}
}
