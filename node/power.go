package node

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/gossip"
)

// Power is the device's power state as the app that embeds the peer
// reports it (a phone's battery and thermal APIs). Once reported, it
// replaces what the peer reads from Linux's sysfs.
type Power struct {
	// BatteryPercent is 0..100; -1: the device has no battery (mains).
	BatteryPercent int `json:"battery_percent"`
	// Charging is true while on a charger (a full battery on a charger
	// counts as charging).
	Charging bool `json:"charging"`
	// Thermal is nominal, fair, serious or critical (iOS's
	// ProcessInfo.ThermalState, Android's PowerManager thermal status
	// mapped onto them); "": unknown.
	Thermal string `json:"thermal,omitempty"`
}

func (p Power) validate() error {
	if p.BatteryPercent < -1 || p.BatteryPercent > 100 {
		return fmt.Errorf("power: battery_percent %d: want 0..100, or -1 for no battery", p.BatteryPercent)
	}
	if thermalRank(p.Thermal) < 0 {
		return fmt.Errorf("power: thermal %q: want nominal, fair, serious, critical or empty", p.Thermal)
	}
	if p.BatteryPercent == -1 && p.Charging {
		return fmt.Errorf("power: charging without a battery (battery_percent -1)")
	}
	return nil
}

// thermalRank orders thermal states: 0 unknown or nominal .. 3 critical;
// -1 for a name that is none of them.
func thermalRank(s string) int {
	switch s {
	case "", gossip.ThermalNominal:
		return 0
	case gossip.ThermalFair:
		return 1
	case gossip.ThermalSerious:
		return 2
	case gossip.ThermalCritical:
		return 3
	}
	return -1
}

// powerState decides whether this peer takes new work. The zero value
// reads the system and has no policy until configure.
type powerState struct {
	// check serializes checkPower, so that a verdict drawn from a state
	// read before a report never overwrites the report's own verdict
	// (a heartbeat racing ReportPower), and changes are logged in order.
	check    sync.Mutex
	mu       sync.Mutex
	reported *Power // nil: read sysfs
	cfg      PowerConfig
	why      string // why new work is refused; "" while it is taken
	log      *slog.Logger
}

// ReportPower tells the peer its device's power state. From then on the
// capability record carries it, and the peer stops taking new work while
// the battery is at or below power.min_battery and not charging, or the
// device is as hot as power.pause_thermal (docs/power.md). It may be
// called before Start.
func (n *Node) ReportPower(p Power) error {
	if err := p.validate(); err != nil {
		return err
	}
	n.power.mu.Lock()
	n.power.reported = &p
	n.power.mu.Unlock()
	n.checkPower()
	return nil
}

// readPower is the device's power state now: what the app reported, or
// what Linux says.
func (n *Node) readPower() (thermal string, bat *gossip.Battery) {
	n.power.mu.Lock()
	r := n.power.reported
	n.power.mu.Unlock()
	if r == nil {
		return thermalState(), battery()
	}
	if r.BatteryPercent >= 0 {
		bat = &gossip.Battery{Percent: r.BatteryPercent, Charging: r.Charging}
	}
	return r.Thermal, bat
}

// checkPower re-reads the power state, applies the policy and reports a
// change of mind once (log and status warnings). It returns the state and
// why new work is refused, "" while it is taken.
func (n *Node) checkPower() (thermal string, bat *gossip.Battery, why string) {
	n.power.check.Lock()
	defer n.power.check.Unlock()
	thermal, bat = n.readPower()
	n.power.mu.Lock()
	why = n.power.cfg.refusal(thermal, bat)
	was, log := n.power.why, n.power.log
	n.power.why = why
	n.power.mu.Unlock()
	if log == nil { // before Start: Start checks again
		return thermal, bat, why
	}
	switch {
	case why == was:
	case why != "":
		n.health.set("power", "not taking new work: "+why)
		log.Warn("not taking new work", "why", why)
	default:
		n.health.clear("power")
		log.Info("taking work again", "thermal", thermal, "battery", bat)
	}
	return thermal, bat, why
}

// refusing says why this peer refuses new work, "" while it takes it, as
// last decided (every heartbeat and every report).
func (n *Node) refusing() string {
	n.power.mu.Lock()
	defer n.power.mu.Unlock()
	return n.power.why
}

// refusal applies the policy to a power state.
func (c PowerConfig) refusal(thermal string, bat *gossip.Battery) string {
	if bat != nil && !bat.Charging && c.MinBattery >= 0 && bat.Percent <= c.MinBattery {
		return fmt.Sprintf("battery at %d%% and not charging (power.min_battery %d)", bat.Percent, c.MinBattery)
	}
	if limit := thermalRank(c.PauseThermal); c.PauseThermal != "off" && limit > 0 && thermalRank(thermal) >= limit {
		return fmt.Sprintf("thermal state %s (power.pause_thermal %s)", thermal, c.PauseThermal)
	}
	return ""
}

// startPower applies the configured policy from the first record on.
func (n *Node) startPower() {
	n.power.mu.Lock()
	n.power.cfg, n.power.log = n.cfg.Power, n.log
	n.power.mu.Unlock()
	n.checkPower()
}

func (n *Node) powerStatus() client.PowerStatus {
	thermal, bat, why := n.checkPower()
	n.power.mu.Lock()
	reported := n.power.reported != nil
	n.power.mu.Unlock()
	out := client.PowerStatus{Thermal: thermal, TakingWork: why == "", Why: why, Reported: reported}
	if bat != nil {
		b := client.Battery(*bat)
		out.Battery = &b
	}
	return out
}
