package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/swarm"
)

// SpotCheck sets how real traffic is checked. A checked generation runs
// every step on a second route over other peers too (the warm-standby
// machinery: same batch shapes, and it takes over if the primary fails).
// A plain greedy generation compares the tokens both last hops choose
// (byTokens); any other has both return logits, the originator samples,
// and each step's logits must agree within Tolerance. A peer is checked on
// every generation until it has served Probation checked answers, and
// layers where routes disagreed are checked on every generation for a
// while (alert.go). On a mismatch the originator finds the liar by its
// own recomputation: it runs the history through both routes layer range
// by layer range, each hop a probe it opens itself on the same input, and
// where two hops disagree its own copy of the layers (Originator.Local),
// the Referee or a third holder decides; a hop that lies on real traffic
// only is found by replays on mixed routes (tiebreak.go). A proven liar is
// left out and recorded in Trust; when nothing decides, the generation
// avoids the disagreeing hops and bans nobody. Either way it goes on from
// a route without them, by a replay.
type SpotCheck struct {
	// Probability that a generation is checked (default 0.1; negative:
	// none). A route through a peer Trust has not proven is always checked.
	Probability float64 `json:"probability,omitempty"`
	// Tolerance is how far two results may differ, relative to the
	// largest value of each position (default 1e-3). Routes that send f16
	// hidden states and cut the model at other layers round at other
	// places: their logits are compared within max(Tolerance, 5e-2)
	// (two honest routes of the synthetic q8_0 models differed by up to
	// 1.9e-2), which lets small lies through; f32 routes (the default)
	// agree bit for bit.
	Tolerance float64 `json:"tolerance,omitempty"`
	// Probation is how many checked real answers a peer must serve, each
	// agreeing with a second route, before its generations are sampled
	// at Probability: until then every generation through it is checked
	// (default 5; negative: none). Passing a challenge proves a peer
	// computes its layers when asked to; only its real traffic, checked,
	// shows it does so when it cannot tell it is watched.
	Probation int `json:"probation,omitempty"`
}

// defaultProbation is SpotCheck.Probation's default.
const defaultProbation = 5

func (s SpotCheck) probation() int {
	if s.Probation == 0 {
		return defaultProbation
	}
	return max(s.Probation, 0)
}

const (
	defaultSpotCheck = 0.1
	defaultTolerance = 1e-3
	// maxChecks bounds the check routes one generation opens.
	maxChecks = 4
)

func (s SpotCheck) probability() float64 {
	if s.Probability == 0 {
		return defaultSpotCheck
	}
	return s.Probability
}

func (s SpotCheck) tolerance() float64 {
	if s.Tolerance <= 0 {
		return defaultTolerance
	}
	return s.Tolerance
}

// byTokens reports whether a checked generation compares the tokens the
// routes' last hops choose, as an unchecked answer gets them, rather than
// logits: a plain greedy one. A last hop then cannot tell a checked session
// from another by its asking for logits, and a hop that lies about the
// token it chooses is checked on that very token. A speculating one is
// checked by speccheck.go's rules.
func (g *generation) byTokens() bool {
	return !(g.req.Speculate && g.o.Drafter != nil) && !g.req.Logits && g.req.Sampling.Temperature <= 0
}

// drawCheck decides whether a generation starting on hops is checked:
// always through a peer not proven or still on probation, or over layers
// a disagreement put on alert; else at the sampling rate.
func (g *generation) drawCheck(hops []Hop) bool {
	p := g.o.SpotCheck.probability()
	return g.anyNew(hops) || g.o.alerts.on(g.ref.CID, hops) || p > 0 && rand.Float64() < p
}

// anyNew reports whether hops go through a peer the ledger has not proven,
// or one still on probation (fewer checked real answers than Probation).
func (g *generation) anyNew(hops []Hop) bool {
	tr := g.o.View.Trust()
	if tr == nil {
		return false
	}
	for _, h := range hops {
		if id, err := peer.Decode(h.Peer); err == nil && id != g.o.Host.ID() &&
			(!tr.Proven(id) || tr.Checked(id) < g.o.SpotCheck.probation()) {
			return true
		}
	}
	return false
}

