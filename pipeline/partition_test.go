package pipeline

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

const gib = int64(1) << 30

func TestPartition(t *testing.T) {
	shape := ModelShape{Layers: 32, LayerBytes: gib, HiddenBytesPerToken: 2 * 4096}
	dev := func(id string, memLayers int64, ms, rtt float64) Device {
		return Device{ID: id, MemBytes: memLayers * gib, MsPerLayer: ms, RTTms: rtt}
	}
	tests := []struct {
		name       string
		devs       []Device
		shape      ModelShape
		wantLayers map[string]int    // exact layer count per used device
		wantUnused map[string]string // device -> substring of its reason
		wantBottle float64
	}{
		{
			name:       "homogeneous devices split evenly",
			devs:       []Device{dev("a", 32, 2, 1), dev("b", 32, 2, 1), dev("c", 32, 2, 1), dev("d", 32, 2, 1)},
			shape:      shape,
			wantLayers: map[string]int{"a": 8, "b": 8, "c": 8, "d": 8},
			wantBottle: 17,
		},
		{
			name:       "3x faster device gets 3x the layers",
			devs:       []Device{dev("slow", 32, 3, 0.5), dev("fast", 32, 1, 0.5)},
			shape:      ModelShape{Layers: 24, LayerBytes: gib},
			wantLayers: map[string]int{"slow": 6, "fast": 18},
			wantBottle: 18.5,
		},
		{
			name: "small memory caps a fast device, a tiny one gets nothing",
			devs: []Device{dev("fast-small", 2, 1, 0), dev("big", 32, 2, 0),
				{ID: "tiny", MemBytes: gib - 1, MsPerLayer: 0.1}},
			shape:      ModelShape{Layers: 12, LayerBytes: gib},
			wantLayers: map[string]int{"fast-small": 2, "big": 10},
			wantUnused: map[string]string{"tiny": "too little memory"},
			wantBottle: 20,
		},
		{
			name:       "very slow device left out",
			devs:       []Device{dev("a", 32, 1, 1), dev("phone", 32, 50, 1), dev("b", 32, 1, 1)},
			shape:      ModelShape{Layers: 20, LayerBytes: gib},
			wantLayers: map[string]int{"a": 10, "b": 10},
			wantUnused: map[string]string{"phone": "too slow"},
			wantBottle: 11,
		},
		{
			name:       "far device cannot lower the bottleneck",
			devs:       []Device{dev("near", 32, 1, 0), dev("far", 32, 1, 3)},
			shape:      ModelShape{Layers: 4, LayerBytes: gib},
			wantLayers: map[string]int{"near": 4},
			wantUnused: map[string]string{"far": "not needed"},
			wantBottle: 4,
		},
		{
			name:       "single device that fits is one stage",
			devs:       []Device{dev("only", 32, 1.5, 2)},
			shape:      shape,
			wantLayers: map[string]int{"only": 32},
			wantBottle: 50,
		},
		{
			name:       "equal bottleneck and latency: fewer stages",
			devs:       []Device{dev("a", 2, 1, 0), dev("b", 2, 1, 0), dev("c", 2, 1, 0)},
			shape:      ModelShape{Layers: 4, LayerBytes: gib},
			wantLayers: map[string]int{"a": 2, "b": 2},
			wantUnused: map[string]string{"c": "not needed"},
			wantBottle: 2,
		},
		{
			name:       "unmeasured device counts as DefaultMsPerLayer",
			devs:       []Device{dev("unmeasured", 32, 0, 0), dev("measured", 32, DefaultMsPerLayer, 0)},
			shape:      ModelShape{Layers: 10, LayerBytes: gib},
			wantLayers: map[string]int{"unmeasured": 5, "measured": 5},
			wantBottle: 5 * DefaultMsPerLayer,
		},
		{
			name:       "invalid measurements left out",
			devs:       []Device{dev("nan", 32, math.NaN(), 0), dev("neg", 32, 1, -1), dev("ok", 32, 1, 0)},
			shape:      ModelShape{Layers: 3, LayerBytes: gib},
			wantLayers: map[string]int{"ok": 3},
			wantUnused: map[string]string{"nan": "invalid MsPerLayer NaN", "neg": "invalid RTTms -1"},
			wantBottle: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Partition(tt.devs, tt.shape)
			if err != nil {
				t.Fatalf("Partition: %v", err)
			}
			checkPlan(t, tt.devs, tt.shape, plan)
			got := make(map[string]int)
			for _, s := range plan.Stages {
				got[s.Device] = s.End - s.Start
			}
			if len(got) != len(tt.wantLayers) {
				t.Errorf("stages %+v, want layers %v", plan.Stages, tt.wantLayers)
			}
			for id, want := range tt.wantLayers {
				if got[id] != want {
					t.Errorf("%s runs %d layers, want %d (stages %+v)", id, got[id], want, plan.Stages)
				}
			}
			if len(plan.Unused) != len(tt.wantUnused) {
				t.Errorf("unused %v (%v), want %v", plan.Unused, plan.UnusedReasons, tt.wantUnused)
			}
			for id, sub := range tt.wantUnused {
				if r := plan.UnusedReasons[id]; !strings.Contains(r, sub) {
					t.Errorf("reason for %s = %q, want it to contain %q", id, r, sub)
				}
			}
			if math.Abs(plan.BottleneckMs-tt.wantBottle) > 1e-9 {
				t.Errorf("bottleneck %v ms, want %v", plan.BottleneckMs, tt.wantBottle)
			}
		})
	}
}

