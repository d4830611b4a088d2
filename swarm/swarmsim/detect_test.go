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
