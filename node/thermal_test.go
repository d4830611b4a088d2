package node

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestThermalFromTripPoints: a zone is rated by its own trip points
// (throttling at its passive trip, critical at its critical or hot one),
// a zone without a passive trip by fixed temperatures a laptop under load
// stays below, and the worst zone wins.
func TestThermalFromTripPoints(t *testing.T) {
	type trip struct {
		typ string
		at  int
	}
	for _, c := range []struct {
		name  string
		zones [][]any // temp, trips...
		want  string
	}{
		{"none", nil, ""},
		{"laptop package at 88 C, no passive trip", [][]any{{88_000, trip{"critical", 105_000}}}, "fair"},
		{"laptop at 92 C, no passive trip", [][]any{{92_000, trip{"critical", 105_000}}}, "serious"},
		{"Pi at 72 C, passive at 80 C", [][]any{{72_000, trip{"passive", 80_000}, trip{"critical", 110_000}}}, "fair"},
		{"Pi throttling at 81 C", [][]any{{81_000, trip{"passive", 80_000}, trip{"critical", 110_000}}}, "serious"},
		{"at a hot trip", [][]any{{96_000, trip{"hot", 95_000}}}, "critical"},
		{"unset trip reads 0", [][]any{{50_000, trip{"passive", 0}}}, "nominal"},
		{"no trips, 101 C", [][]any{{101_000}}, "critical"},
		{"worst zone wins", [][]any{{40_000}, {85_000, trip{"passive", 80_000}}}, "serious"},
	} {
		root := t.TempDir()
		for i, z := range c.zones {
			d := filepath.Join(root, "thermal_zone"+strconv.Itoa(i))
			os.MkdirAll(d, 0o755)
			os.WriteFile(filepath.Join(d, "temp"), []byte(strconv.Itoa(z[0].(int))+"\n"), 0o644)
			for k, tp := range z[1:] {
				tr := tp.(trip)
				os.WriteFile(filepath.Join(d, "trip_point_"+strconv.Itoa(k)+"_type"), []byte(tr.typ+"\n"), 0o644)
				os.WriteFile(filepath.Join(d, "trip_point_"+strconv.Itoa(k)+"_temp"), []byte(strconv.Itoa(tr.at)+"\n"), 0o644)
			}
		}
		if got := thermalIn(root); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
