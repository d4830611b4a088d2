package swarmsim

import (
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/swarm"
)

// BenchmarkRoute is the CPU of route assembly as the simulation does it
// (the view's holders of the model, then pipeline.AssembleRoute), which
// synctest's clock does not see: a view of peers rows, holders of them
// holding the model's layers.
//
//	go test -run XXX -bench Route ./swarm/swarmsim
func BenchmarkRoute(b *testing.B) {
	for _, c := range []struct{ peers, holders int }{{100, 8}, {1000, 8}, {1000, 64}, {10000, 64}} {
		b.Run(fmt.Sprintf("peers=%d/holders=%d", c.peers, c.holders), func(b *testing.B) {
			self := benchID(b)
			v := swarm.NewView(self, swarm.Liveness{MaxPeers: 2 * c.peers}, swarm.WithAdmission(swarm.Admission{UnprovenShare: 1, PerSubnet: -1}))
			now := time.Now()
			for i := range c.peers {
				rec := gossip.Capability{PeerID: benchID(b).String(), Seq: 1, Load: gossip.Load{Capacity: 4}}
				if i < c.holders {
					rec.Shards = []gossip.Shard{HolderShard(i)}
				}
				v.Observe(&rec, now)
			}
			if got := len(v.Peers()); got != c.peers {
				b.Fatalf("view holds %d peers, want %d", got, c.peers)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := RouteIn(v, self, ModelCID, ModelLayers); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchID(b *testing.B) peer.ID {
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		b.Fatal(err)
	}
	return id
}
