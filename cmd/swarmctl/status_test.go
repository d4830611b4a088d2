package main

import (
	"testing"

	"github.com/llmswarm/llmswarm/node/client"
)

func TestPowerLine(t *testing.T) {
	for _, c := range []struct {
		in   client.PowerStatus
		want string
	}{
		{client.PowerStatus{TakingWork: true}, "no battery"},
		{client.PowerStatus{Battery: &client.Battery{Percent: 55, Charging: true}, Thermal: "fair", TakingWork: true},
			"battery 55%, charging, thermal fair"},
		{client.PowerStatus{Battery: &client.Battery{Percent: 10}, Why: "battery at 10% and not charging (power.min_battery 20)"},
			"battery 10%; NOT taking new work: battery at 10% and not charging (power.min_battery 20)"},
		// A swarmd from before power states answers no "power": nothing
		// to show, and surely not that it refuses work.
		{client.PowerStatus{}, ""},
	} {
		if got := powerLine(c.in); got != c.want {
			t.Errorf("powerLine(%+v) = %q, want %q", c.in, got, c.want)
		}
	}
}
