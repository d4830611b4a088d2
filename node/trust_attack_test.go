package node_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/gossip/gossiptest"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// fastBeat beats every 200 ms; with fastMisses a silent peer is dead
// after 2 s, a window a loaded 2-core machine does not miss.
const (
	fastBeat   = node.Duration(200 * time.Millisecond)
	fastMisses = 10
)

func fast(c *node.Config) {
	c.Heartbeat = fastBeat
	c.DeadAfterMisses = fastMisses
}

func newTestHost(t *testing.T, listen string) (host.Host, crypto.PrivKey) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(libp2p.Identity(k), libp2p.ListenAddrStrings(listen), libp2p.DisableRelay(), nodetest.Member())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, k
}

func connectTo(t *testing.T, from host.Host, to host.Host) {
	t.Helper()
	// On a machine loaded by other work a handshake can outlast libp2p's
	// dial timeout: a dial may take a minute, and a failed one is tried
	// again (past the dial backoff) for up to a minute more.
	ctx := network.WithDialPeerTimeout(t.Context(), time.Minute)
	ctx = network.WithForceDirectDial(ctx, "a test retries its dial")
	deadline := time.Now().Add(time.Minute)
	for {
		err := from.Connect(ctx, peer.AddrInfo{ID: to.ID(), Addrs: to.Addrs()})
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatal(err)
		}
		t.Logf("dialling %s again: %v", to.ID(), err)
		time.Sleep(time.Second)
	}
}

