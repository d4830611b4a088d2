package swarmsim

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmswarm/llmswarm/pipeline"
)

// TestDetectInUseEveryPhase: a peer in use that crashes (nothing it sends
// arrives; its connections stay open) is not routable for its user within
// goalDetect, whenever in the heartbeat it crashes: ten crashes a tenth of
// a heartbeat apart, each in a swarm of its own. The worst phase is a
// crash just after an answer: the next probe a heartbeat later times out
// after 0.8 of one and its retry, a tenth later, after 0.8 more.
func TestDetectInUseEveryPhase(t *testing.T) {
	cfg := Config{Link: Link{Latency: 50 * time.Millisecond}}
	hb := cfg.withDefaults().Heartbeat
	var worst time.Duration
	for phase := range 10 {
		synctest.Test(t, func(t *testing.T) {
			s := New(cfg)
			defer s.Close()
			for range 3 {
				if _, err := s.Add(Spec{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Settle(time.Minute, nil); err != nil {
				t.Fatal(err)
			}
			user, victim := s.Peers()[0], s.Peers()[1]
			release, err := user.Use(context.Background(), pipeline.Route{Hops: []pipeline.Hop{{Peer: victim.ID().String()}}})
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			time.Sleep(2*hb + time.Duration(phase)*hb/10)
			victim.Crash()
			d, err := WaitUntil(time.Minute, func() bool { return !user.Service.View().Routable(victim.ID()) })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("crash at %d/10 of a heartbeat: noticed after %s", phase, d)
			worst = max(worst, d)
		})
	}
	t.Logf("SIMDETECT worst of 10 phases: %s (goal %s)", worst, goalDetect)
	if worst > goalDetect {
		t.Errorf("a crash on a route in use noticed after %s at worst, want <= %s", worst, goalDetect)
	}
}

// TestJoinPastBoundPublishesNothing: in a swarm larger than the bound of
// neighbours (here 4, of 16 peers joining 5 s apart over slow links, 300
// ms each way), a peer whose contact's sample fills its table sends its
// first record to no gossip topic: the peers it probes take it from its
// questions. Before, a joining peer published it as soon as its first
// gossip peer appeared, before the leads of its sample had answered (its
// table not yet full): to the whole swarm, N² relays at a swarm's start.
// The first peers, with room for every peer, publish theirs.
func TestJoinPastBoundPublishesNothing(t *testing.T) {
	const n, bound = 16, 4
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{Link: Link{Latency: 300 * time.Millisecond}, Neighbours: bound})
		defer s.Close()
		for range n {
			if _, err := s.Add(Spec{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Second)
		}
		if _, err := s.Settle(time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		var late uint64
		var early []uint64
		for _, p := range s.Peers() {
			if p.Index <= bound+1 {
				early = append(early, p.Service.Published())
			} else {
				late += p.Service.Published()
			}
		}
		t.Logf("SIMJOIN records published by the first %d peers %v, by the %d after them %d", bound+2, early, n-bound-2, late)
		if late != 0 {
			t.Errorf("peers joining past the bound published %d records: want none", late)
		}
	})
}
