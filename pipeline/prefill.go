package pipeline

import (
	"math"
	"sync"
	"time"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// Prefill pipelined across the stages: a long prompt goes down the route
// as parts (framePart), so that stage k runs part i while stage k-1 runs
// part i+1, and the time to the first token is about one stage's prefill
// plus the route's fill, not the sum of every stage's. Parts are
// multiples of the engine's prefill chunk, which cuts a whole prompt at
// the same places: the stages run the very graphs they run for the
// prompt whole, and the tokens are the same.

// MaxPrefillChunk is the largest part (and step) there is: the stage
// protocol's most positions in one frame.
const MaxPrefillChunk = maxStepToks

// partOverheadMS is what one part costs a stage beyond its positions'
// compute (a frame read and written, the last position's logits on the
// last stage), in ms: measured at a few tenths of a ms on loopback; the
// link's own share is measured per hop.
const partOverheadMS = 1.0

// maxHopCosts bounds the hops whose costs an originator remembers.
const maxHopCosts = 1024

// hopCost is what an originator measured of one hop.
type hopCost struct {
	tokMS  float64 // prefill compute per position (moving average)
	xferMS float64 // transfer of a decode step to this hop and back (moving average)
	at     time.Time
}

// hopCosts are the costs of the hops this originator used, for sizing the
// parts of the next prompt.
type hopCosts struct {
	mu sync.Mutex
	m  map[Hop]*hopCost
}

func (h *hopCosts) get(hop Hop) (hopCost, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.m[hop]
	if !ok {
		return hopCost{}, false
	}
	return *c, true
}

// note folds a measurement into hop's costs (zero: not measured).
func (h *hopCosts) note(hop Hop, tokMS, xferMS float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[Hop]*hopCost{}
	}
	c, ok := h.m[hop]
	if !ok {
		if len(h.m) >= maxHopCosts {
			h.evictLocked()
		}
		c = &hopCost{}
		h.m[hop] = c
	}
	c.tokMS = ewma(c.tokMS, tokMS)
	c.xferMS = ewma(c.xferMS, xferMS)
	c.at = time.Now()
}

func (h *hopCosts) evictLocked() {
	var old Hop
	var at time.Time
	for k, c := range h.m {
		if at.IsZero() || c.at.Before(at) {
			old, at = k, c.at
		}
	}
	delete(h.m, old)
}

func ewma(avg, x float64) float64 {
	switch {
	case x <= 0 || math.IsNaN(x) || math.IsInf(x, 0):
		return avg
	case avg == 0:
		return x
	}
	return (3*avg + x) / 4
}

// partSize is the size of the parts a prompt of n positions goes down
// hops in: 0 when it goes whole. With every hop's costs measured, it
// minimises (parts + hops - 1) x (n/parts x slowest per-position compute
// + per-part overhead), the time to the last part's end at the last stage;
// else it is the engine's chunk, the finest cut there is.
func (o *Originator) partSize(hops []Hop, n int) int {
	unit := engine.DefaultPrefillChunk
	if o.PrefillChunk < 0 || len(hops) < 2 || n <= unit {
		return 0
	}
	chunk := unit
	if o.PrefillChunk > 0 {
		chunk = o.PrefillChunk
	} else if t, over, ok := o.routeCosts(hops); ok {
		parts := math.Sqrt(float64(len(hops)-1) * float64(n) * t / over)
		chunk = int(math.Ceil(float64(n) / max(parts, 1)))
	}
	chunk = (chunk + unit - 1) / unit * unit
	if chunk >= n {
		return 0
	}
	return chunk
}

// routeCosts are the slowest hop's per-position compute and the largest
// per-part overhead of hops (partOverheadMS and the hop's transfer), if
// every hop was measured.
func (o *Originator) routeCosts(hops []Hop) (tokMS, overMS float64, ok bool) {
	overMS = partOverheadMS
	for _, h := range hops {
		c, known := o.costs.get(h)
		if !known || c.tokMS <= 0 {
			return 0, 0, false
		}
		tokMS = max(tokMS, c.tokMS)
		overMS = max(overMS, partOverheadMS+c.xferMS)
	}
	return tokMS, overMS, true
}

// notePrefill records each hop's compute per position from the result of
// a prompt's last n positions (its last part, or the whole prompt).
func (o *Originator) notePrefill(hops []Hop, res *Result, n int) {
	if len(res.Hops) != len(hops) || n <= 0 {
		return
	}
	for i, h := range res.Hops { // last hop first
		o.costs.note(hops[len(hops)-1-i], float64(h.ComputeMS)/float64(n), 0)
	}
}
