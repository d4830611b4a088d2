package pipeline

import (
	"errors"
	"fmt"
	"math"
	"slices"
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

// Assignment is one stage of a Plan: Device runs layers [Start,End).
type Assignment struct {
	Device     string
	Start, End int
	// StageMs is (End-Start + the ends it runs) × MsPerLayer + RTTms.
	StageMs float64
	// HeadMs is the part of StageMs spent on the final norm and output
	// head (the last stage only); EmbedMs on the embedding lookup (the
	// first stage only).
	HeadMs, EmbedMs float64
}

// Plan is Partition's recommendation.
type Plan struct {
	// Stages cover [0,Layers) in chain order: the first stage, the middle
	// ones in the order their devices were given, the last. When the ends
	// cost nothing (ModelShape.Ends and the end bytes zero) all of them
	// come in the order given.
	Stages        []Assignment
	BottleneckMs  float64  // the slowest stage: the pipeline's per-token period
	LatencyMs     float64  // sum of stage times: one token's trip through the chain
	Unused        []string // devices left out, in the order given
	UnusedReasons map[string]string
}

// Roles of a stage in the chain: the first holds the embedding, the last
// the head; a middle stage neither. roleBoth is a one-stage plan.
const (
	roleMiddle = 0
	roleFirst  = 1
	roleLast   = 2
	roleBoth   = roleFirst | roleLast
)

// partDev is a device that passed validation, with its times in whole
// nanoseconds: integer sums make ties exact, so "then fewer stages" is not
// decided by float rounding.
type partDev struct {
	idx       int
	memLayers [4]int   // by role: layers its memory holds beside that role's ends, capped at the model's
	endNs     [4]int64 // by role: the ends' time
	msNs      int64
	rttNs     int64
	ms, rtt   float64
}

func (d partDev) stageNs(k, role int) int64 { return int64(k)*d.msNs + d.rttNs + d.endNs[role] }

// Partition chooses the devices, their order and the contiguous layer split
// that minimise the slowest stage, each device holding no more than its
// memory allows; ties go to the lower total latency, then to fewer stages.
// A stage takes (layers + the ends it runs) × MsPerLayer + RTTms: the last
// stage runs the output head (m.Ends.Head layers' worth) and holds its
// m.HeadBytes, the first looks the token up in the embedding (m.Ends.Embed)
// and holds its m.EmbedBytes. Devices it leaves out are listed with the
// reason.
//
// Why the search is small: RTTms is per device, not per link, so a middle
// stage's time does not depend on where it sits in the chain; only the ends
// do. A knapsack-style DP over the devices in input order ("skip it, or
// give it k layers as the first, a middle or the last stage"), whose state
// is the layers covered and which of the two end roles are taken, therefore
// ranges over every subset and every order exactly, in O(D·L²) (nine
// state×role pairs per device and layer split). One-stage plans, whose
// device is both first and last, are scored apart. It runs twice, because
// (bottleneck, latency) does not decompose: a prefix with a worse
// bottleneck but lower latency can end up better, so one lexicographic DP
// would not be exact. Pass 1 finds the optimal bottleneck B (min-max is
// monotone); pass 2 minimises (latency, stages), which are additive, over
// splits whose every stage takes at most B. If links ever get per-pair
// costs, middle positions start to matter and this must become a DP over
// orders.
func Partition(devs []Device, m ModelShape) (Plan, error) {
	if len(devs) == 0 {
		return Plan{}, ErrNoDevices
	}
	if err := m.validate(); err != nil {
		return Plan{}, err
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
		c := partDev{idx: i, msNs: max(msToNs(ms), 1), rttNs: msToNs(d.RTTms), ms: ms, rtt: d.RTTms}
		for r := range 4 {
			c.memLayers[r] = int(min(max(d.MemBytes-m.endBytes(r), 0)/m.LayerBytes, int64(L)))
			c.endNs[r] = int64(math.Round(m.endLayers(r) * float64(c.msNs)))
		}
		if c.memLayers[roleMiddle] == 0 {
			reasons[d.ID] = fmt.Sprintf("too little memory: %d bytes, one layer needs %d", max(d.MemBytes, 0), m.LayerBytes)
			continue
		}
		roomLayers += c.memLayers[roleMiddle]
		cands = append(cands, c)
	}
	if measured == 0 {
		return Plan{}, fmt.Errorf("%w: none of the %d devices has valid measurements", ErrNoDevices, len(devs))
	}
	if roomLayers < L {
		short := L - roomLayers
		return Plan{}, fmt.Errorf("%w: %d layers × %d bytes need %d bytes; the devices have room for %d whole layers, %d bytes (%d layers) missing",
			ErrDoesNotFit, L, m.LayerBytes, int64(L)*m.LayerBytes, roomLayers, int64(short)*m.LayerBytes, short)
	}

	bottleneck, ok := minBottleneck(cands, L)
	if !ok {
		return Plan{}, fmt.Errorf("%w: the devices have room for the %d layers, but not also for the output head (%d bytes) on the last stage and the embedding (%d bytes) on the first",
			ErrDoesNotFit, L, m.HeadBytes, m.EmbedBytes)
	}
	ks, roles := minLatencySplit(cands, L, bottleneck)

	plan := Plan{UnusedReasons: reasons}
	used := make(map[int]bool)
	var order []int // indices into cands, in chain order
	for _, want := range []int{roleFirst, roleBoth, roleMiddle, roleLast} {
		for i := range cands {
			if ks[i] > 0 && roles[i] == want {
				order = append(order, i)
			}
		}
	}
	if m.endsFree() {
		slices.Sort(order) // the roles cost nothing: keep the order given
	}
	next := 0
	for _, i := range order {
		c, k := cands[i], ks[i]
		used[c.idx] = true
		st := Assignment{Device: devs[c.idx].ID, Start: next, End: next + k}
		if next == 0 {
			st.EmbedMs = m.Ends.Embed * c.ms
		}
		if st.End == L {
			st.HeadMs = m.Ends.Head * c.ms
		}
		st.StageMs = float64(k)*c.ms + st.EmbedMs + st.HeadMs + c.rtt
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
		if c.stageNs(1, roleMiddle) > bottleneck {
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

// endBytes is the memory a stage of role r holds beside its layers.
func (m ModelShape) endBytes(r int) int64 {
	var b int64
	if r&roleFirst != 0 {
		b += m.EmbedBytes
	}
	if r&roleLast != 0 {
		b += m.HeadBytes
	}
	return b
}

// endLayers is the time a stage of role r spends on the ends, in layers.
func (m ModelShape) endLayers(r int) float64 {
	var t float64
	if r&roleFirst != 0 {
		t += m.Ends.Embed
	}
	if r&roleLast != 0 {
		t += m.Ends.Head
	}
	return t
}

// stepRoles are the (state, role) pairs of the multi-stage DP: a device
// may take a middle role in any state and an end role not yet taken.
// roleBoth is not among them: a one-stage plan is scored apart, since a
// middle stage added to it would have no place in the chain.
var stepRoles = [...][2]int{
	{0, roleMiddle}, {0, roleFirst}, {0, roleLast},
	{roleFirst, roleMiddle}, {roleFirst, roleLast},
	{roleLast, roleMiddle}, {roleLast, roleFirst},
	{roleBoth, roleMiddle},
}

// minBottleneck is pass 1: the smallest achievable slowest-stage time for L
// layers, and false if no split fits the devices' memory. best[s][l] is the
// smallest bottleneck covering l layers with a subset of the devices seen so
// far, the end roles in s taken.
func minBottleneck(cands []partDev, L int) (int64, bool) {
	const unreachable = math.MaxInt64
	var best, next [4][]int64
	for s := range best {
		best[s], next[s] = make([]int64, L+1), make([]int64, L+1)
		for l := range best[s] {
			best[s][l] = unreachable
		}
	}
	best[0][0] = 0
	single := int64(unreachable)
	for _, c := range cands {
		if c.memLayers[roleBoth] == L {
			single = min(single, c.stageNs(L, roleBoth))
		}
		for s := range next {
			copy(next[s], best[s]) // skipping the device
		}
		for _, sr := range stepRoles {
			from, r := best[sr[0]], sr[1]
			to := next[sr[0]|r]
			for l := 1; l <= L; l++ {
				for k := 1; k <= c.memLayers[r] && k <= l; k++ {
					if from[l-k] == unreachable {
						continue
					}
					if v := max(from[l-k], c.stageNs(k, r)); v < to[l] {
						to[l] = v
					}
				}
			}
		}
		best, next = next, best
	}
	b := min(single, best[roleBoth][L])
	return b, b != unreachable
}

// minLatencySplit is pass 2: among splits whose every stage takes at most
// bottleneck, the one with the least total latency, then the fewest stages.
// It returns the layer count of each candidate (0 = left out) and its role.
func minLatencySplit(cands []partDev, L int, bottleneck int64) (ks, roles []int) {
	type label struct {
		sum    int64
		stages int
	}
	unreachable := label{sum: math.MaxInt64}
	less := func(a, b label) bool { return a.sum < b.sum || a.sum == b.sum && a.stages < b.stages }
	kmax := func(c partDev, r int) int {
		if c.stageNs(1, r) > bottleneck {
			return 0
		}
		return min(c.memLayers[r], int((bottleneck-c.rttNs-c.endNs[r])/c.msNs))
	}
	ks, roles = make([]int, len(cands)), make([]int, len(cands))

	// One stage: the first device, in input order, with the least latency.
	singleAt, single := -1, unreachable
	for i, c := range cands {
		if kmax(c, roleBoth) == L {
			if cand := (label{c.stageNs(L, roleBoth), 1}); less(cand, single) {
				singleAt, single = i, cand
			}
		}
	}

	var best, next [4][]label
	for s := range best {
		best[s], next[s] = make([]label, L+1), make([]label, L+1)
		for l := range best[s] {
			best[s][l] = unreachable
		}
	}
	best[0][0] = label{}
	// choice[i][s][l]: how cands[i] entered the best cover of l with roles
	// s taken: layers<<2 | role, 0 = left out.
	choice := make([][4][]int, len(cands))
	for i, c := range cands {
		for s := range next {
			copy(next[s], best[s])
			choice[i][s] = make([]int, L+1)
		}
		for _, sr := range stepRoles {
			from, r := best[sr[0]], sr[1]
			s := sr[0] | r
			km := kmax(c, r)
			for l := 1; l <= L; l++ {
				for k := 1; k <= km && k <= l; k++ {
					p := from[l-k]
					if p == unreachable {
						continue
					}
					// Strictly less: on a tie the device stays out, or takes fewer layers.
					if cand := (label{p.sum + c.stageNs(k, r), p.stages + 1}); less(cand, next[s][l]) {
						next[s][l] = cand
						choice[i][s][l] = k<<2 | r
					}
				}
			}
		}
		best, next = next, best
	}
	if singleAt >= 0 && !less(best[roleBoth][L], single) {
		ks[singleAt], roles[singleAt] = L, roleBoth
		return ks, roles
	}
	for i, s, l := len(cands)-1, roleBoth, L; i >= 0; i-- {
		ch := choice[i][s][l]
		if ch == 0 {
			continue
		}
		ks[i], roles[i] = ch>>2, ch&3
		l -= ks[i]
		s &^= roles[i]
	}
	return ks, roles
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
