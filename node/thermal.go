package node

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/llmswarm/llmswarm/gossip"
)

// thermalState is the device's thermal state as iOS and Android name it,
// read from Linux's thermal zones; "" where there are none.
func thermalState() string { return thermalIn("/sys/class/thermal") }

// thermalIn rates each thermal zone under root and returns the worst.
// A zone's own trip points say what its temperature means: at or above a
// critical or hot trip it is critical; at or above its lowest passive
// trip (where the kernel starts throttling) serious; within 10 °C below
// that, fair. A zone without a passive trip is rated by fixed
// temperatures that laptops and boards reach only when they throttle
// (serious from 90 °C, fair from 80 °C; a laptop's package often runs at 80-90
// °C under a sustained load, which must not pause it for good).
func thermalIn(root string) string {
	zones, _ := filepath.Glob(filepath.Join(root, "thermal_zone*"))
	worst := -1
	for _, z := range zones {
		temp, ok := milliC(filepath.Join(z, "temp"))
		if !ok {
			continue
		}
		worst = max(worst, rateZone(z, temp))
	}
	if worst < 0 {
		return ""
	}
	return []string{gossip.ThermalNominal, gossip.ThermalFair, gossip.ThermalSerious, gossip.ThermalCritical}[worst]
}

// rateZone rates one zone at temp (m°C): 0 nominal .. 3 critical.
func rateZone(zone string, temp int) int {
	passive, critical := -1, -1
	trips, _ := filepath.Glob(filepath.Join(zone, "trip_point_*_type"))
	for _, tp := range trips {
		typ, err := os.ReadFile(tp)
		if err != nil {
			continue
		}
		at, ok := milliC(strings.TrimSuffix(tp, "_type") + "_temp")
		if !ok || at < 40_000 { // unset trips read 0, or a sentinel
			continue
		}
		switch strings.TrimSpace(string(typ)) {
		case "passive":
			if passive < 0 || at < passive {
				passive = at
			}
		case "hot", "critical":
			if critical < 0 || at < critical {
				critical = at
			}
		}
	}
	serious, fair := 90_000, 80_000
	if passive > 0 {
		serious, fair = passive, passive-10_000
	}
	switch {
	case critical > 0 && temp >= critical, critical < 0 && temp >= 100_000:
		return 3
	case temp >= serious:
		return 2
	case temp >= fair:
		return 1
	}
	return 0
}

// milliC reads a sysfs temperature in m°C.
func milliC(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return v, err == nil
}
