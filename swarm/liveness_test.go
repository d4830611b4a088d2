package swarm

import (
	"testing"
	"time"
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
