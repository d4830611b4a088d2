package node_test

import (
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestIdleNodesPublishNoRecords: real peers whose records do not change
// (their free memory, addresses and load move a little, as on any
// machine) publish none between refreshes once they know each other, and
// stay alive to each other all the while: probes keep them so.
func TestIdleNodesPublishNoRecords(t *testing.T) {
	const beat = 200 * time.Millisecond
	peers := nodetest.Cluster(t, 3, func(_ int, c *node.Config) { c.Heartbeat = node.Duration(beat) })
	nodetest.Eventually(t, 20*time.Second, "cluster formed", func() bool {
		for _, p := range peers {
			if !nodetest.SeesAlive(p, ids(peers)...) {
				return false
			}
		}
		return true
	})
	// Each has published its record by now (when the first peer of the
	// topic appeared).
	nodetest.Eventually(t, 10*time.Second, "first records out", func() bool {
		for _, p := range peers {
			if p.Swarm().Published() < 1 {
				return false
			}
		}
		return true
	})
	before := make([]uint64, len(peers))
	for i, p := range peers {
		before[i] = p.Swarm().Published()
	}
	// 25 heartbeats, over ten times the dead-after window of a peer in use.
	for end := time.Now().Add(25 * beat); time.Now().Before(end); time.Sleep(beat / 4) {
		if !nodetest.SeesAlive(peers[0], ids(peers)...) {
			t.Fatal("an idle peer died without records")
		}
	}
	for i, p := range peers {
		if got := p.Swarm().Published() - before[i]; got > 1 {
			t.Fatalf("idle peer %d published %d records in 25 heartbeats: want none (one at most)", i, got)
		}
	}
}