func TestPartitionErrors(t *testing.T) {
	ok := []Device{{ID: "a", MemBytes: 100, MsPerLayer: 1}}
	tests := []struct {
		name    string
		devs    []Device
		shape   ModelShape
		wantErr error
		wantMsg string
	}{
		{"no devices", nil, ModelShape{Layers: 4, LayerBytes: 1}, ErrNoDevices, ""},
		{"zero layers", ok, ModelShape{Layers: 0, LayerBytes: 1}, ErrBadShape, "0 layers"},
		{"too many layers", ok, ModelShape{Layers: MaxModelLayers + 1, LayerBytes: 1}, ErrBadShape, ""},
		{"zero layer bytes", ok, ModelShape{Layers: 4}, ErrBadShape, "0 bytes per layer"},
		{"negative hidden bytes", ok, ModelShape{Layers: 4, LayerBytes: 1, HiddenBytesPerToken: -2}, ErrBadShape, ""},
		{"empty ID", []Device{{MemBytes: 10}}, ModelShape{Layers: 4, LayerBytes: 1}, ErrBadDevice, "no ID"},
		{"duplicate ID", []Device{{ID: "a", MemBytes: 10}, {ID: "a", MemBytes: 10}}, ModelShape{Layers: 4, LayerBytes: 1}, ErrBadDevice, `"a" listed twice`},
		{"no valid device", []Device{{ID: "a", MemBytes: 10, MsPerLayer: math.Inf(1)}}, ModelShape{Layers: 4, LayerBytes: 1}, ErrNoDevices, "valid measurements"},
		{
			// 10-byte devices hold 2 whole 4-byte layers each: 4 of 6 layers fit.
			name:    "does not fit",
			devs:    []Device{{ID: "a", MemBytes: 10, MsPerLayer: 1}, {ID: "b", MemBytes: 10, MsPerLayer: 1}},
			shape:   ModelShape{Layers: 6, LayerBytes: 4},
			wantErr: ErrDoesNotFit,
			wantMsg: "need 24 bytes; the devices have room for 4 whole layers, 8 bytes (2 layers) missing",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Partition(tt.devs, tt.shape)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "pipeline: ") || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err = %q, want it to contain %q", err, tt.wantMsg)
			}
		})
	}
}

