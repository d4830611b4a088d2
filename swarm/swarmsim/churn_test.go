package swarmsim

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// TestLeaveAndPartition: a peer that leaves (its connections closed with
// notice) is dead everywhere within the bound for peers not in use
// (idleBound: Liveness.IdleDeadAfter over the table); the peers connected
// to it probe it at once and notice sooner. A partition makes each side
// hold the other dead within the same bound and as long as it lasts, and
// once it heals every peer holds every other alive again. It logs how long
// each took.
func TestLeaveAndPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Link: Link{Latency: 50 * time.Millisecond}}
		bound := idleBound(cfg, 8)
		s := New(cfg)
		defer s.Close()
		for range 8 {
			if _, err := s.Add(Spec{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Settle(time.Minute, t.Logf); err != nil {
			t.Fatal(err)
		}
		gone := s.Peers()[5]
		gone.Leave()
		d, err := WaitUntil(2*bound, func() bool {
			for _, p := range s.Live() {
				if p.Service.View().Alive(gone.ID()) {
					return false
				}
			}
			return true
		})
		t.Logf("SIMLEAVE a peer that left is dead everywhere after %s", d)
		if err != nil || d > bound {
			t.Fatalf("a peer that left still alive somewhere after %s (want <= %s): %v", d, bound, err)
		}

		live := s.Live()
		a, b := live[:len(live)/2], live[len(live)/2:]
		s.Partition(a, b)
		apart := func() bool {
			for _, p := range a {
				for _, q := range b {
					if p.Service.View().Alive(q.ID()) || q.Service.View().Alive(p.ID()) {
						return false
					}
				}
			}
			return true
		}
		d, err = WaitUntil(2*bound, apart)
		t.Logf("SIMPARTITION each side holds the other dead after %s", d)
		if err != nil || d > bound {
			t.Fatalf("partitioned peers still alive across after %s (want <= %s): %v", d, bound, err)
		}
		time.Sleep(2 * bound)
		if !apart() {
			t.Fatal("a peer across the partition came alive while it lasted")
		}
		s.Heal()
		d, err = s.Settle(5*time.Minute, t.Logf)
		t.Logf("SIMHEAL every peer holds every other alive %s after the partition healed", d)
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestLossyLinks: with a tenth of every peer's datagrams lost, the swarm
// still settles and no live peer is ever held dead (QUIC retransmits what
// is lost; a record arrives late, not never). It logs the traffic, which
// retransmissions raise.
func TestLossyLinks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Link: Link{Latency: 50 * time.Millisecond, Loss: 0.1}}
		s := New(cfg)
		defer s.Close()
		for range 6 {
			if _, err := s.Add(Spec{}); err != nil {
				t.Fatal(err)
			}
		}
		d, err := s.Settle(time.Minute, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		c := cfg.withDefaults()
		watch := 2 * time.Duration(c.Misses) * c.Heartbeat
		start := time.Now()
		for time.Since(start) < watch {
			for _, p := range s.Live() {
				if !s.SeesAll(p) {
					t.Fatalf("with 10%% loss, peer %d held a live peer dead %s after settling", p.Index, time.Since(start))
				}
			}
			time.Sleep(Poll)
		}
		r := s.Measure(watch / 2)
		t.Logf("SIMLOSS 10%% loss: settled in %s, no live peer held dead over %s; %s", d, watch, r)
	})
}

// TestChurnAsks: a tenth of the swarm churns every minute (a peer crashes
// or leaves, chosen at random among all but the seed and the asker, every
// other time among the peers of the asker's route, and a peer holding the
// same layers joins in its place) while one peer asks
// for a pipeline route every 2 s and holds it for 1.5 s, rerouting around
// a hop that fails as node's requests do. No ask fails. It logs how many
// asks rerouted. SWARMSIM_CHURN_N sets the swarm's size (default 16) and
// SWARMSIM_CHURN_FOR how long it churns (default 2 min).
func TestChurnAsks(t *testing.T) {
	n := 16
	if ns := envInts(t, "SWARMSIM_CHURN_N"); len(ns) > 0 {
		n = ns[0]
	}
	span := envDuration("SWARMSIM_CHURN_FOR", 2*time.Minute)
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{Link: Link{Latency: 50 * time.Millisecond}})
		defer s.Close()
		// Three holders a range, none the seed.
		var asker *Peer
		for i := range n {
			var spec Spec
			if i > 0 && i <= 3*modelRanges {
				spec.Shards = []gossip.Shard{HolderShard(i - 1)}
			}
			p, err := s.Add(spec)
			if err != nil {
				t.Fatal(err)
			}
			if i == n-1 {
				asker = p
			}
		}
		if _, err := s.Settle(time.Minute, t.Logf); err != nil {
			t.Fatal(err)
		}
		every := time.Duration(float64(time.Minute) / (0.1 * float64(n)))
		churn := Churn{Every: every, Keep: []*Peer{asker}, Rand: rand.New(rand.NewPCG(1, 2))}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Every other change takes a peer of the route the asker last
		// used, while it may be using it: the case failover is for.
		var mu sync.Mutex
		var lastRoute []*Peer
		changes := make(chan error, 1)
		go func() {
			defer close(changes)
			for i := range int(span / every) {
				select {
				case <-ctx.Done():
					return
				case <-time.After(every):
				}
				var among []*Peer
				if i%2 == 1 {
					mu.Lock()
					among = lastRoute
					mu.Unlock()
				}
				if _, _, err := s.Step(churn, among); err != nil {
					changes <- err
					return
				}
			}
		}()
		asks, rerouted := 0, 0
		for start := time.Now(); time.Since(start) < span; {
			if r, err := Route(asker, ModelCID, ModelLayers); err == nil {
				var hops []*Peer
				for _, h := range r.Hops {
					if id, err := peer.Decode(h.Peer); err == nil && s.Find(id) != nil {
						hops = append(hops, s.Find(id))
					}
				}
				mu.Lock()
				lastRoute = hops
				mu.Unlock()
			}
			r, err := s.Ask(ctx, asker, ModelCID, ModelLayers, 1500*time.Millisecond)
			if err != nil {
				t.Fatalf("ask %d, %s into the churn, failed: %v", asks+1, time.Since(start), err)
			}
			asks++
			if r > 0 {
				rerouted++
			}
			time.Sleep(500 * time.Millisecond)
		}
		cancel()
		if err := <-changes; err != nil {
			t.Fatal(err)
		}
		t.Logf("SIMCHURN N=%d, a peer replaced every %s for %s: %d asks, none failed, %d rerouted", n, every, span, asks, rerouted)
	})
}
