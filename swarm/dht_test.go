package swarm

import (
	"context"
	"fmt"
	"testing"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// newDHTMember is newMember with a DHT server of its own.
func newDHTMember(t *testing.T, live Liveness, self SelfFunc) *member {
	t.Helper()
	return newDHTMemberMode(t, live, self, dht.ModeServer)
}

// newDHTMemberMode is newMember with a DHT of its own in mode.
func newDHTMemberMode(t *testing.T, live Liveness, self SelfFunc, mode dht.ModeOpt) *member {
	t.Helper()
	h, k := bareHost(t)
	ctx, cancel := context.WithCancel(context.Background())
	r, err := gossip.NewRouter(ctx, h, k, nil, gossip.WithHeartbeat(live.Heartbeat), gossip.WithColocation(gossip.Colocation{Threshold: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	kad, err := dht.New(ctx, h, dht.ProtocolPrefix("/swarm"), dht.Mode(mode))
	if err != nil {
		t.Fatal(err)
	}
	if self == nil {
		self = func() gossip.Capability { return gossip.Capability{} }
	}
	m := &member{h: h, key: k, r: r, cancel: cancel}
	m.s = New(h, r, kad, self, live, nil)
	if err := m.s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.stop(); kad.Close() })
	return m
}

// waitProviders waits until m's DHT stores n providers of model.
func waitProviders(t *testing.T, m *member, model string, n int) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("%d providers of %s stored", n, model), func() bool {
		ps, err := m.s.dht.ProviderStore().GetProviders(t.Context(), ModelKey(model).Hash())
		return err == nil && len(ps) >= n
	})
}

// TestLearnHoldersFromDHT: a peer whose table does not hold a model's
// holder (its only contact keeps no rows to sample) finds it through the
// DHT provider records and asks it for its record: the holder is then
// alive in its view with its shards.
func TestLearnHoldersFromDHT(t *testing.T) {
	live := fastLive
	holder := newDHTMember(t, live, func() gossip.Capability {
		return gossip.Capability{Shards: []gossip.Shard{{ModelCID: "m", Start: 0, End: 4, Layers: 4}}}
	})
	// The contact's table holds only itself: its samples are empty.
	small := live
	small.MaxPeers = 1
	contact := newDHTMember(t, small, nil)
	link(t, holder, contact)
	waitProviders(t, contact, "m", 1)
	newcomer := newDHTMember(t, live, nil)
	link(t, newcomer, contact)
	// At once, before the newcomer's own member lookup (2 s after its
	// start) would connect it to the holder.
	start := time.Now()
	var n int
	waitFor(t, 10*time.Second, "the holder learned through the DHT", func() bool {
		got, err := newcomer.s.LearnHolders(t.Context(), "m")
		n += got
		return err == nil && len(newcomer.s.View().HoldersOf("m")) == 1
	})
	hs := newcomer.s.View().HoldersOf("m")
	if hs[0].Peer.ID != holder.h.ID() {
		t.Fatalf("holders %v: want the holder", hs)
	}
	// In a swarm this small the newcomer's own DHT queries dial the
	// holder too (it is close to every key), so it may be learned that
	// way first; either way it is in the view once LearnHolders returns.
	t.Logf("holder in the view %v after the newcomer connected (%d learned by LearnHolders itself)", time.Since(start), n)
}

// TestEnsureHoldersCompletesCoverage: a peer whose table holds a holder
// of the model's first half but none of its second (a newcomer of a swarm
// larger than its samples) looks the rest up in the DHT: after
// EnsureHolders the table's holders cover every layer. Holders of some
// layers are not enough to route over the model.
func TestEnsureHoldersCompletesCoverage(t *testing.T) {
	live := fastLive
	small := live
	small.MaxPeers = 1 // a table of itself only: its samples are empty
	half := func(start, end int) SelfFunc {
		return func() gossip.Capability {
			return gossip.Capability{Shards: []gossip.Shard{{ModelCID: "m", Start: start, End: end, Layers: 4}}}
		}
	}
	first := newDHTMember(t, small, half(0, 2))
	// A DHT client: the newcomer's own DHT lookups (which dial the peers
	// closest to a key) never meet it, only its provider record does.
	second := newDHTMemberMode(t, small, half(2, 4), dht.ModeClient)
	contact := newDHTMember(t, small, nil)
	link(t, first, contact)
	link(t, second, contact)
	waitProviders(t, contact, "m", 2)
	newcomer := newDHTMember(t, live, nil)
	link(t, newcomer, first)
	link(t, newcomer, contact)
	waitFor(t, 10*time.Second, "the first half's holder in the view, the contact in the DHT's table", func() bool {
		return len(newcomer.s.View().HoldersOf("m")) > 0 && newcomer.s.dht.RoutingTable().Find(contact.h.ID()) != ""
	})
	got, err := newcomer.s.EnsureHolders(t.Context(), "m")
	if err != nil {
		t.Fatal(err)
	}
	var layers []int
	for _, h := range newcomer.s.View().HoldersOf("m") {
		layers = append(layers, h.Shard.Start, h.Shard.End)
	}
	if len(layers) != 4 {
		t.Fatalf("after EnsureHolders (learned %d) the view holds the ranges %v, want [0 2 2 4]", got, layers)
	}
}

// TestEnsureHoldersWhileStarting: a newcomer asked for a route at once,
// before its first DHT peer has answered (its bootstrap dial under way),
// waits for one and finds the holder whose record it has no other way to
// get (the contact's table keeps no rows to sample); before, the lookup
// ended at once, empty, and the request had no route.
func TestEnsureHoldersWhileStarting(t *testing.T) {
	live := fastLive
	small := live
	small.MaxPeers = 1
	holder := newDHTMemberMode(t, small, func() gossip.Capability {
		return gossip.Capability{Shards: []gossip.Shard{{ModelCID: "m", Start: 0, End: 4, Layers: 4}}}
	}, dht.ModeClient)
	contact := newDHTMember(t, small, nil)
	link(t, holder, contact)
	waitProviders(t, contact, "m", 1)
	newcomer := newDHTMember(t, live, nil)
	dialed := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // the bootstrap dial, late
		dialed <- newcomer.h.Connect(t.Context(), peer.AddrInfo{ID: contact.h.ID(), Addrs: contact.h.Addrs()})
	}()
	defer func() {
		if err := <-dialed; err != nil {
			t.Errorf("the newcomer's dial of its contact: %v", err)
		}
	}()
	got, err := newcomer.s.EnsureHolders(t.Context(), "m")
	if err != nil || len(newcomer.s.View().HoldersOf("m")) != 1 {
		t.Fatalf("EnsureHolders at start: learned %d, %v; the view holds %d holders, want 1", got, err, len(newcomer.s.View().HoldersOf("m")))
	}
}
