package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/llmswarm/llmswarm/gossip"
)

// TestBatteryOnMains: Linux says "Not charging" for a battery on a
// charger that does not charge it (a charge threshold, or an old laptop's
// worn battery, often reading a few percent): that laptop is on power and
// must not stop taking work for its battery. "Unknown" with a mains supply
// online is on power too; discharging is not, nor unknown on no charger.
func TestBatteryOnMains(t *testing.T) {
	for _, tc := range []struct {
		name     string
		files    map[string]string
		want     *gossip.Battery
		refusing bool
	}{
		{"not charging (on a charger)", map[string]string{"BAT0/capacity": "8\n", "BAT0/status": "Not charging\n"},
			&gossip.Battery{Percent: 8, Charging: true}, false},
		{"unknown, mains online", map[string]string{"BAT0/capacity": "3", "BAT0/status": "Unknown", "AC/type": "Mains", "AC/online": "1"},
			&gossip.Battery{Percent: 3, Charging: true}, false},
		{"unknown, no charger", map[string]string{"BAT0/capacity": "3", "BAT0/status": "Unknown", "AC/type": "Mains", "AC/online": "0"},
			&gossip.Battery{Percent: 3}, true},
		{"discharging", map[string]string{"BAT1/capacity": "15", "BAT1/status": "Discharging", "ADP1/type": "Mains", "ADP1/online": "0"},
			&gossip.Battery{Percent: 15}, true},
		{"charging", map[string]string{"BAT0/capacity": "15", "BAT0/status": "Charging"}, &gossip.Battery{Percent: 15, Charging: true}, false},
		{"full", map[string]string{"BAT0/capacity": "100", "BAT0/status": "Full"}, &gossip.Battery{Percent: 100, Charging: true}, false},
		{"no battery", map[string]string{"AC/type": "Mains", "AC/online": "1"}, nil, false},
	} {
		root := t.TempDir()
		for name, body := range tc.files {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got := batteryIn(root)
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("%s: battery %+v, want %+v", tc.name, got, tc.want)
		}
		cfg := PowerConfig{}.withDefaults()
		if why := cfg.refusal("", got); (why != "") != tc.refusing {
			t.Errorf("%s: refusal %q, want refusing %v", tc.name, why, tc.refusing)
		}
	}
}
