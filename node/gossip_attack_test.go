package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestForgedAndReplayedRecords: an attacker on the caps topic publishes a
// record naming an honest peer but signed with its own key, replays an
// honest peer's real record, and sends garbage. The honest peers' tables
// never show the forgery, and the attacker itself never appears with the
// victim's roles.
func TestForgedAndReplayedRecords(t *testing.T) {
	peers := nodetest.Cluster(t, 2, nil)
	victim, observer := peers[0], peers[1]
	nodetest.Eventually(t, 10*time.Second, "cluster formed", func() bool {
		return nodetest.SeesAlive(observer, victim.ID())
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key, _, _ := crypto.GenerateEd25519Key(nil)
	h, err := libp2p.New(libp2p.Identity(key), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), nodetest.Member())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// The attacker runs plain gossipsub without our validators.
	ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithFloodPublish(true))
	if err != nil {
		t.Fatal(err)
	}
	topic, err := ps.Join(gossip.CapsTopic)
	if err != nil {
		t.Fatal(err)
	}
	defer topic.Close()
	// Capture a real record of the victim to replay it.
	sub, _ := topic.Subscribe()
	defer sub.Cancel()
	ai, _ := peer.AddrInfoFromString(observer.Addr(t))
	if err := h.Connect(ctx, *ai); err != nil {
		t.Fatal(err)
	}
	var captured []byte
	for captured == nil {
		mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := sub.Next(mctx)
		mcancel()
		if err != nil {
			t.Fatal("no capability record seen by the attacker:", err)
		}
		if m.GetFrom() == victim.ID() {
			captured = m.Data
		}
	}

	forged := &gossip.Capability{
		PeerID: victim.ID().String(), Seq: uint64(time.Now().Add(time.Hour).UnixNano()),
		Roles: []gossip.Role{{Role: "reasoner", ModelCID: "bafkreiforged"}},
	}
	env, err := record.Seal(forged, key)
	if err != nil {
		t.Fatal(err)
	}
	forgedBytes, _ := env.Marshal()
	// The attacker's own record, honestly signed, but claiming a role.
	own := &gossip.Capability{PeerID: h.ID().String(), Seq: 1, Roles: []gossip.Role{{Role: "writer", ModelCID: "bafkreiown"}}}
	ownBytes, err := gossip.SealCapability(own, key)
	if err != nil {
		t.Fatal(err)
	}
	waitTopicPeers(t, topic)
	// The attacker's own record, honestly signed, gets in first.
	if err := topic.Publish(ctx, ownBytes); err != nil {
		t.Fatal(err)
	}
	nodetest.Eventually(t, 10*time.Second, "attacker's own record accepted", func() bool {
		p, ok := observer.Swarm().View().Get(h.ID())
		return ok && len(p.Cap.Roles) == 1 && p.Cap.Roles[0].Role == "writer"
	})
	before, _ := observer.Swarm().View().Get(victim.ID())
	for _, b := range [][]byte{forgedBytes, captured, []byte("garbage"), make([]byte, 70<<10)} {
		if err := topic.Publish(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// A later real record of the victim (it changed) reaches both peers
	// after the attack: had the forgery (seq an hour ahead) been
	// accepted, the view would refuse it as older.
	if err := victim.Swarm().Beat(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*nodetest.Peer{victim, observer} {
		nodetest.Eventually(t, 10*time.Second, "victim's real heartbeats still accepted", func() bool {
			got, ok := p.Swarm().View().Get(victim.ID())
			return ok && got.Cap.Seq > before.Cap.Seq && got.Cap.Seq < uint64(time.Now().Add(time.Minute).UnixNano())
		})
		got, _ := p.Swarm().View().Get(victim.ID())
		for _, r := range got.Cap.Roles {
			if r.ModelCID == "bafkreiforged" {
				t.Fatalf("forged record accepted by %s", p.ID())
			}
		}
	}
	if n := len(observer.Swarm().View().ByRole("reasoner")); n != 0 {
		t.Fatalf("%d reasoners listed; the forged one got in", n)
	}
}

func waitTopicPeers(t *testing.T, topic *pubsub.Topic) {
	nodetest.Eventually(t, 10*time.Second, "attacker joined the topic mesh", func() bool {
		return len(topic.ListPeers()) > 0
	})
}
