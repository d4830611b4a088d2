package pipeline

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

var (
	// ErrNoDevices: Partition was given no device, or none with usable measurements.
	ErrNoDevices = errors.New("pipeline: no devices")
	// ErrDoesNotFit: the devices' memory, counted in whole layers, is less than the model.
	ErrDoesNotFit = errors.New("pipeline: model does not fit in the devices' memory")
	// ErrBadShape: a layer count or layer size that cannot describe a model.
	ErrBadShape = errors.New("pipeline: bad model shape")
	// ErrBadDevice: a device list built wrong by the caller (empty or duplicate ID).
	ErrBadDevice = errors.New("pipeline: bad device list")
)

// MaxModelLayers bounds layer counts given to Partition and AssembleRoute.
// The largest open models have ~130 layers; the bound keeps the O(L²) dynamic
// programs cheap when the count comes from a peer's announcement. (The stage
// protocol accepts up to 4096: a wire sanity bound, not a planning one.)
const MaxModelLayers = 1024

// maxMeasuredMs is the largest per-layer or round-trip time believed. Anything
// above (1000 s) is a broken measurement; the bound also keeps nanosecond
// arithmetic far from overflow (1e12 ns × 1024 layers).
const maxMeasuredMs = 1e6

// Device is a candidate stage for Partition.
type Device struct {
	ID         string
	MemBytes   int64   // memory available for weights (KV headroom is the caller's job)
	MsPerLayer float64 // measured decode cost of one layer; 0 = not measured, counts as DefaultMsPerLayer
	RTTms      float64 // round-trip from the pipeline's neighbours (approximated by the originator's RTT)
}

// ModelShape is what Partition needs to know about a model.
type ModelShape struct {
	Layers     int
	LayerBytes int64
	// HiddenBytesPerToken (2×hidden for fp16) is carried for callers that
	// print per-hop traffic. The cost model charges a hop its RTT only:
	// Device has no bandwidth, and a few KiB per token is latency-bound.
	HiddenBytesPerToken int64
}

// Assignment is one stage of a Plan: Device runs layers [Start,End).
type Assignment struct {
	Device     string
	Start, End int
	StageMs    float64 // (End-Start) × MsPerLayer + RTTms
}

// Plan is Partition's recommendation.
type Plan struct {
	Stages        []Assignment // in the order the devices were given, covering [0,Layers)
	BottleneckMs  float64      // the slowest stage: the pipeline's per-token period
	LatencyMs     float64      // sum of stage times: one token's trip through the chain
	Unused        []string     // devices left out, in the order given
	UnusedReasons map[string]string
}

// partDev is a device that passed validation, with its times in whole
// nanoseconds: integer sums make ties exact, so "then fewer stages" is not
// decided by float rounding.
type partDev struct {
	idx       int
	memLayers int // layers its memory holds, capped at the model's
	msNs      int64
	rttNs     int64
	ms, rtt   float64
}

func (d partDev) stageNs(k int) int64 { return int64(k)*d.msNs + d.rttNs }

// Partition chooses the devices and the contiguous layer split that minimise
// the slowest stage (stage time = layers × MsPerLayer + RTTms), each device
// holding no more layers than its memory allows; ties go to the lower total
// latency, then to fewer stages. Devices it leaves out are listed with the
// reason.
//
// Why no subset or order search: RTTms is per device, not per link, so a
// stage's time does not depend on its position in the chain and only the
// layer count given to each device matters. A knapsack-style DP over the
// devices in input order ("skip it, or give it k layers") therefore ranges
// over every subset and every order exactly, in O(D·L²). It runs twice,
// because (bottleneck, latency) does not decompose: a prefix with a worse
// bottleneck but lower latency can end up better, so one lexicographic DP
// would not be exact. Pass 1 finds the optimal bottleneck B (min-max is
// monotone); pass 2 minimises (latency, stages), which are additive, over
// splits whose every stage takes at most B. If links ever get per-pair costs,
// position starts to matter and this must become a DP over orders.
func Partition(devs []Device, m ModelShape) (Plan, error) {
	if len(devs) == 0 {
		return Plan{}, ErrNoDevices
	}
	if m.Layers <= 0 || m.Layers > MaxModelLayers {
		return Plan{}, fmt.Errorf("%w: %d layers (want 1..%d)", ErrBadShape, m.Layers, MaxModelLayers)
	}
	if m.LayerBytes <= 0 || m.LayerBytes > math.MaxInt64/MaxModelLayers {
		return Plan{}, fmt.Errorf("%w: %d bytes per layer", ErrBadShape, m.LayerBytes)
	}
	if m.HiddenBytesPerToken < 0 {
		return Plan{}, fmt.Errorf("%w: %d hidden bytes per token", ErrBadShape, m.HiddenBytesPerToken)
	}
	seen := make(map[string]bool, len(devs))
	for i, d := range devs {
		if d.ID == "" {
			return Plan{}, fmt.Errorf("%w: device %d has no ID", ErrBadDevice, i)
		}
		if seen[d.ID] {
			return Plan{}, fmt.Errorf("%w: device %q listed twice", ErrBadDevice, d.ID)
		}
		seen[d.ID] = true
	}

	L := m.Layers
	reasons := make(map[string]string)
	var cands []partDev
	measured, roomLayers := 0, 0
	for i, d := range devs {
		ms, ok := effectiveMs(d.MsPerLayer)
		if !ok {
			reasons[d.ID] = "invalid MsPerLayer " + strconv.FormatFloat(d.MsPerLayer, 'g', -1, 64)
			continue
		}
		if !validMs(d.RTTms) {
			reasons[d.ID] = "invalid RTTms " + strconv.FormatFloat(d.RTTms, 'g', -1, 64)
			continue
		}
		measured++
		memLayers := min(max(d.MemBytes, 0)/m.LayerBytes, int64(L))
		if memLayers == 0 {
			reasons[d.ID] = fmt.Sprintf("too little memory: %d bytes, one layer needs %d", max(d.MemBytes, 0), m.LayerBytes)
			continue
		}
		roomLayers += int(memLayers)
		cands = append(cands, partDev{idx: i, memLayers: int(memLayers),
			msNs: max(msToNs(ms), 1), rttNs: msToNs(d.RTTms), ms: ms, rtt: d.RTTms})
	}
	if measured == 0 {
		return Plan{}, fmt.Errorf("%w: none of the %d devices has valid measurements", ErrNoDevices, len(devs))
	}
	if roomLayers < L {
		short := L - roomLayers
		return Plan{}, fmt.Errorf("%w: %d layers × %d bytes need %d bytes; the devices have room for %d whole layers, %d bytes (%d layers) missing",
			ErrDoesNotFit, L, m.LayerBytes, int64(L)*m.LayerBytes, roomLayers, int64(short)*m.LayerBytes, short)
	}

	bottleneck := minBottleneck(cands, L)
	ks := minLatencySplit(cands, L, bottleneck)

	plan := Plan{UnusedReasons: reasons}
	used := make(map[int]bool)
	next := 0
	for i, c := range cands {
		if ks[i] == 0 {
			continue
		}
		used[c.idx] = true
		st := Assignment{Device: devs[c.idx].ID, Start: next, End: next + ks[i], StageMs: float64(ks[i])*c.ms + c.rtt}
		next = st.End
		plan.Stages = append(plan.Stages, st)
		plan.BottleneckMs = max(plan.BottleneckMs, st.StageMs)
		plan.LatencyMs += st.StageMs
	}
	for _, c := range cands {
		if used[c.idx] {
			continue
		}
		id := devs[c.idx].ID
		if c.stageNs(1) > bottleneck {
			reasons[id] = fmt.Sprintf("too slow: one layer alone takes %s ms, more than the plan's %s ms bottleneck",
				msString(c.ms+c.rtt), msString(plan.BottleneckMs))
		} else {
			reasons[id] = fmt.Sprintf("not needed: it cannot lower the plan's %s ms bottleneck and would add latency",
				msString(plan.BottleneckMs))
		}
	}
	for _, d := range devs {
		if _, ok := reasons[d.ID]; ok {
			plan.Unused = append(plan.Unused, d.ID)
		}
	}
	return plan, nil
}

