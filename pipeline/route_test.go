package pipeline

import (
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestAssembleRoute(t *testing.T) {
	h := func(peer string, start, end int, ms, rtt float64) Holder {
		return Holder{Peer: peer, Start: start, End: end, MsPerLayer: ms, RTTms: rtt}
	}
	tests := []struct {
		name     string
		n        int
		ends     EndCost
		holders  []Holder
		dead     []string
		want     []Hop
		wantCost float64
		wantGaps [][2]int
		wantErr  error
	}{
		{
			name: "exact cover", n: 28,
			holders: []Holder{h("c", 20, 28, 1, 1), h("a", 0, 10, 1, 1), h("b", 10, 20, 1, 1)},
			want:    []Hop{{Peer: "a", Start: 0, End: 10}, {Peer: "b", Start: 10, End: 20}, {Peer: "c", Start: 20, End: 28}}, wantCost: 31,
		},
		{
			name: "overlap runs on the fastest holder", n: 28,
			holders: []Holder{h("slow", 10, 28, 2, 1), h("fast", 0, 16, 1, 1)},
			want:    []Hop{{Peer: "fast", Start: 0, End: 16}, {Peer: "slow", Start: 16, End: 28}}, wantCost: 16 + 1 + 24 + 1,
		},
		{
			name: "one fast holder beats two hops", n: 28,
			holders: []Holder{h("a", 0, 14, 1, 10), h("b", 14, 28, 1, 10), h("all", 0, 28, 1.2, 10)},
			want:    []Hop{{Peer: "all", Start: 0, End: 28}}, wantCost: 28*1.2 + 10,
		},
		{
			name: "dead peer replaced by another holder of its range", n: 28,
			holders: []Holder{h("a", 0, 14, 1, 1), h("b", 14, 28, 1, 1), h("spare", 14, 28, 2, 1)},
			dead:    []string{"b"},
			want:    []Hop{{Peer: "a", Start: 0, End: 14}, {Peer: "spare", Start: 14, End: 28}}, wantCost: 15 + 29,
		},
		{
			name: "excluding the only holder of a range", n: 28,
			holders:  []Holder{h("a", 0, 14, 1, 1), h("b", 14, 28, 1, 1)},
			dead:     []string{"b"},
			wantGaps: [][2]int{{14, 28}},
		},
		{
			name: "multiple gaps", n: 28,
			holders:  []Holder{h("a", 0, 10, 1, 1), h("b", 14, 20, 1, 1), h("c", 16, 18, 1, 1)},
			wantGaps: [][2]int{{10, 14}, {20, 28}},
		},
		{
			name: "no holders", n: 4,
			wantGaps: [][2]int{{0, 4}},
		},
		{
			name: "one layer", n: 1,
			holders: []Holder{h("a", 0, 1, 0.5, 0.25)},
			want:    []Hop{{Peer: "a", Start: 0, End: 1}}, wantCost: 0.75,
		},
		{
			name: "holder reaching past n is ignored", n: 28,
			holders: []Holder{h("other-model", 0, 40, 0.1, 0), h("b", 0, 28, 1, 1)},
			want:    []Hop{{Peer: "b", Start: 0, End: 28}}, wantCost: 29,
		},
		{
			name: "only a holder reaching past n", n: 28,
			holders:  []Holder{h("other-model", 0, 40, 0.1, 0)},
			wantGaps: [][2]int{{0, 28}},
		},
		{
			name: "malformed holders ignored", n: 4,
			holders: []Holder{h("", 0, 4, 0.1, 0), h("nan", 0, 4, math.NaN(), 0), h("empty", 2, 2, 0.1, 0),
				h("neg", -1, 4, 0.1, 0), h("negrtt", 0, 4, 0.1, -1), h("ok", 0, 4, 1, 0)},
			want: []Hop{{Peer: "ok", Start: 0, End: 4}}, wantCost: 4,
		},
		{
			name: "tie broken by peer ID", n: 8,
			holders: []Holder{h("b", 0, 8, 1, 1), h("a", 0, 8, 1, 1), h("c", 0, 8, 1, 1)},
			want:    []Hop{{Peer: "a", Start: 0, End: 8}}, wantCost: 9,
		},
		{
			name: "unmeasured holder costs DefaultMsPerLayer", n: 10,
			holders: []Holder{h("unmeasured", 0, 10, 0, 0), h("slower", 0, 10, DefaultMsPerLayer+1, 0)},
			want:    []Hop{{Peer: "unmeasured", Start: 0, End: 10}}, wantCost: 10 * DefaultMsPerLayer,
		},
		{
			name: "measured holder beats unmeasured", n: 10,
			holders: []Holder{h("unmeasured", 0, 10, 0, 0), h("measured", 0, 10, DefaultMsPerLayer-1, 0)},
			want:    []Hop{{Peer: "measured", Start: 0, End: 10}}, wantCost: 10 * (DefaultMsPerLayer - 1),
		},
		{
			name: "touching shards of one peer cannot hand off to itself", n: 20,
			holders: []Holder{h("a", 0, 10, 1, 1), h("a", 10, 20, 1, 1)},
			wantErr: ErrSelfHop,
		},
		{
			// a's two shards touch at 10; the seam needs another peer, for as
			// few layers as possible; of the two equal routes, the one whose
			// first hop ends first wins.
			name: "peer revisited non-adjacently around its own seam", n: 20,
			holders: []Holder{h("a", 0, 10, 1, 1), h("a", 10, 20, 1, 1), h("c", 5, 15, 3, 1)},
			want:    []Hop{{Peer: "a", Start: 0, End: 9}, {Peer: "c", Start: 9, End: 10}, {Peer: "a", Start: 10, End: 20}}, wantCost: 10 + 4 + 11,
		},
		{
			name: "fast middle peer visited between two hops on one peer", n: 30,
			holders: []Holder{h("a", 0, 30, 2, 1), h("b", 10, 20, 0.5, 1)},
			want:    []Hop{{Peer: "a", Start: 0, End: 10}, {Peer: "b", Start: 10, End: 20}, {Peer: "a", Start: 20, End: 30}}, wantCost: 21 + 6 + 21,
		},
		{
			// Each peer holds both halves; without a head the two mirror
			// routes tie (22 ms) and peer order picks. The head (2 layers)
			// goes to the faster peer: b [0,4) 8+5, a [4,8) (4+2)×1+5.
			name: "the faster peer runs the head", n: 8, ends: EndCost{Head: 2},
			holders: []Holder{h("a", 0, 4, 1, 5), h("a", 4, 8, 1, 5), h("b", 0, 4, 2, 5), h("b", 4, 8, 2, 5)},
			want:    []Hop{{Peer: "b", Start: 0, End: 4}, {Peer: "a", Start: 4, End: 8}}, wantCost: 13 + 11,
		},
		{
			name: "mirror routes without a head: peer order", n: 8,
			holders: []Holder{h("a", 0, 4, 1, 5), h("a", 4, 8, 1, 5), h("b", 0, 4, 2, 5), h("b", 4, 8, 2, 5)},
			want:    []Hop{{Peer: "a", Start: 0, End: 4}, {Peer: "b", Start: 4, End: 8}}, wantCost: 9 + 13,
		},
		{
			// A single hop runs both ends: 4 layers + 3 + 0.5.
			name: "one hop runs head and embedding", n: 4, ends: EndCost{Head: 3, Embed: 0.5},
			holders: []Holder{h("a", 0, 4, 2, 1)},
			want:    []Hop{{Peer: "a", Start: 0, End: 4}}, wantCost: 7.5*2 + 1,
		},
		{name: "NaN head", n: 4, ends: EndCost{Head: math.NaN()}, holders: []Holder{h("a", 0, 4, 1, 0)}, wantErr: ErrBadShape},
		{name: "negative embedding", n: 4, ends: EndCost{Embed: -1}, holders: []Holder{h("a", 0, 4, 1, 0)}, wantErr: ErrBadShape},
		{name: "huge head", n: 4, ends: EndCost{Head: 1e12}, holders: []Holder{h("a", 0, 4, 1, 0)}, wantErr: ErrBadShape},
		{name: "zero layers", n: 0, wantErr: ErrBadShape},
		{name: "too many layers", n: MaxModelLayers + 1, wantErr: ErrBadShape},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var exclude func(string) bool
			if tt.dead != nil {
				exclude = func(p string) bool { return slices.Contains(tt.dead, p) }
			}
			r, err := AssembleRoute(tt.n, tt.ends, tt.holders, exclude)
			switch {
			case tt.wantGaps != nil:
				var ge *GapError
				if !errors.As(err, &ge) || !errors.Is(err, ErrGap) {
					t.Fatalf("err = %v, want a *GapError", err)
				}
				if !slices.Equal(ge.Missing, tt.wantGaps) {
					t.Fatalf("missing %v, want %v", ge.Missing, tt.wantGaps)
				}
				if got := Coverage(tt.n, tt.holders, exclude); !slices.Equal(got, tt.wantGaps) {
					t.Fatalf("Coverage = %v, want %v", got, tt.wantGaps)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) || !strings.HasPrefix(err.Error(), "pipeline: ") {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
			default:
				if err != nil {
					t.Fatalf("AssembleRoute: %v", err)
				}
				checkRoute(t, tt.n, tt.ends, tt.holders, exclude, r)
				if !slices.Equal(r.Hops, tt.want) || math.Abs(r.CostMs-tt.wantCost) > 1e-9 {
					t.Fatalf("route %v cost %v, want %v cost %v", r.Hops, r.CostMs, tt.want, tt.wantCost)
				}
			}
		})
	}
}

