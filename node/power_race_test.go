package node

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// TestReportPowerNotUndoneByHeartbeat: a heartbeat that read the power
// state just before the app reported a low battery does not then put back
// the verdict it made from the old state: once ReportPower has returned,
// the peer refuses new work (and says so in its warnings) until a later
// report says otherwise, whatever heartbeats ran meanwhile.
func TestReportPowerNotUndoneByHeartbeat(t *testing.T) {
	for i := range 20000 {
		n := &Node{}
		n.power.cfg = PowerConfig{MinBattery: 20, PauseThermal: "serious"}
		n.power.log = slog.New(slog.DiscardHandler)
		if i%2 == 1 {
			// The app's earlier report: fine, on a charger.
			n.power.reported = &Power{BatteryPercent: 90, Charging: true}
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.checkPower() // a heartbeat, or a Status call
		}()
		if err := n.ReportPower(Power{BatteryPercent: 10, Thermal: "nominal"}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if why := n.refusing(); !strings.Contains(why, "battery at 10%") {
			t.Fatalf("run %d: after reporting 10%% battery the peer refuses %q, want the battery", i, why)
		}
		if w := strings.Join(n.Warnings(), "\n"); !strings.Contains(w, "battery at 10%") {
			t.Fatalf("run %d: warnings %q, want the battery", i, w)
		}
	}
}
