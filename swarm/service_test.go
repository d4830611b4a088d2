package swarm

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// member is one peer of a test swarm: a host, its gossip router and its
// swarm service, on loopback.
type member struct {
	h      host.Host
	key    crypto.PrivKey
	r      *gossip.Router
	s      *Service
	cancel context.CancelFunc
}

// fastLive is liveness for tests: peers in use probed every 200 ms.
var fastLive = Liveness{Heartbeat: 200 * time.Millisecond, Misses: 2, Refresh: time.Minute, ProbeRate: 2}

func newMember(t *testing.T, live Liveness, self SelfFunc, opts ...Option) *member {
	t.Helper()
	h, k := bareHost(t)
	ctx, cancel := context.WithCancel(context.Background())
	r, err := gossip.NewRouter(ctx, h, k, nil, gossip.WithHeartbeat(live.Heartbeat), gossip.WithColocation(gossip.Colocation{Threshold: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	if self == nil {
		self = func() gossip.Capability { return gossip.Capability{} }
	}
	m := &member{h: h, key: k, r: r, cancel: cancel}
	m.s = New(h, r, nil, self, live, nil, opts...)
	if err := m.s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.stop)
	return m
}

// stop kills the member: its service, router and host go at once.
func (m *member) stop() {
	m.cancel()
	m.s.Close()
	m.r.Close()
	m.h.Close()
}

func link(t *testing.T, a, b *member) {
	t.Helper()
	if err := a.h.Connect(t.Context(), peer.AddrInfo{ID: b.h.ID(), Addrs: b.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// countRecords counts the capability records m's router delivers, by author.
func countRecords(t *testing.T, m *member) func(peer.ID) int64 {
	sub, err := m.r.SubscribeCapabilities()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := map[peer.ID]int64{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := sub.Next(t.Context())
			if err != nil {
				return
			}
			id, _ := peer.Decode(c.PeerID)
			mu.Lock()
			n[id]++
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { sub.Cancel(); wg.Wait() })
	return func(id peer.ID) int64 {
		mu.Lock()
		defer mu.Unlock()
		return n[id]
	}
}

// TestQuietPeerSendsNoRecords: a peer whose record does not change sends
// none between refreshes. Two peers that know each other, their records
// unchanged, exchange no records over many heartbeats (at most the first
// record each publishes when the other appears), and both stay alive: the
// probes, not records, keep them so.
func TestQuietPeerSendsNoRecords(t *testing.T) {
	a := newMember(t, fastLive, nil)
	b := newMember(t, fastLive, nil)
	heardOfA := countRecords(t, b)
	link(t, a, b)
	waitFor(t, 10*time.Second, "the peers see each other", func() bool {
		return a.s.View().Alive(b.h.ID()) && b.s.View().Alive(a.h.ID())
	})
	before := heardOfA(a.h.ID())
	// 25 heartbeats, ten times the dead-after window.
	for end := time.Now().Add(25 * fastLive.Heartbeat); time.Now().Before(end); {
		if !b.s.View().Alive(a.h.ID()) {
			t.Fatal("the quiet peer died without records")
		}
		time.Sleep(fastLive.Heartbeat / 4)
	}
	if got := heardOfA(a.h.ID()) - before; got > 1 {
		t.Fatalf("the quiet peer sent %d records in 25 heartbeats: want none (one at most, its first)", got)
	}
	t.Logf("records published by the quiet peer since start: %d", a.s.Published())
}

// TestNewcomerSeesHolders: a newcomer that connects to one member of a
// quiet swarm sees every holder of a model alive at once (the record
// exchange hands it its contact's record and a sample of the records the
// contact holds, which it probes), with no member publishing anything.
func TestNewcomerSeesHolders(t *testing.T) {
	holder := func(start, end int) SelfFunc {
		return func() gossip.Capability {
			return gossip.Capability{Shards: []gossip.Shard{{ModelCID: "m", Start: start, End: end, Layers: 8}}}
		}
	}
	var ms []*member
	for i := range 4 {
		ms = append(ms, newMember(t, fastLive, holder(2*i, 2*i+2)))
	}
	for i := 1; i < len(ms); i++ {
		link(t, ms[i], ms[0])
	}
	waitFor(t, 20*time.Second, "the first member sees every holder", func() bool { return len(ms[0].s.View().HoldersOf("m")) == 4 })
	// Each member has published its record (when its first topic peer
	// appeared).
	waitFor(t, 20*time.Second, "the members' first records out", func() bool {
		for _, m := range ms {
			if m.s.Published() < 1 {
				return false
			}
		}
		return true
	})
	published := uint64(0)
	for _, m := range ms {
		published += m.s.Published()
	}
	newcomer := newMember(t, fastLive, nil)
	start := time.Now()
	link(t, newcomer, ms[0])
	took := waitFor(t, 20*time.Second, "the newcomer sees every holder", func() bool {
		return len(newcomer.s.View().HoldersOf("m")) == 4
	})
	t.Logf("newcomer saw all 4 holders %v after connecting (%v since start)", took, time.Since(start))
	after := uint64(0)
	for _, m := range ms {
		after += m.s.Published()
	}
	if after != published {
		t.Fatalf("the members published %d records for the newcomer: want none", after-published)
	}
}

// TestKilledPeerInUseNoticed: a peer this one uses that is killed (its
// process gone: connections closed, nothing listens) is dead in the view
// within Misses×Heartbeat; an idle peer killed the same way is noticed
// too (its last connection closed), and a live idle one stays alive.
func TestKilledPeerInUseNoticed(t *testing.T) {
	var used atomic.Value
	used.Store(peer.ID(""))
	live := Liveness{Heartbeat: time.Second, Misses: 2, Refresh: time.Minute}
	a := newMember(t, live, nil, WithInUse(func(id peer.ID) bool { return id == used.Load().(peer.ID) }))
	b := newMember(t, live, nil)
	idle := newMember(t, live, nil)
	other := newMember(t, live, nil)
	for _, m := range []*member{b, idle, other} {
		link(t, a, m)
	}
	waitFor(t, 10*time.Second, "a sees its peers", func() bool {
		return a.s.View().Alive(b.h.ID()) && a.s.View().Alive(idle.h.ID()) && a.s.View().Alive(other.h.ID())
	})
	used.Store(b.h.ID())
	b.stop()
	took := waitFor(t, 10*time.Second, "the killed peer in use dead", func() bool { return !a.s.View().Alive(b.h.ID()) })
	t.Logf("killed peer in use noticed after %v (bound %v)", took, live.DeadAfter())
	idle.stop()
	took = waitFor(t, 10*time.Second, "the killed idle peer dead", func() bool { return !a.s.View().Alive(idle.h.ID()) })
	t.Logf("killed idle peer noticed after %v", took)
	if !a.s.View().Alive(other.h.ID()) {
		t.Fatal("a live idle peer died")
	}
}

// TestUnpublishedRecordHandedOut: a peer whose changed record gossip does
// not take (no mesh peer came in time: here the publish's time is up at
// once) hands out that record all the same when asked: the record
// exchange gives what the peer is now, not what gossip last carried
// (under load a stage's record from before its shard loaded was handed to
// every newcomer until the next change).
func TestUnpublishedRecordHandedOut(t *testing.T) {
	var serving atomic.Bool
	// a's heartbeat is long: its own loop does not publish again before
	// the question.
	slow := Liveness{Heartbeat: 20 * time.Second, Misses: 2, ProbeRate: 2}
	a := newMember(t, slow, func() gossip.Capability {
		if !serving.Load() {
			return gossip.Capability{}
		}
		return gossip.Capability{Shards: []gossip.Shard{{ModelCID: "m", Start: 0, End: 8, Layers: 8}}}
	})
	b := newMember(t, fastLive, nil)
	link(t, b, a)
	waitFor(t, 10*time.Second, "b sees a", func() bool { return b.s.View().Alive(a.h.ID()) })
	waitFor(t, 10*time.Second, "a has a peer on the capability topic", func() bool {
		return len(a.r.PubSub().ListPeers(gossip.CapsTopic)) > 0
	})
	serving.Store(true)
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	if err := a.s.Beat(gone); err == nil {
		t.Fatal("a publish whose time is up succeeded")
	}
	time.Sleep(serveGap) // a answers b at most every serveGap
	c, err := b.s.xchg.fetch1(t.Context(), a.h.ID())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Shards) != 1 {
		t.Fatalf("a handed out a record with %d shards: want the one it sealed last, with 1", len(c.Shards))
	}
}
