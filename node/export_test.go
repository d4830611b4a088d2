package node

import (
	"context"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/swarm"
)

// TokenizerForTest is the originator's tokenizer lookup for model root,
// asking the given holders in order (as they would come from the view).
func (n *Node) TokenizerForTest(ctx context.Context, root string, holders ...peer.ID) (*engine.Tokenizer, error) {
	var hs []swarm.ShardHolder
	for _, id := range holders {
		p, ok := n.swarm.View().Get(id)
		if !ok {
			return nil, fmt.Errorf("%s not in the view", id)
		}
		hs = append(hs, swarm.ShardHolder{Peer: p})
	}
	return n.tokenizer(ctx, pipeline.ModelRef{CID: root}, hs)
}

// StartLoadsDoneForTest is closed when the roles and shards given at start
// have loaded (or failed).
func (n *Node) StartLoadsDoneForTest() <-chan struct{} { return n.loadsDone }