func TestRouteCoverage(t *testing.T) {
	hs := []Holder{{Peer: "a", Start: 0, End: 4}, {Peer: "b", Start: 2, End: 6}, {Peer: "c", Start: 8, End: 9},
		{Peer: "d", Start: 9, End: 10}, {Peer: "far", Start: 5, End: 99}}
	tests := []struct {
		name string
		n    int
		dead string
		want [][2]int
	}{
		{"overlaps and touching ranges merge", 10, "", [][2]int{{6, 8}}},
		{"dead peer uncovers its range", 10, "b", [][2]int{{4, 8}}},
		{"gap at the end", 12, "", [][2]int{{6, 8}, {10, 12}}},
		{"n=0 has nothing to cover", 0, "", nil},
		{"all covered", 4, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Coverage(tt.n, hs, func(p string) bool { return p == tt.dead })
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Coverage(%d) = %v, want %v", tt.n, got, tt.want)
			}
		})
	}
}

func TestRouteGapErrorMessage(t *testing.T) {
	tests := []struct {
		missing [][2]int
		want    string
	}{
		{[][2]int{{10, 14}}, "pipeline: layers [10,14) are not held by any live peer"},
		{[][2]int{{10, 14}, {20, 28}}, "pipeline: layers [10,14) and [20,28) are not held by any live peer"},
		{[][2]int{{0, 1}, {3, 4}, {6, 9}}, "pipeline: layers [0,1), [3,4) and [6,9) are not held by any live peer"},
		{nil, ErrGap.Error()},
	}
	for _, tt := range tests {
		if got := (&GapError{Missing: tt.missing}).Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

// TestRouteBruteForce compares the DP with every route on small random
// cases, half of them with a head and an embedding to run, under the same
// order: cost, then hops, then hops by (peer, end).
func TestRouteBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	routed := 0
	for c := 0; c < 4000; c++ {
		n, holders, exclude := randomRouteCase(rng, 8, 6)
		var ends EndCost
		if c%2 == 0 {
			// Multiples of 0.5 layers keep the nanoseconds exact.
			ends = EndCost{Head: float64(rng.IntN(9)) / 2, Embed: float64(rng.IntN(3)) / 2}
		}
		got, err := AssembleRoute(n, ends, holders, exclude)
		want, wantOK := bruteForceRoute(n, ends, holders, exclude)
		if gaps := Coverage(n, holders, exclude); len(gaps) > 0 {
			var ge *GapError
			if !errors.As(err, &ge) || !slices.Equal(ge.Missing, gaps) || wantOK {
				t.Fatalf("case %d n=%d %+v: err %v, gaps %v, brute force found %v", c, n, holders, err, gaps, want)
			}
			continue
		}
		if !wantOK {
			if !errors.Is(err, ErrSelfHop) {
				t.Fatalf("case %d n=%d %+v: got %v, %v; brute force finds no route", c, n, holders, got, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("case %d n=%d %+v: %v; brute force %v", c, n, holders, err, want)
		}
		routed++
		checkRoute(t, n, ends, holders, exclude, got)
		if !slices.Equal(got.Hops, want) {
			t.Fatalf("case %d n=%d %+v:\n got %v\nwant %v", c, n, holders, got.Hops, want)
		}
	}
	if routed < 1000 {
		t.Fatalf("only %d cases routed: the generator needs tuning", routed)
	}
}

func randomRouteCase(rng *rand.Rand, maxN, maxHolders int) (int, []Holder, func(string) bool) {
	n := 1 + rng.IntN(maxN)
	holders := make([]Holder, rng.IntN(maxHolders+1))
	for i := range holders {
		s := rng.IntN(n)
		holders[i] = Holder{
			Peer:       string(rune('a' + rng.IntN(4))),
			Start:      s,
			End:        s + 1 + rng.IntN(n-s+1), // sometimes past n
			MsPerLayer: float64(rng.IntN(4)) / 2,
			RTTms:      float64(rng.IntN(3)) / 2,
		}
	}
	dead := string(rune('a' + rng.IntN(8))) // half the time no peer of the case
	return n, holders, func(p string) bool { return p == dead }
}

// bruteForceRoute enumerates every route with no peer following itself.
func bruteForceRoute(n int, ends EndCost, holders []Holder, exclude func(string) bool) (best []Hop, ok bool) {
	var bestCost int64
	hopCost := func(h Holder, from, to int) int64 {
		ms := h.MsPerLayer
		if ms == 0 {
			ms = DefaultMsPerLayer
		}
		layers := float64(to - from)
		if from == 0 {
			layers += ends.Embed
		}
		if to == n {
			layers += ends.Head
		}
		return int64(math.Round(layers*ms*1e6)) + int64(math.Round(h.RTTms*1e6))
	}
	var cur []Hop
	var rec func(l int, cost int64)
	rec = func(l int, cost int64) {
		if l == n {
			order := cmp.Or(cmp.Compare(cost, bestCost), cmp.Compare(len(cur), len(best)),
				slices.CompareFunc(cur, best, func(x, y Hop) int {
					return cmp.Or(strings.Compare(x.Peer, y.Peer), cmp.Compare(x.End, y.End))
				}))
			if !ok || order < 0 {
				best, bestCost, ok = slices.Clone(cur), cost, true
			}
			return
		}
		for _, h := range holders {
			if h.End > n || exclude(h.Peer) || h.Start > l || l >= h.End ||
				len(cur) > 0 && cur[len(cur)-1].Peer == h.Peer {
				continue
			}
			for e := l + 1; e <= h.End; e++ {
				cur = append(cur, Hop{Peer: h.Peer, Start: l, End: e})
				rec(e, cost+hopCost(h, l, e))
				cur = cur[:len(cur)-1]
			}
		}
	}
	rec(0, 0)
	return best, ok
}

// checkRoute checks what must hold of any route: contiguous hops covering
// [0,n) exactly, each within the range of a usable holder of its peer, no
// peer handing off to itself, and the cost priced from those holders, the
// ends on the first and last hops.
func checkRoute(t *testing.T, n int, ends EndCost, holders []Holder, exclude func(string) bool, r Route) {
	t.Helper()
	next, cost := 0, 0.0
	for i, hop := range r.Hops {
		if hop.Start != next || hop.End <= hop.Start {
			t.Fatalf("route %v is not contiguous from 0", r.Hops)
		}
		next = hop.End
		if i > 0 && r.Hops[i-1].Peer == hop.Peer {
			t.Fatalf("route %v hands off from %s to itself", r.Hops, hop.Peer)
		}
		best := math.Inf(1)
		for _, h := range holders {
			if h.Peer == hop.Peer && h.Start <= hop.Start && hop.End <= h.End && h.End <= n &&
				h.MsPerLayer >= 0 && h.RTTms >= 0 && (exclude == nil || !exclude(h.Peer)) {
				ms := h.MsPerLayer
				if ms == 0 {
					ms = DefaultMsPerLayer
				}
				layers := float64(hop.End - hop.Start)
				if hop.Start == 0 {
					layers += ends.Embed
				}
				if hop.End == n {
					layers += ends.Head
				}
				best = min(best, layers*ms+h.RTTms)
			}
		}
		if math.IsInf(best, 1) {
			t.Fatalf("hop %+v is not within a usable holder of %s", hop, hop.Peer)
		}
		cost += best
	}
	if next != n {
		t.Fatalf("route %v ends at %d, want %d", r.Hops, next, n)
	}
	if math.Abs(cost-r.CostMs) > 1e-6 {
		t.Fatalf("route %v costs %v, hops priced at their best holders give %v", r.Hops, r.CostMs, cost)
	}
}

// FuzzAssembleRoute checks the route invariants, that gaps are exactly the
// uncovered layers, and that holder order does not change the answer.
func FuzzAssembleRoute(f *testing.F) {
	f.Add([]byte{28, 0, 0, 10, 2, 1, 1, 10, 10, 2, 2, 2, 20, 8, 1, 1})
	f.Add([]byte{20, 0, 0, 10, 2, 0, 0, 10, 10, 2, 1, 0, 5, 10, 6, 1})
	f.Add([]byte{1, 1, 0, 1, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		n := 1 + int(data[0])%40
		deadMask := data[1]
		ends := EndCost{Head: float64(deadMask>>6) * 2.5, Embed: float64(deadMask>>6&1) / 8}
		var holders []Holder
		for b := data[2:]; len(b) >= 5 && len(holders) < 16; b = b[5:] {
			holders = append(holders, Holder{
				Peer:       string(rune('a' + b[0]%6)),
				Start:      int(b[1]) % (n + 2),
				End:        int(b[1])%(n+2) + int(b[2])%(n+1),
				MsPerLayer: float64(b[3]%16) / 4,
				RTTms:      float64(b[4]%8) / 4,
			})
		}
		exclude := func(p string) bool { return deadMask&(1<<(p[0]-'a')) != 0 }
		r, err := AssembleRoute(n, ends, holders, exclude)
		gaps := Coverage(n, holders, exclude)
		held := make([]bool, n)
		for _, h := range holders {
			if routable(h, n, exclude) {
				for l := h.Start; l < h.End; l++ {
					held[l] = true
				}
			}
		}
		inGap := make([]bool, n)
		for i, g := range gaps {
			if g[0] >= g[1] || i > 0 && g[0] <= gaps[i-1][1] {
				t.Fatalf("gaps %v are not sorted, merged, non-empty", gaps)
			}
			for l := g[0]; l < g[1]; l++ {
				inGap[l] = true
			}
		}
		for l := range held {
			if held[l] == inGap[l] {
				t.Fatalf("layer %d: held %v, in gaps %v", l, held[l], gaps)
			}
		}
		var ge *GapError
		switch {
		case len(gaps) > 0:
			if !errors.As(err, &ge) || !slices.Equal(ge.Missing, gaps) {
				t.Fatalf("err %v, want GapError %v", err, gaps)
			}
			return
		case errors.Is(err, ErrSelfHop):
			return
		case err != nil:
			t.Fatalf("AssembleRoute: %v", err)
		}
		checkRoute(t, n, ends, holders, exclude, r)
		rev := slices.Clone(holders)
		slices.Reverse(rev)
		if r2, err := AssembleRoute(n, ends, rev, exclude); err != nil || !slices.Equal(r.Hops, r2.Hops) {
			t.Fatalf("reversed holders give %v, %v; want %v", r2.Hops, err, r.Hops)
		}
	})
}
