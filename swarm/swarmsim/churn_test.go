package swarmsim

import (
	"testing"
	"testing/synctest"
	"time"
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
