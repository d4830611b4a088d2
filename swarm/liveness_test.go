package swarm

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// TestIdleDeadAfter: the bound on noticing a dead peer not in use is two
// rounds of the probe budget over the table and the misses' timeouts; it
// grows with the table once a round outlasts the 30 s between probes.
func TestIdleDeadAfter(t *testing.T) {
	for _, tc := range []struct {
		live Liveness
		idle int
		want time.Duration
	}{
		{Liveness{}, 0, 70 * time.Second},
		{Liveness{}, 10, 70 * time.Second},
		{Liveness{}, 15, 70 * time.Second},
		{Liveness{}, 40, 2*80*time.Second + 10*time.Second},
		{Liveness{}, 1000, 2*2000*time.Second + 10*time.Second},
		{Liveness{ProbeRate: 10, Misses: 3}, 1000, 2*100*time.Second + 15*time.Second},
	} {
		if got := tc.live.IdleDeadAfter(tc.idle); got != tc.want {
			t.Errorf("%+v.IdleDeadAfter(%d) = %s, want %s", tc.live, tc.idle, got, tc.want)
		}
	}
}

// TestBudgetReachesTheDead: with a table larger than the probe budget
// covers every 30 s (40 live peers at 0.5 probes a second), a dead peer,
// which may come back, still gets its probe: the most overdue go first.
// (Live peers first starved it: in a swarm of 64 real daemons, one held
// dead early on was never probed again, and never alive again.)
func TestBudgetReachesTheDead(t *testing.T) {
	h := newHost(t)
	v := NewView(h.ID(), Liveness{})
	k := newKeeper(h, v, slog.New(slog.DiscardHandler))
	t0 := time.Now()
	add := func() peer.ID {
		id := testID(t)
		v.observe(&gossip.Capability{PeerID: id.String(), Seq: 1}, nil, t0, netip.Addr{}, time.Hour)
		return id
	}
	for range 40 {
		add()
	}
	dead := add()
	v.markDead(dead, t0)
	for now := t0; now.Sub(t0) < 10*time.Minute; now = now.Add(time.Second) {
		jobs, _ := k.schedule(now, keepWorkers)
		for _, j := range jobs {
			if j.id == dead {
				t.Logf("the dead peer was probed %s after it died (due after %s)", now.Sub(t0), deadProbeGap)
				if now.Sub(t0) > 2*deadProbeGap {
					t.Errorf("the dead peer waited %s for its probe, want at most %s", now.Sub(t0), 2*deadProbeGap)
				}
				return
			}
			k.st[j.id].busy, k.st[j.id].probed = false, now // answered at once
		}
	}
	t.Fatal("the dead peer was not probed in 10 minutes")
}