// TestPartitionBruteForce proves the DP optimal on small random cases by
// trying every layer count for every device and every choice of the stages
// that run the head and the embedding. Times are multiples of 0.1 ms so
// that ties, and the tie-breaks, are frequent.
func TestPartitionBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const layerBytes = 1000
	fits, cases := 0, 3000
	for c := 0; c < cases; c++ {
		L := 1 + rng.IntN(12)
		devs := make([]Device, 1+rng.IntN(4))
		for i := range devs {
			devs[i] = Device{
				ID:         string(rune('a' + i)),
				MemBytes:   int64(rng.IntN(L+1))*layerBytes + int64(rng.IntN(layerBytes)),
				MsPerLayer: float64(rng.IntN(50)) / 10, // 0 = unmeasured
				RTTms:      float64(rng.IntN(30)) / 10,
			}
		}
		m := ModelShape{Layers: L, LayerBytes: layerBytes}
		if c%3 != 0 {
			// Multiples of 0.5 layers keep the ends' nanoseconds exact, so
			// ties stay ties.
			m.Ends = EndCost{Head: float64(rng.IntN(7)) / 2, Embed: float64(rng.IntN(2)) / 2}
			m.HeadBytes, m.EmbedBytes = int64(rng.IntN(2*layerBytes)), int64(rng.IntN(layerBytes/2))
		}
		plan, err := Partition(devs, m)
		want, feasible := bruteForcePlan(devs, m)
		if !feasible {
			if !errors.Is(err, ErrDoesNotFit) {
				t.Fatalf("case %d %+v L=%d: err = %v, want ErrDoesNotFit", c, devs, L, err)
			}
			continue
		}
		fits++
		if err != nil {
			t.Fatalf("case %d %+v L=%d: %v", c, devs, L, err)
		}
		checkPlan(t, devs, m, plan)
		const eps = 1e-6
		if math.Abs(plan.BottleneckMs-want.bottleneck) > eps ||
			math.Abs(plan.LatencyMs-want.latency) > eps ||
			len(plan.Stages) != want.stages {
			t.Fatalf("case %d %+v L=%d: got bottleneck %v latency %v stages %d (%+v), brute force %+v",
				c, devs, L, plan.BottleneckMs, plan.LatencyMs, len(plan.Stages), plan.Stages, want)
		}
	}
	if fits < cases/3 {
		t.Fatalf("only %d of %d cases fit: the generator needs tuning", fits, cases)
	}
}

type planScore struct {
	bottleneck, latency float64
	stages              int
}

// bruteForcePlan tries every layer count for every device and, for each,
// every choice of first and last stage among the devices used.
func bruteForcePlan(devs []Device, m ModelShape) (best planScore, feasible bool) {
	ks := make([]int, len(devs))
	msOf := func(d Device) float64 {
		if d.MsPerLayer == 0 {
			return DefaultMsPerLayer
		}
		return d.MsPerLayer
	}
	score := func(first, last int) {
		var s planScore
		for j, k := range ks {
			if k == 0 {
				continue
			}
			layers, mem := float64(k), int64(k)*m.LayerBytes
			if j == first {
				layers, mem = layers+m.Ends.Embed, mem+m.EmbedBytes
			}
			if j == last {
				layers, mem = layers+m.Ends.Head, mem+m.HeadBytes
			}
			if mem > devs[j].MemBytes {
				return
			}
			st := layers*msOf(devs[j]) + devs[j].RTTms
			s.bottleneck = max(s.bottleneck, st)
			s.latency += st
			s.stages++
		}
		const eps = 1e-9
		if !feasible || s.bottleneck < best.bottleneck-eps ||
			s.bottleneck < best.bottleneck+eps && (s.latency < best.latency-eps ||
				s.latency < best.latency+eps && s.stages < best.stages) {
			best, feasible = s, true
		}
	}
	var rec func(i, left int)
	rec = func(i, left int) {
		if i == len(devs) {
			if left != 0 {
				return
			}
			var used []int
			for j, k := range ks {
				if k > 0 {
					used = append(used, j)
				}
			}
			if len(used) == 1 {
				score(used[0], used[0])
				return
			}
			for _, f := range used {
				for _, l := range used {
					if f != l {
						score(f, l)
					}
				}
			}
			return
		}
		for k := 0; k <= left && int64(k)*m.LayerBytes <= devs[i].MemBytes; k++ {
			ks[i] = k
			rec(i+1, left-k)
		}
		ks[i] = 0
	}
	rec(0, m.Layers)
	return best, feasible
}