// confirm compares the result of step k with the check route's, waiting
// for it. On a mismatch it settles who lied and returns the step's result
// from a route without the liar. When the check route itself fails, the
// check goes on on a new one, if there is one.
func (g *generation) confirm(ctx context.Context, k int, res *Result, input []int32) (*Result, error) {
	for g.sb != nil && g.sb.check {
		if len(res.Logits) == 0 && !g.byTokens() {
			if !g.checking() { // not a checked route's result: nothing to compare (not reached)
				g.closeShadow()
				return res, nil
			}
			// A speculating check: the routes' tokens are compared; where
			// they differ, both are opened again to compare logits.
			err := g.checkRound(ctx, k, input, res) // one token chosen: the input is no draft
			var d *disagreement
			if !errors.As(err, &d) {
				return res, err
			}
			if res, _, err = g.settle(ctx, d); err != nil {
				// The routes opened again failed: recovered as any
				// failure, on a route without the failed hop.
				var c *chain
				if c, res, err = g.recover(ctx, err, 0, input, g.hops); err != nil {
					return nil, err
				}
				g.chain = c
			}
			continue
		}
		s := g.sb
		var sres *Result
		err := g.watched(ctx, s.hops, g.expect(input, nil), func(ctx context.Context) (err error) {
			sres, err = s.result(ctx, k)
			return err
		})
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err != nil {
			g.checkFailed(err)
			g.sb = g.startStandby(ctx, true)
			continue
		}
		if g.byTokens() && len(res.Logits) == 0 && len(sres.Logits) == 0 && len(sres.Tokens) == 0 {
			// The token each last hop chose, as an unchecked answer gets it.
			if sres.Token == res.Token {
				g.passCheck(s)
				return res, nil
			}
			g.lost.compared = true
			chose := [2]int32{res.Token, sres.Token}
			var tie bool
			if res, tie, err = g.mismatch(ctx, k, fmt.Sprintf("the check route chose token %d, this one %d", sres.Token, res.Token), input, &chose); err != nil || tie {
				return res, err
			}
			continue
		}
		if len(sres.Logits) == 0 { // the check route runs verify steps: both again alike
			g.sc.resync = true
			return res, nil
		}
		tol := g.routesTolerance(g.hops, s.hops)
		ok, diff := agree(res.Logits, sres.Logits, len(res.Logits), tol)
		if ok {
			g.passCheck(s)
			g.res.SpotMaxDiff = max(g.res.SpotMaxDiff, diff)
			g.judgeVerify(ctx, k, res)
			return res, nil
		}
		g.lost.compared = true
		if res, _, err = g.mismatch(ctx, k, fmt.Sprintf("by %.3g, tolerance %g", diff, tol), input, nil); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// mismatch settles a disagreement (what) between the primary and the
// check route at step k and returns the step's result from a route
// without the liar (or, undecided, without either disagreeing hop where
// others cover their layers). The layers where the routes parted (all,
// when that stays unknown) go on alert.
//
// chose, for a disagreement on the token alone, is the token this route
// and the check route chose: when every range agrees when probed and each
// route's own peers' logits choose its token within the tolerance, the two
// differ only by honest rounding at a near tie (tie is true): this
// route's step stands, nobody is suspected, and it is no mismatch.
func (g *generation) mismatch(ctx context.Context, k int, what string, input []int32, chose *[2]int32) (res *Result, tie bool, err error) {
	a, b := g.hops, g.sb.hops
	// The probes open sessions on these peers from this one: end the
	// routes' first (a peer's share of a stage's sessions is small).
	g.chain.st.Reset()
	g.chain = nil
	g.closeShadow()
	g.o.log().Info("pipeline: the routes disagree; probing them", "at_token", k, "disagreement", what, "route", a, "check_route", b)
	liars, suspects, where, last := g.bisect(ctx, a, b)
	if chose != nil && len(liars) == 0 && where == [2]int{} && ctx.Err() == nil && g.nearTie(last, *chose, g.routesTolerance(a, b)) {
		g.res.NearTies++
		g.o.log().Info("pipeline: the routes chose other tokens at a near tie, within the tolerance", "at_token", k, "tokens", *chose, "route", a, "check_route", b)
		g.trace(answer.Trace{Kind: "near_tie", AtToken: k, Reason: what})
		res, err := g.resume(ctx, a)
		if err == nil {
			return res, true, nil
		}
		// The route failed to reopen: a failure like any other, no lie.
		c, res, err := g.recover(ctx, err, 0, input, a)
		g.chain = c
		return res, false, err
	}
	g.o.log().Warn("pipeline: spot-check mismatch; finding the liar", "at_token", k, "disagreement", what, "route", a, "check_route", b)
	g.res.Mismatches++
	if len(liars) == 0 && where == [2]int{} && ctx.Err() == nil {
		// Every range agreed when probed: the liar lies on real traffic only.
		lf, at, who := g.replayVote(ctx, a, b, k)
		if lf != nil {
			liars = []*fault{lf}
		}
		if at != [2]int{} {
			where, suspects = at, who // the answer flipped there: nobody else is suspect
		}
	}
	if len(liars) == 0 && where != [2]int{} && len(suspects) == 2 {
		g.o.disputes.undecided(newDispute(g.ref.CID, where[0], where[1], suspects[0], suspects[1]), true)
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if where == [2]int{} {
		g.o.alerts.raise(g.ref.CID, 0, g.ref.Layers)
	} else {
		g.o.alerts.raise(g.ref.CID, where[0], where[1])
	}
	var f *fault
	if len(liars) > 0 {
		f = liars[0]
		for _, l := range liars[1:] {
			g.apply(l)
		}
	} else {
		f = &fault{code: "mismatch", layers: where, evidence: EvidenceUndecided, suspects: suspects,
			reason: fmt.Sprintf("two routes disagree at token %d (%s) and nothing here shows which lied", k, what)}
	}
	g.trace(answer.Trace{Kind: "mismatch", AtToken: k, Failed: f.peer, Layers: f.layers, Reason: f.reason, Proven: f.proven,
		Evidence: f.evidence, Suspects: f.suspects})
	c, res, err := g.recover(ctx, f, 0, input, a)
	g.chain = c
	return res, false, err
}

// bisect runs the history through routes a and b layer range by layer
// range (between every cut of either), each range on both routes' hops
// as probes from this peer on the same input, and finds the first range
// where they disagree. It returns the proven liars, or else the suspects,
// and the layers where the routes parted; when every range agreed, last
// holds both routes' outputs of the last range (their logits).
func (g *generation) bisect(ctx context.Context, a, b []Hop) (liars []*fault, suspects []string, where [2]int, last [2][]float32) {
	tokens, shapes := g.history()
	var cuts []int
	for _, h := range append(slices.Clone(a), b...) {
		cuts = append(cuts, h.Start, h.End)
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	self := g.o.Host.ID().String()
	var hidden []float32
	for i := 0; i+1 < len(cuts); i++ {
		lo, hi := cuts[i], cuts[i+1]
		ha, hb := covering(a, lo, hi), covering(b, lo, hi)
		oa, errA := g.probe(ctx, ha, tokens, hidden, shapes)
		ob, errB := g.probe(ctx, hb, tokens, hidden, shapes)
		if ctx.Err() != nil {
			return nil, nil, [2]int{lo, hi}, last
		}
		for _, p := range []struct {
			h   Hop
			err error
		}{{ha, errA}, {hb, errB}} {
			if lf := badNumbers(p.h, p.err); lf != nil && p.h.Peer != self {
				liars = append(liars, lf)
			}
		}
		if len(liars) > 0 {
			return liars, nil, [2]int{lo, hi}, last
		}
		if errA != nil || errB != nil {
			// No proof either way: every hop from here on is suspect.
			g.o.log().Info("pipeline: a spot-check probe failed", "layers", [2]int{lo, hi}, "err", errors.Join(errA, errB))
			return nil, remotePeers(from(append(slices.Clone(a), b...), lo), self), [2]int{lo, hi}, last
		}
		if ok, _ := agree(oa, ob, rowLen(hi, g.ref), g.tolerance(ha.Peer, hb.Peer)); ok {
			hidden, last = oa, [2][]float32{oa, ob}
			continue
		}
		liars, suspects = g.referee(ctx, ha, hb, tokens, hidden, shapes, oa, ob)
		return liars, suspects, [2]int{lo, hi}, [2][]float32{}
	}
	// Every range agreed when probed although the routes disagreed: a hop
	// lies on real traffic only, and nothing here shows which.
	return nil, remotePeers(append(slices.Clone(a), b...), self), [2]int{}, last
}

// referee settles two hops that computed layers [lo,hi) differently from
// the same input: this peer's own copy of the layers, or else the
// Referee, finds the liar(s); with neither, both are suspects.
func (g *generation) referee(ctx context.Context, ha, hb Hop, tokens []int32, hidden []float32, shapes []int, oa, ob []float32) ([]*fault, []string) {
	self := g.o.Host.ID().String()
	lo, hi := ha.Start, ha.End
	var liars []*fault
	if g.o.Local != nil && g.o.Local.find(g.ref.CID, lo, hi) != nil {
		ref, err := g.probe(ctx, Hop{Peer: self, Start: lo, End: hi}, tokens, hidden, shapes)
		if err == nil {
			for _, p := range []struct {
				h   Hop
				out []float32
			}{{ha, oa}, {hb, ob}} {
				// A ban needs a clear miss: ten times the tolerance (or 1%, and
				// at least the quantized bound), so an honest peer on another
				// CPU, whose sums round elsewhere over the range's layers, is
				// never taken for a liar.
				if ok, diff := agree(ref, p.out, rowLen(hi, g.ref), g.banMargin(self, p.h.Peer)); !ok && p.h.Peer != self {
					liars = append(liars, &fault{peer: p.h.Peer, layers: [2]int{lo, hi}, code: "mismatch", evidence: EvidenceLocal,
						proven: true, output: true, reason: fmt.Sprintf("spot-check: its layers [%d,%d) differ from this peer's own copy by %.3g", lo, hi, diff)})
				}
			}
			if len(liars) > 0 {
				return liars, nil
			}
		} else {
			g.o.log().Info("pipeline: this peer could not referee a spot-check", "layers", [2]int{lo, hi}, "err", err)
		}
	}
	if g.o.Referee != nil {
		for _, h := range []Hop{ha, hb} {
			id, err := peer.Decode(h.Peer)
			if err != nil || h.Peer == self {
				continue
			}
			err = g.o.Referee(ctx, id, swarm.Claim{Model: g.ref.CID, Start: lo, End: hi})
			if errors.Is(err, ErrCheckFailed) {
				liars = append(liars, &fault{peer: h.Peer, layers: [2]int{lo, hi}, code: "mismatch", evidence: EvidenceReferee,
					proven: true, output: true, recorded: true, reason: "spot-check: the referee found it lying: " + err.Error()})
			}
		}
		if len(liars) > 0 {
			return liars, nil
		}
	}
	if liars = g.voteProbe(ctx, ha, hb, tokens, hidden, shapes, oa, ob); len(liars) > 0 {
		return liars, nil
	}
	return nil, remotePeers([]Hop{ha, hb}, self)
}

// walk runs the history through hops one hop at a time, each a probe
// from this peer fed the previous probe's output, and checks every output
// here: the first hop whose output holds bad numbers is proven to lie.
// nil: none did, or a probe failed otherwise (no proof either way).
func (g *generation) walk(ctx context.Context, hops []Hop) *fault {
	tokens, shapes := g.history()
	var hidden []float32
	for _, h := range hops {
		out, err := g.probe(ctx, h, tokens, hidden, shapes)
		if err != nil {
			if lf := badNumbers(h, err); lf != nil && h.Peer != g.o.Host.ID().String() {
				return lf
			}
			return nil
		}
		hidden = out
	}
	return nil
}

// badNumbers is the fault a probe's error proves, if it proves one: bad
// numbers from the probed hop itself, on this peer's own stream.
func badNumbers(h Hop, err error) *fault {
	var se *StageError
	if !errors.As(err, &se) || se.Evidence != EvidenceCheck {
		return nil
	}
	return &fault{peer: h.Peer, layers: [2]int{h.Start, h.End}, code: CodeBadOutput, evidence: EvidenceCheck, proven: true, output: true,
		reason: "its output to this peer's own probe: " + se.Err.Error()}
}

// probe runs the history through layers [h.Start,h.End) on h.Peer alone,
// opened by this peer: tokens as input at layer 0, else hidden (f32, every
// position). It returns every position's hidden states, or the last
// position's logits when h ends at the model's last layer. The output is
// checked for bad numbers (a StageError with EvidenceCheck).
func (g *generation) probe(ctx context.Context, h Hop, tokens []int32, hidden []float32, shapes []int) ([]float32, error) {
	open := Open{Session: rand.Uint64() | 1, Model: g.ref.CID, Layers: g.ref.Layers, Hidden: g.ref.Hidden, DType: DTypeF32,
		Sampling: g.req.Sampling, Logits: true, From: h.Start,
		Route: []RouteHop{{Peer: h.Peer, Start: h.Start, End: h.End}}}
	if h.End < g.ref.Layers {
		open.Until = h.End
	}
	if h.Start == 0 {
		hidden = nil
	}
	var out []float32
	err := g.watched(ctx, []Hop{h}, g.expect(tokens, shapes), func(ctx context.Context) error {
		c, err := g.o.openChain(ctx, open)
		if err != nil {
			return err
		}
		defer c.close()
		c.vocab = g.tok.VocabSize()
		res, _, err := c.stepHidden(ctx, tokens, hidden, shapes)
		if err != nil {
			return err
		}
		out = res.Logits
		return nil
	})
	return out, err
}

// sameCuts reports whether two routes cut the model at the same layers.
func sameCuts(a, b []Hop) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Start != b[i].Start || a[i].End != b[i].End {
			return false
		}
	}
	return true
}

// covering is the part [lo,hi) of the hop of route that holds it.
func covering(route []Hop, lo, hi int) Hop {
	for _, h := range route {
		if h.Start <= lo && hi <= h.End {
			return Hop{Peer: h.Peer, Start: lo, End: hi}
		}
	}
	return Hop{Start: lo, End: hi} // routes chain over every layer: not reached
}

// from is the hops of route that run layers at or after lo.
func from(route []Hop, lo int) []Hop {
	var out []Hop
	for _, h := range route {
		if h.End > lo {
			out = append(out, h)
		}
	}
	return out
}

// rowLen is the values per row of a probe's output ending at layer hi: a
// hidden state, or the logits.
func rowLen(hi int, ref ModelRef) int {
	if hi < ref.Layers {
		return ref.Hidden
	}
	return 0 // the logits: one row, whatever their count
}