// TestDeadPeerStaysDead: an adversary keeps a dead peer's real signed
// heartbeats (whole gossip messages, as the dead peer signed them) and
// replays them, one newer than the other, to a newcomer that never saw
// them. The newcomer hears them (they pass every check: signature,
// author, sequence) but never shows the dead peer alive, since the dead
// peer never answers its probe; live peers, one connected to it and one
// heard only through others, are seen alive promptly.
func TestDeadPeerStaysDead(t *testing.T) {
	peers := nodetest.Cluster(t, 3, func(_ int, c *node.Config) { fast(c) })
	hub, relayed, dead := peers[0], peers[1], peers[2]
	nodetest.Eventually(t, 10*time.Second, "cluster formed", func() bool { return nodetest.SeesAlive(hub, ids(peers)...) })

	// The adversary's collector: a plain gossipsub peer on the topic.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, _ := newTestHost(t, "/ip4/127.0.0.1/tcp/0")
	ps, err := pubsub.NewGossipSub(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	topic, err := ps.Join(gossip.CapsTopic)
	if err != nil {
		t.Fatal(err)
	}
	defer topic.Close()
	sub, err := topic.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()
	connectTo(t, ch, hub.Host())
	// Records go out only when they change: the dead peer-to-be publishes
	// its record again and again (as a peer whose load keeps changing
	// does), at the heartbeat, the fastest a peer may.
	beatCtx, stopBeats := context.WithCancel(ctx)
	go func() {
		for beatCtx.Err() == nil {
			dead.Swarm().Beat(beatCtx)
			select {
			case <-beatCtx.Done():
			case <-time.After(time.Duration(fastBeat)):
			}
		}
	}()
	var captured []*pb.Message
	for len(captured) < 25 {
		mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := sub.Next(mctx)
		mcancel()
		if err != nil {
			t.Fatalf("collected %d of the dead peer's messages: %v", len(captured), err)
		}
		if m.GetFrom() == dead.ID() {
			captured = append(captured, m.Message)
		}
	}
	stopBeats()
	deadID := dead.ID()
	dead.Close()
	nodetest.Eventually(t, 10*time.Second, "the hub sees the peer dead", func() bool { return !hub.Swarm().View().Alive(deadID) })

	// A newcomer joins through the hub; the adversary replays to it.
	cfg := nodetest.Config(t.TempDir())
	fast(&cfg)
	cfg.Bootstrap = []string{hub.Addr(t)}
	joined := time.Now()
	newcomer := nodetest.Start(t, cfg)
	rh, _ := newTestHost(t, "/ip4/127.0.0.1/tcp/0")
	raw := gossiptest.NewRaw(rh, true) // it takes the newcomer's stream: no gate trips
	defer raw.Close()
	connectTo(t, rh, newcomer.Host())
	if err := raw.Open(ctx, newcomer.ID(), gossip.CapsTopic); err != nil {
		t.Fatal(err)
	}
	var seenHub, seenRelayed time.Duration
	sawPending := false
	for i, m := range captured {
		if err := raw.Send(newcomer.ID(), m); err != nil {
			t.Fatalf("replaying message %d: %v", i, err)
		}
		for range 5 {
			v := newcomer.Swarm().View()
			if v.Alive(deadID) {
				t.Fatalf("replayed record %d made the dead peer alive at the newcomer", i)
			}
			if len(v.ByRole("reasoner")) != 0 {
				t.Fatal("a dead peer's role is routable")
			}
			if newcomer.Swarm().PendingProbes() > 0 {
				sawPending = true
			}
			if seenHub == 0 && v.Alive(hub.ID()) {
				seenHub = time.Since(joined)
			}
			if seenRelayed == 0 && v.Alive(relayed.ID()) {
				seenRelayed = time.Since(joined)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !sawPending {
		t.Fatal("the replayed records never reached the newcomer's table (the test proves nothing)")
	}
	// The live peers come alive all the same (on a loaded machine, maybe
	// only after the replay ended); the dead one never does.
	nodetest.Eventually(t, 10*time.Second, "the newcomer sees the live peers alive", func() bool {
		v := newcomer.Swarm().View()
		if v.Alive(deadID) {
			t.Fatal("the replayed records made the dead peer alive at the newcomer")
		}
		if seenHub == 0 && v.Alive(hub.ID()) {
			seenHub = time.Since(joined)
		}
		if seenRelayed == 0 && v.Alive(relayed.ID()) {
			seenRelayed = time.Since(joined)
		}
		return seenHub > 0 && seenRelayed > 0
	})
	t.Logf("newcomer saw the hub alive after %s and a peer heard through it after %s; the dead peer never", seenHub, seenRelayed)
	if p, ok := newcomer.Swarm().View().Get(deadID); ok {
		t.Fatalf("dead peer in the newcomer's table: %+v", p)
	}
}

// sybil is an identity of the adversary: a host with the real gossip
// router, publishing real signed records.
type sybil struct {
	h host.Host
	r *gossip.Router
}

func startSybils(t *testing.T, ctx context.Context, listen []string) []*sybil {
	var out []*sybil
	for _, l := range listen {
		h, k := newTestHost(t, l)
		r, err := gossip.NewRouter(ctx, h, k, nil, gossip.WithHeartbeat(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		out = append(out, &sybil{h: h, r: r})
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := uint64(1); ctx.Err() == nil; seq++ {
			for _, s := range out {
				s.r.PublishCapability(ctx, &gossip.Capability{PeerID: s.h.ID().String(), Seq: seq,
					Roles: []gossip.Role{{Role: "reasoner", ModelCID: "bafkreisybil", TokPerSec: 1e6}}, Load: gossip.Load{Capacity: 64}})
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return out
}

// TestSybilsDoNotKeepNewcomerOut: fifteen identities on three subnets
// beat into a victim's 12-row table (6 rows for unproven peers, 3 per
// subnet; before admission had a policy they took every row);
// an honest newcomer from another subnet is admitted and stays alive
// while they go on; they never hold more than their share.
func TestSybilsDoNotKeepNewcomerOut(t *testing.T) {
	victim := nodetest.Start(t, func() node.Config {
		c := nodetest.Config(t.TempDir())
		fast(&c)
		c.PeerTable = node.PeerTableConfig{MaxPeers: 12, UnprovenShare: 0.5, MaxUnprovenPerSubnet: 3}
		return c
	}())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var listen []string
	for i := range 15 {
		listen = append(listen, fmt.Sprintf("/ip4/127.0.%d.1/tcp/0", 1+i%3))
	}
	sybils := startSybils(t, ctx, listen)
	for _, s := range sybils {
		connectTo(t, victim.Host(), s.h) // the victim dials: it sees their subnets
	}
	unproven := func() int {
		n := 0
		for _, p := range victim.Swarm().View().Peers() {
			if !p.Self {
				n++
			}
		}
		return n
	}
	nodetest.Eventually(t, 10*time.Second, "the sybils fill the unproven rows", func() bool { return unproven() == 6 })

	cfg := nodetest.Config(t.TempDir())
	fast(&cfg)
	cfg.Listen = []string{"/ip4/127.0.9.1/tcp/0"}
	honest := nodetest.Start(t, cfg)
	connectTo(t, victim.Host(), honest.Host())
	took := nodetest.Eventually(t, 10*time.Second, "the honest newcomer admitted", func() bool {
		return victim.Swarm().View().Alive(honest.ID())
	})
	t.Logf("honest newcomer alive in a table full of sybils after %s", took)
	// It stays while the sybils beat on: 20 of their rounds.
	for range 40 {
		if !victim.Swarm().View().Alive(honest.ID()) {
			t.Fatal("the sybils churned the honest newcomer out")
		}
		if n := unproven(); n > 6 {
			t.Fatalf("%d unproven rows, at most 6", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBannedPeerUnheard: once the victim's own check fails a peer (its
// ledger bans it), the victim disconnects it, refuses it, stops hearing
// its heartbeats (even through other peers) and shows it dead, while the
// rest of the swarm stays alive.
func TestBannedPeerUnheard(t *testing.T) {
	peers := nodetest.Cluster(t, 3, func(_ int, c *node.Config) { fast(c) })
	victim, other, liar := peers[0], peers[1], peers[2]
	// Every peer holds every other alive (the other peer too holds the
	// liar alive: the test asserts it stays so).
	nodetest.Eventually(t, 10*time.Second, "cluster formed", func() bool {
		return nodetest.SeesAlive(victim, ids(peers)...) && nodetest.SeesAlive(other, ids(peers)...)
	})
	victim.Trust().Fail(liar.ID(), "failed a layer challenge")
	nodetest.Eventually(t, 10*time.Second, "the liar dead at the victim", func() bool {
		return !victim.Swarm().View().Alive(liar.ID()) &&
			victim.Host().Network().Connectedness(liar.ID()) != network.Connected
	})
	// The liar is alive and answering: the other peer holds it alive, the
	// victim does not, even with the other peer's records of it.
	for range 20 {
		if !other.Swarm().View().Alive(liar.ID()) {
			t.Fatal("the other peer lost the liar, which is alive")
		}
		if !victim.Swarm().View().Alive(other.ID()) {
			t.Fatal("the victim lost the other peer, which is alive")
		}
		if victim.Swarm().View().Alive(liar.ID()) {
			t.Fatal("the banned peer is alive again at the victim")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
