package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/bmc"
	"github.com/llmswarm/llmswarm/bmcauth"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/shards"
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
func (n *Node) StartLoadsDoneForTest() <-chan struct{} { return n.loads.ended() }

// PublishBMCForTest publishes raw, a board dump MACed for nonce, as this
// peer's BMC table, the way a bridge does, without a board.
func (n *Node) PublishBMCForTest(ctx context.Context, raw []byte, nonce string) error {
	n.mu.Lock()
	r, h := n.router, n.host
	n.mu.Unlock()
	if r == nil || h == nil {
		return errors.New("node: peer not running")
	}
	tab, err := bmc.ParseTable(raw)
	if err != nil {
		return err
	}
	tab.Nonce = nonce
	return r.PublishBMCTable(ctx, gossip.NewBMCTable(h.ID(), bmcauth.NextSeq(), time.Now(), tab, nil, nil))
}

// BMCDeadForTest reports whether routing excludes id because of the BMC.
func (n *Node) BMCDeadForTest(id peer.ID) bool { return n.excluded(id) }

// LoadReferenceForTest loads the model at path as the reference for layer
// l of model, as a challenge does when this peer checks another's claim.
func (n *Node) LoadReferenceForTest(ctx context.Context, path, model string, l int) error {
	_, err := n.checks.ref.load(ctx, shards.SliceEntry{Path: path}, model, l, false)
	return err
}

// SourceStat is what a peer recorded of one shard source.
type SourceStat = sourceStat

// SourceStatForTest is what this peer recorded of shard source id.
func (n *Node) SourceStatForTest(id peer.ID) SourceStat { return n.pipe.sources.stat(id) }

// ReferenceSourcesForTest lists the peers a reference copy of layer l of
// model would be fetched from, in order: the view's, then the DHT's.
func (n *Node) ReferenceSourcesForTest(ctx context.Context, model string, l int) []peer.ID {
	r := n.checks.ref
	src := r.sources(model, l)
	return append(src, r.providers(ctx, model, src)...)
}

// ReferenceLayerForTest gets this peer's reference copy of layer l of
// model, fetching it if need be, as a challenge does.
func (n *Node) ReferenceLayerForTest(ctx context.Context, model string, l int) error {
	_, err := n.checks.ref.Layer(ctx, model, l)
	return err
}