// checkPlan checks what must hold of any plan: contiguous stages covering
// [0,Layers), memory respected with the ends counted, times consistent, the
// middle stages in input order (all of them when the ends cost nothing),
// every device accounted for.
func checkPlan(t *testing.T, devs []Device, m ModelShape, p Plan) {
	t.Helper()
	byID := make(map[string]Device)
	order := make(map[string]int)
	for i, d := range devs {
		byID[d.ID], order[d.ID] = d, i
	}
	next, lastIdx, bottle, lat := 0, -1, 0.0, 0.0
	used := make(map[string]bool)
	for i, s := range p.Stages {
		d, ok := byID[s.Device]
		if !ok || used[s.Device] {
			t.Fatalf("stage %+v: unknown or repeated device", s)
		}
		used[s.Device] = true
		if s.Start != next || s.End <= s.Start {
			t.Fatalf("stages %+v are not contiguous from 0", p.Stages)
		}
		middle := i > 0 && i < len(p.Stages)-1
		if middle || m.endsFree() {
			if order[s.Device] < lastIdx {
				t.Fatalf("stages %+v are not in input order", p.Stages)
			}
			lastIdx = order[s.Device]
		}
		next = s.End
		layers, mem := float64(s.End-s.Start), int64(s.End-s.Start)*m.LayerBytes
		if s.Start == 0 {
			layers, mem = layers+m.Ends.Embed, mem+m.EmbedBytes
		}
		if s.End == m.Layers {
			layers, mem = layers+m.Ends.Head, mem+m.HeadBytes
		}
		if mem > d.MemBytes {
			t.Fatalf("stage %+v needs %d bytes, more than %s's %d", s, mem, d.ID, d.MemBytes)
		}
		ms := d.MsPerLayer
		if ms == 0 {
			ms = DefaultMsPerLayer
		}
		if want := layers*ms + d.RTTms; math.Abs(s.StageMs-want) > 1e-9 {
			t.Fatalf("stage %+v: StageMs %v, want %v", s, s.StageMs, want)
		}
		wantHead, wantEmbed := 0.0, 0.0
		if s.End == m.Layers {
			wantHead = m.Ends.Head * ms
		}
		if s.Start == 0 {
			wantEmbed = m.Ends.Embed * ms
		}
		if math.Abs(s.HeadMs-wantHead) > 1e-9 || math.Abs(s.EmbedMs-wantEmbed) > 1e-9 {
			t.Fatalf("stage %+v: head %v ms and embedding %v ms, want %v and %v", s, s.HeadMs, s.EmbedMs, wantHead, wantEmbed)
		}
		bottle = max(bottle, s.StageMs)
		lat += s.StageMs
	}
	if next != m.Layers {
		t.Fatalf("stages %+v end at %d, want %d", p.Stages, next, m.Layers)
	}
	if math.Abs(bottle-p.BottleneckMs) > 1e-9 || math.Abs(lat-p.LatencyMs) > 1e-9 {
		t.Fatalf("plan says bottleneck %v latency %v, stages say %v and %v", p.BottleneckMs, p.LatencyMs, bottle, lat)
	}
	if len(p.Unused) != len(p.UnusedReasons) || len(p.Unused)+len(p.Stages) != len(devs) {
		t.Fatalf("%d devices, %d stages, unused %v, reasons %v", len(devs), len(p.Stages), p.Unused, p.UnusedReasons)
	}
	lastIdx = -1
	for _, id := range p.Unused {
		if used[id] || p.UnusedReasons[id] == "" || order[id] <= lastIdx && lastIdx >= 0 {
			t.Fatalf("unused %v with reasons %v: used, unexplained or out of order", p.Unused, p.UnusedReasons)
		}
		lastIdx = order[id]
	}
}
