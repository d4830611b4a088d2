package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
	"github.com/llmswarm/llmswarm/swarm"
)

// TestDHTProviders: every peer provides the members key, and a peer
// storing a model (here the one its role runs) provides the model's key,
// so a peer outside its gossip mesh can look them up through the private
// DHT.
func TestDHTProviders(t *testing.T) {
	model := tinyModel(t)
	peers := nodetest.Cluster(t, 3, func(i int, c *node.Config) {
		if i == 2 {
			c.Roles = map[string]string{"critic": model}
			c.Engine = node.EngineConfig{Threads: 1}
		}
	})
	seeker, server := peers[1], peers[2]
	found := func(k cid.Cid, want bool) func() bool {
		return func() bool {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
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
	took := nodetest.Eventually(t, 20*time.Second, "member found in the DHT", found(swarm.MembersKey(), true))
	t.Logf("member provider record found after %s", took)
	var roleModel string
	nodetest.Eventually(t, 20*time.Second, "the critic's model announced", func() bool {
		self, ok := server.Swarm().View().Get(server.ID())
		if ok && len(self.Cap.Roles) > 0 {
			roleModel = self.Cap.Roles[0].ModelCID
		}
		return roleModel != ""
	})
	nodetest.Eventually(t, 20*time.Second, "the critic's model found in the DHT", found(swarm.ModelKey(roleModel), true))
	nodetest.Eventually(t, 5*time.Second, "no provider for a model nobody stores", found(swarm.ModelKey("no-such-model"), false))
}
