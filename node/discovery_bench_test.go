package node_test

import (
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/nodetest"
)

// BenchmarkNewcomerSeesSwarm measures how long a newcomer bootstrapping to
// one peer of a formed 5-peer swarm takes to see every peer alive: the
// hub answers over its own connection, the others are heard through the
// hub first (and probed before they count as alive).
func BenchmarkNewcomerSeesSwarm(b *testing.B) {
	peers := nodetest.Cluster(b, 5, nil)
	nodetest.Eventually(b, 20*time.Second, "swarm formed", func() bool {
		for _, p := range peers {
			if !nodetest.SeesAlive(p, ids(peers)...) {
				return false
			}
		}
		return true
	})
	var total time.Duration
	for range b.N {
		cfg := nodetest.Config(b.TempDir())
		cfg.Bootstrap = []string{peers[0].Addr(b)}
		start := time.Now()
		n := nodetest.Start(b, cfg)
		nodetest.Eventually(b, 20*time.Second, "newcomer sees the swarm", func() bool { return nodetest.SeesAlive(n, ids(peers)...) })
		total += time.Since(start)
		n.Close()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-see-all")
}
