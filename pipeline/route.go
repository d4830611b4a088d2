package pipeline

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/llmswarm/llmswarm/answer"
)

// DefaultMsPerLayer is the per-layer time assumed for a device or holder
// that has not measured itself (MsPerLayer 0). It is the explainer's figure
// for a 70B layer on an M2-class laptop, and ~5× the 0.6B-shape layer measured
// on this project's 2-core machines (~1 ms): pessimistic enough that a
// measured peer normally wins, yet an unmeasured one is still used when
// nothing else holds its layers.
const DefaultMsPerLayer = 5.0

var (
	// ErrGap: some layers are held by no live peer. AssembleRoute returns it
	// as a *GapError, which lists the ranges; test with errors.Is or errors.As.
	ErrGap = errors.New("pipeline: layers not held by any live peer")
	// ErrSelfHop: every layer is held, but only by chains in which one peer
	// would hand hidden states to itself, which a stage cannot do (it dials
	// the next hop, and a libp2p host cannot dial itself).
	ErrSelfHop = errors.New("pipeline: no route without a peer handing off to itself")
)

// Holder is a live peer announcing layers [Start,End) of the model.
type Holder struct {
	Peer       string
	Start, End int
	MsPerLayer float64 // 0 = not measured, counts as DefaultMsPerLayer
	RTTms      float64
}

// Hop runs layers [Start,End) on Peer. It is answer's type: traces and
// results report the routes made of it.
type Hop = answer.Hop

// Route is a chain of hops covering [0,n) in order.
type Route struct {
	Hops []Hop
	// CostMs is Σ over hops of (layers + the ends it runs) × MsPerLayer +
	// RTTms: the first hop runs the embedding, the last the head.
	CostMs float64
}

// GapError lists the layer ranges no live peer holds, in order, merged.
type GapError struct {
	Missing [][2]int
}

func (e *GapError) Error() string {
	if len(e.Missing) == 0 {
		return ErrGap.Error()
	}
	rs := make([]string, len(e.Missing))
	for i, r := range e.Missing {
		rs[i] = fmt.Sprintf("[%d,%d)", r[0], r[1])
	}
	list := rs[0]
	if n := len(rs); n > 1 {
		list = strings.Join(rs[:n-1], ", ") + " and " + rs[n-1]
	}
	return "pipeline: layers " + list + " are not held by any live peer"
}

// Is makes errors.Is(err, ErrGap) true for a *GapError.
func (e *GapError) Is(target error) bool { return target == ErrGap }

// routable says whether AssembleRoute and Coverage may use h. Malformed
// holders are ignored as if never announced rather than failing the whole
// route, so one bad record cannot block routing: that includes a range
// reaching past n, which means the record describes another model (or is
// wrong), and whose layers must not be mixed into this one.
func routable(h Holder, n int, exclude func(string) bool) bool {
	return h.Peer != "" && h.Start >= 0 && h.Start < h.End && h.End <= n &&
		validMs(h.MsPerLayer) && validMs(h.RTTms) &&
		(exclude == nil || !exclude(h.Peer))
}

// Coverage returns the ranges of [0,n) that no usable holder covers (merged,
// in order; nil when all are covered). Excluded and malformed holders, as in
// AssembleRoute, cover nothing. exclude may be nil.
func Coverage(n int, holders []Holder, exclude func(string) bool) (gaps [][2]int) {
	if n <= 0 {
		return nil
	}
	var held [][2]int
	for _, h := range holders {
		if routable(h, n, exclude) {
			held = append(held, [2]int{h.Start, h.End})
		}
	}
	slices.SortFunc(held, func(a, b [2]int) int { return cmp.Compare(a[0], b[0]) })
	next := 0 // everything below next is covered
	for _, r := range held {
		if r[0] > next {
			gaps = append(gaps, [2]int{next, r[0]})
		}
		next = max(next, r[1])
	}
	if next < n {
		gaps = append(gaps, [2]int{next, n})
	}
	return gaps
}

// routeHolder is a usable holder with its times in whole nanoseconds, so
// that sums are exact and ties are real ties, broken deterministically.
type routeHolder struct {
	Holder
	ms              float64 // effective, after the default
	msNs            int64
	rttNs           int64
	headNs, embedNs int64 // the ends' time on this holder
	rank            int   // of its peer among the holders' peers in ID order: ints compare faster than strings
}

// routeLabel is a route from layer 0 to boundary end.
type routeLabel struct {
	ok       bool
	cost     int64
	hops     int
	holder   int // index of the last hop's holder
	from     int // the last hop is [from,end)
	end      int
	fromSlot int // which label at from it extends
}

