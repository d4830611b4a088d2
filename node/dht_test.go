package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/node/nodetest"
	"github.com/llmswarm/llmswarm/swarm"
)

// TestDHTProviders: every peer provides the members key, and a peer serving
// a role provides that role's key, so a peer outside its gossip mesh can
// look it up through the private DHT.
func TestDHTProviders(t *testing.T) {
	model := tinyModel(t)
	peers := nodetest.Cluster(t, 3, func(i int, c *node.Config) {
		if i == 2 {
			c.Roles = map[string]string{"critic": model}
			c.Engine = node.EngineConfig{Threads: 1}
		}
	})
	seeker, server := peers[1], peers[2]
	found := func(key string, want bool) func() bool {
		return func() bool {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			k := swarm.MembersKey()
			if key != "" {
				k = swarm.RoleKey(key)
			}
			ais, err := seeker.Swarm().FindProviders(ctx, k, 10)
			if err != nil {
				return false
			}
			for _, ai := range ais {
				if ai.ID == server.ID() {
					return want
				}
			}
			return !want
		}
	}
	took := nodetest.Eventually(t, 20*time.Second, "member found in the DHT", found("", true))
	t.Logf("member provider record found after %s", took)
	nodetest.Eventually(t, 20*time.Second, "critic found in the DHT", found("critic", true))
	nodetest.Eventually(t, 5*time.Second, "no provider for an unserved role", found("writer", false))
}
