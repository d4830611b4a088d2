package node

import "fmt"

// PowerConfig sets when a peer on battery or running hot stops taking new
// work (docs/power.md). Work already accepted finishes.
type PowerConfig struct {
	// MinBattery: at or below this battery percent, not charging, the
	// peer takes no new work. Default 20; -1: never stop for the battery.
	MinBattery int `json:"min_battery,omitempty"`
	// PauseThermal: at this thermal state or hotter the peer takes no new
	// work: fair, serious (default), critical, or off.
	PauseThermal string `json:"pause_thermal,omitempty"`
}

func (c PowerConfig) withDefaults() PowerConfig {
	if c.MinBattery == 0 {
		c.MinBattery = 20
	}
	if c.PauseThermal == "" {
		c.PauseThermal = "serious"
	}
	return c
}

func (c PowerConfig) validate() error {
	if c.MinBattery < -1 || c.MinBattery > 100 {
		return fmt.Errorf("config: power.min_battery %d: want 1..100, or -1 (never)", c.MinBattery)
	}
	switch c.PauseThermal {
	case "fair", "serious", "critical", "off":
	default:
		return fmt.Errorf("config: power.pause_thermal %q: want fair, serious, critical or off", c.PauseThermal)
	}
	return nil
}