// minBottleneck is pass 1: the smallest achievable slowest-stage time for L
// layers. best[l] is the smallest bottleneck covering l layers with a subset
// of the devices seen so far.
func minBottleneck(cands []partDev, L int) int64 {
	const unreachable = math.MaxInt64
	best := make([]int64, L+1)
	next := make([]int64, L+1)
	for l := range best {
		best[l] = unreachable
	}
	best[0] = 0
	for _, c := range cands {
		copy(next, best) // skipping the device
		for l := 1; l <= L; l++ {
			for k := 1; k <= c.memLayers && k <= l; k++ {
				if best[l-k] == unreachable {
					continue
				}
				if v := max(best[l-k], c.stageNs(k)); v < next[l] {
					next[l] = v
				}
			}
		}
		best, next = next, best
	}
	return best[L] // reachable: the caller checked the devices have room for L layers
}

// minLatencySplit is pass 2: among splits whose every stage takes at most
// bottleneck, the one with the least total latency, then the fewest stages.
// It returns the layer count of each candidate (0 = left out).
func minLatencySplit(cands []partDev, L int, bottleneck int64) []int {
	type label struct {
		sum    int64
		stages int
	}
	unreachable := label{sum: math.MaxInt64}
	less := func(a, b label) bool { return a.sum < b.sum || a.sum == b.sum && a.stages < b.stages }
	best := make([]label, L+1)
	next := make([]label, L+1)
	for l := range best {
		best[l] = unreachable
	}
	best[0] = label{}
	choice := make([][]int, len(cands)) // choice[i][l]: layers given to cands[i] in the best cover of l
	for i, c := range cands {
		kmax := 0
		if c.stageNs(1) <= bottleneck {
			kmax = min(c.memLayers, int((bottleneck-c.rttNs)/c.msNs))
		}
		choice[i] = make([]int, L+1)
		copy(next, best)
		for l := 1; l <= L; l++ {
			for k := 1; k <= kmax && k <= l; k++ {
				p := best[l-k]
				if p == unreachable {
					continue
				}
				// Strictly less: on a tie the device stays out, or takes fewer layers.
				if cand := (label{p.sum + c.stageNs(k), p.stages + 1}); less(cand, next[l]) {
					next[l] = cand
					choice[i][l] = k
				}
			}
		}
		best, next = next, best
	}
	ks := make([]int, len(cands))
	for i, l := len(cands)-1, L; i >= 0; i-- {
		ks[i] = choice[i][l]
		l -= ks[i]
	}
	return ks
}

// effectiveMs maps a per-layer time to the one used for planning: 0 means
// "not measured" and counts as DefaultMsPerLayer.
func effectiveMs(ms float64) (float64, bool) {
	if !validMs(ms) {
		return 0, false
	}
	if ms == 0 {
		return DefaultMsPerLayer, true
	}
	return ms, true
}

func validMs(ms float64) bool { return ms >= 0 && ms <= maxMeasuredMs } // false for NaN too

func msToNs(ms float64) int64 { return int64(math.Round(ms * 1e6)) }

// msString prints a time rounded to the microsecond, without trailing zeros.
func msString(ms float64) string {
	return strconv.FormatFloat(math.Round(ms*1000)/1000, 'f', -1, 64)
}