// AssembleRoute picks the cheapest chain of hops covering [0,n), where a hop
// costs (layers run) × MsPerLayer + RTTms and may run any sub-range of one
// holder's range; the hop ending at n also runs the output head
// (ends.Head layers' worth), the hop starting at 0 the embedding lookup
// (ends.Embed), as Partition prices its stages. Of routes that differ only
// in which peer holds the head, the one whose last peer runs it faster
// wins.
//
// Cheapest is the sum, not Partition's slowest stage: a route carries one
// generation, whose every token crosses every hop in turn, so its time per
// token is the sum (one fast holder of all layers beats two hops that
// would pipeline better). Partition's bottleneck is the swarm's throughput
// under many generations, which placement, not routing, decides. Holders for which exclude returns true (dead in the swarm
// view, or declared dead by the BMC) are never used; exclude may be nil.
// Holders with a range outside [0,n), no peer, or negative, NaN or absurd
// times are ignored. If layers are uncovered it returns a *GapError listing
// them, computed before any route is tried.
//
// The DP runs over layer boundaries: dist[l] is the cheapest route covering
// [0,l), extended by every (holder, end) a hop starting at l can take, in
// O(n²·H). Ties go to fewer hops, then to the route whose hops, compared in
// order by (peer ID, end), come first, so the output does not depend on the
// order of holders.
//
// Same peer twice: two adjacent hops on one peer are never produced, since a
// stage opens the next hop by dialling it and cannot dial itself (a peer
// whose two shards touch still runs each as its own hop, with another peer in
// between, as a hop must lie within one shard). To enforce that exactly, each
// boundary keeps its best route and its best route whose last peer differs
// from the best's: whatever peer the next hop is on, one of the two may be
// extended. If only self-handoffs cover the model, the error is ErrSelfHop.
// A peer may come back non-adjacently (A, B, A) when that is cheapest: each
// visit is its own stream and session on that peer and pays its own RTT, so
// it is priced right; ruling it out would need the set of used peers in the
// DP state, which is exponential.
func AssembleRoute(n int, ends EndCost, holders []Holder, exclude func(peer string) bool) (Route, error) {
	if n <= 0 || n > MaxModelLayers {
		return Route{}, fmt.Errorf("%w: %d layers (want 1..%d)", ErrBadShape, n, MaxModelLayers)
	}
	if err := ends.validate(); err != nil {
		return Route{}, err
	}
	if gaps := Coverage(n, holders, exclude); len(gaps) > 0 {
		return Route{}, &GapError{Missing: gaps}
	}
	var hs []routeHolder
	for _, h := range holders {
		if !routable(h, n, exclude) {
			continue
		}
		ms, _ := effectiveMs(h.MsPerLayer)
		msNs := max(msToNs(ms), 1)
		hs = append(hs, routeHolder{Holder: h, ms: ms, msNs: msNs, rttNs: msToNs(h.RTTms),
			headNs: int64(math.Round(ends.Head * float64(msNs))), embedNs: int64(math.Round(ends.Embed * float64(msNs)))})
	}
	// Sorted so that exact duplicates resolve the same whatever the input order.
	slices.SortFunc(hs, func(a, b routeHolder) int {
		return cmp.Or(strings.Compare(a.Peer, b.Peer), cmp.Compare(a.Start, b.Start), cmp.Compare(a.End, b.End),
			cmp.Compare(a.msNs, b.msNs), cmp.Compare(a.rttNs, b.rttNs))
	})
	for i := 1; i < len(hs); i++ {
		hs[i].rank = hs[i-1].rank
		if hs[i].Peer != hs[i-1].Peer {
			hs[i].rank++
		}
	}

	// labels[l][0] is the best route to l, labels[l][1] the best whose last
	// peer differs from labels[l][0]'s.
	labels := make([][2]routeLabel, n+1)
	labels[0][0] = routeLabel{ok: true, holder: -1}
	lastPeer := func(lb routeLabel) int {
		if lb.holder < 0 {
			return -1
		}
		return hs[lb.holder].rank
	}
	path := func(lb routeLabel) []Hop {
		out := make([]Hop, lb.hops)
		for i := lb.hops - 1; i >= 0; i-- {
			out[i] = Hop{Peer: hs[lb.holder].Peer, Start: lb.from, End: lb.end}
			lb = labels[lb.from][lb.fromSlot]
		}
		return out
	}
	less := func(a, b routeLabel) bool {
		if !b.ok || a.cost != b.cost || a.hops != b.hops {
			return !b.ok || a.cost < b.cost || a.cost == b.cost && a.hops < b.hops
		}
		// Equal hop counts: walk both back to front; the earliest differing
		// hop decides. Labels at a boundary are final before any is extended
		// from it, so the parents are stable.
		order := 0
		for a.hops > 0 {
			if c := cmp.Or(cmp.Compare(hs[a.holder].rank, hs[b.holder].rank), cmp.Compare(a.end, b.end)); c != 0 {
				order = c
			}
			if a.from == b.from && a.fromSlot == b.fromSlot {
				break // a common prefix from here back
			}
			a, b = labels[a.from][a.fromSlot], labels[b.from][b.fromSlot]
		}
		return order < 0
	}
	offer := func(c routeLabel) {
		best, second := &labels[c.end][0], &labels[c.end][1]
		switch {
		case less(c, *best):
			if best.ok && lastPeer(*best) != lastPeer(c) {
				*second = *best
			}
			*best = c
		case lastPeer(c) != lastPeer(*best) && less(c, *second):
			*second = c
		}
	}
	for l := 0; l < n; l++ {
		for i, h := range hs {
			if h.Start > l || l >= h.End {
				continue
			}
			slot := 0
			if lastPeer(labels[l][0]) == h.rank {
				slot = 1
			}
			src := labels[l][slot]
			if !src.ok {
				continue
			}
			base := src.cost + h.rttNs
			if l == 0 {
				base += h.embedNs
			}
			for e := l + 1; e <= h.End; e++ {
				cost := base + int64(e-l)*h.msNs
				if e == n {
					cost += h.headNs
				}
				offer(routeLabel{ok: true, cost: cost, hops: src.hops + 1, holder: i, from: l, end: e, fromSlot: slot})
			}
		}
	}
	if !labels[n][0].ok {
		return Route{}, fmt.Errorf("%w: all %d layers are held, but every chain needs a peer to pass its own output to itself", ErrSelfHop, n)
	}
	r := Route{Hops: path(labels[n][0])}
	for lb := labels[n][0]; lb.hops > 0; lb = labels[lb.from][lb.fromSlot] {
		h := hs[lb.holder]
		layers := float64(lb.end - lb.from)
		if lb.from == 0 {
			layers += ends.Embed
		}
		if lb.end == n {
			layers += ends.Head
		}
		r.CostMs += layers*h.ms + h.RTTms
	}
	return r, nil
}
