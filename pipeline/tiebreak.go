package pipeline

import (
	"context"
	"fmt"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Settling a disagreement by a third holder. Where two hops computed the
// same layers differently and neither this peer's copy nor the Referee
// decides, a third holder of those layers (this peer's own stage first)
// computes them on the same input: the hop it agrees with stands, and the
// one it clearly contradicts is convicted, like a failed challenge. Only
// one of the two disagreeing hops can be convicted, never a hop the
// routes agreed on.
//
// A hop that lies on real traffic only answers every probe honestly, so
// probing shows nothing. Then the originator replays the answer so far on
// mixed routes, each a real session opened as the generation's own are
// (the same Open, the prompt then one token a step, the output the last
// hop returns to an unchecked one: a token, or logits), so that a hop
// cannot tell them from real traffic: the routes' layer ranges from one
// route up to a cut and from the other after it, cut by cut, until the
// answer flips; the range at the flip holds the liar, which a third
// holder, in a route otherwise the same, decides.

// thirdHolders lists the live holders of layers [lo,hi) other than the
// peers named, this peer first.
func (g *generation) thirdHolders(lo, hi int, not ...string) []string {
	self := g.o.Host.ID().String()
	ex := g.o.excluded(g.failed)
	var out []string
	for _, h := range g.holders {
		p := h.Peer.ID.String()
		if h.Shard.ModelCID != g.ref.CID || h.Shard.Start > lo || hi > h.Shard.End || slices.Contains(not, p) ||
			slices.Contains(out, p) || (p != self && ex(p)) {
			continue
		}
		if p == self {
			out = append([]string{p}, out...)
		} else {
			out = append(out, p)
		}
	}
	return out
}

// voteProbe has a third holder of ha's layers compute them on the input
// both hops were probed with (oa and ob their outputs): the hop whose
// output it clearly contradicts while agreeing with the other's is the
// liar.
func (g *generation) voteProbe(ctx context.Context, ha, hb Hop, tokens []int32, hidden []float32, shapes []int, oa, ob []float32) []*fault {
	lo, hi := ha.Start, ha.End
	for _, c := range g.thirdHolders(lo, hi, ha.Peer, hb.Peer) {
		out, err := g.probe(ctx, Hop{Peer: c, Start: lo, End: hi}, tokens, hidden, shapes)
		if err != nil || ctx.Err() != nil {
			continue
		}
		tol := func(x string) float64 { return g.tolerance(c, x) }
		liar, diff, ok := g.majority(c, ha.Peer, hb.Peer, tol, func(x string, tol float64) (bool, float64) {
			o := oa
			if x == hb.Peer {
				o = ob
			}
			return agree(out, o, rowLen(hi, g.ref), tol)
		})
		if !ok {
			g.o.log().Info("pipeline: a third holder did not settle a spot-check", "peer", c, "layers", [2]int{lo, hi})
			return nil
		}
		return []*fault{g.convict(liar, [2]int{lo, hi}, c, fmt.Sprintf("its output to this peer's probe differs by %.3g", diff))}
	}
	return nil
}

// majority decides between hops a and b by the third holder c: it returns
// the one c clearly contradicts (by more than a ban's margin: banMargin)
// while agreeing with the other (within tol). cmp compares c's result with a's or b's within a tolerance.
func (g *generation) majority(c, a, b string, tol func(x string) float64, cmp func(x string, tol float64) (bool, float64)) (string, float64, bool) {
	for _, p := range [][2]string{{a, b}, {b, a}} {
		liar, honest := p[0], p[1]
		if ok, _ := cmp(honest, tol(honest)); !ok {
			continue
		}
		if ok, diff := cmp(liar, g.banMargin(c, liar)); !ok {
			return liar, diff, true
		}
	}
	return "", 0, false
}

// convict is the fault of liar on layers, found by the third holder c.
// what says what differed, and by how much.
func (g *generation) convict(liar string, layers [2]int, c string, what string) *fault {
	by := "a third holder " + short(c)
	if c == g.o.Host.ID().String() {
		by = "this peer's own copy"
		if g.settling {
			by = "this peer's copy of the weights, checked against the model's manifest,"
		}
	}
	return &fault{peer: liar, layers: layers, code: "mismatch", evidence: EvidenceMajority, proven: true, output: true,
		reason: fmt.Sprintf("spot-check: with its layers [%d,%d), %s, where %s agreed with the hop it disagreed with",
			layers[0], layers[1], what, by)}
}

// segment is a layer range and who runs it on two routes.
type segment struct {
	lo, hi int
	a, b   string
}

// segments cuts routes a and b at every cut of either.
func segments(a, b []Hop) []segment {
	var cuts []int
	for _, h := range append(slices.Clone(a), b...) {
		cuts = append(cuts, h.Start, h.End)
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var out []segment
	for i := 0; i+1 < len(cuts); i++ {
		lo, hi := cuts[i], cuts[i+1]
		out = append(out, segment{lo: lo, hi: hi, a: covering(a, lo, hi).Peer, b: covering(b, lo, hi).Peer})
	}
	return out
}

// mixed is the route running each segment on the peer pick chooses,
// consecutive segments of one peer in one hop.
func mixed(segs []segment, pick func(i int, s segment) string) []Hop {
	var out []Hop
	for i, s := range segs {
		p := pick(i, s)
		if n := len(out); n > 0 && out[n-1].Peer == p {
			out[n-1].End = s.hi
			continue
		}
		out = append(out, Hop{Peer: p, Start: s.lo, End: s.hi})
	}
	return out
}

// replayVote settles routes a and b, which disagreed at step k although
// every layer range agreed when probed, by replays on mixed routes (see
// above). Route a and route b are replayed too, and the answer compared
// with a's replay, not with what the routes returned: a hop that lies on
// some real sessions and not on others (from its nth step on, say) would
// otherwise make the first segment that moves look like the flip, and the
// honest peer running it like the liar. It returns the liar's fault, or
// nil, and the layers where the answer flipped (none: it did not) with
// the two peers that ran them.
func (g *generation) replayVote(ctx context.Context, a, b []Hop, k int) (*fault, [2]int, []string) {
	segs := segments(a, b)
	var outs []*Result
	flip := -1
	for j := 0; j <= len(segs) && flip < 0; j++ {
		route := mixed(segs, func(i int, s segment) string {
			if i < j {
				return s.b
			}
			return s.a
		})
		r, err := g.replaySession(ctx, route, k)
		if err != nil {
			g.o.log().Info("pipeline: a replay to settle a spot-check failed", "route", route, "err", err)
			return nil, [2]int{}, nil
		}
		outs = append(outs, r)
		if same, _ := sameResult(r, outs[0], g.routesTolerance(a, b)); !same {
			flip = j - 1 // segment j-1 moved from a's peer to b's, and the answer with it
		}
	}
	if flip < 0 || ctx.Err() != nil {
		return nil, [2]int{}, nil
	}
	s := segs[flip]
	where := [2]int{s.lo, s.hi}
	suspects := remotePeers([]Hop{{Peer: s.a}, {Peer: s.b}}, g.o.Host.ID().String())
	if s.a == s.b {
		return nil, where, suspects // one peer on both sides: it does not compute alike twice
	}
	before, after := outs[flip], outs[flip+1]
	for _, c := range g.thirdHolders(s.lo, s.hi, s.a, s.b) {
		if f, stop := g.judgeReplay(ctx, segs, flip, k, c, before, after); stop {
			return f, where, suspects
		}
	}
	// No third holder: this peer settles it from weights it checked
	// against the model's manifest (settle.go), once per dispute.
	return g.settleVerified(ctx, segs, flip, k, before, after), where, suspects
}

// judgeReplay has c run segment flip of segs in a replay of the answer's
// first k tokens, a real session on a route otherwise the same: the hop
// it agrees with stands, the one it clearly contradicts is convicted.
// before and after are the results with the segment on its a and its b
// peer. stop is false when the replay failed (another c may decide).
func (g *generation) judgeReplay(ctx context.Context, segs []segment, flip, k int, c string, before, after *Result) (f *fault, stop bool) {
	s := segs[flip]
	route := mixed(segs, func(i int, t segment) string {
		switch {
		case i == flip:
			return c
		case i < flip:
			return t.b
		}
		return t.a
	})
	r, err := g.replaySession(ctx, route, k)
	if err != nil || ctx.Err() != nil {
		if err != nil {
			g.o.log().Info("pipeline: a replay to settle a spot-check failed", "route", route, "err", err)
		}
		return nil, false
	}
	if len(r.Logits) == 0 && (g.req.DType == DTypeF16 || !g.ref.Float && !g.oneArch([]string{c, s.a, s.b})) {
		// A near tie may round to other tokens: f16 hidden states
		// rounded at other cuts, quantized weights on other CPUs.
		return nil, true
	}
	tol := func(x string) float64 {
		t := g.tolerance(c, x)
		if g.req.DType == DTypeF16 {
			t = max(t, f16Tolerance) // the mixed routes cut the model elsewhere
		}
		return t
	}
	liar, diff, ok := g.majority(c, s.a, s.b, tol, func(x string, tol float64) (bool, float64) {
		o := before
		if x == s.b {
			o = after
		}
		return sameResult(r, o, tol)
	})
	if !ok {
		return nil, true
	}
	what := fmt.Sprintf("a replay of the answer (a real session) gave logits %.3g apart", diff)
	if len(r.Logits) == 0 {
		what = "a replay of the answer (a real session) chose another token"
	}
	return g.convict(liar, [2]int{s.lo, s.hi}, c, what), true
}

// sameResult compares two final results of routes: tokens exactly, logits
// within tol.
func sameResult(x, y *Result, tol float64) (bool, float64) {
	if len(x.Logits) == 0 || len(y.Logits) == 0 {
		if len(x.Logits) != len(y.Logits) || x.Token != y.Token {
			return false, 1
		}
		return true, 0
	}
	return agree(x.Logits, y.Logits, len(x.Logits), tol)
}

// replaySession runs the answer's first k tokens on hops as a real session
// of this generation would: opened alike, the prompt as one step, then
// each token alone; it returns the last step's result.
func (g *generation) replaySession(ctx context.Context, hops []Hop, k int) (*Result, error) {
	for _, h := range hops {
		if _, err := peer.Decode(h.Peer); err != nil {
			return nil, fmt.Errorf("pipeline: replay route %v: %w", hops, err)
		}
	}
	c, err := g.open(ctx, hops)
	if err != nil {
		return nil, err
	}
	defer c.close()
	res, _, err := g.step(ctx, c, hops, g.prompt, nil)
	for i := 0; err == nil && i < k && i < len(g.res.Tokens); i++ {
		res, _, err = g.step(ctx, c, hops, g.res.Tokens[i:i+1], nil)
	}
	return res, err
}
