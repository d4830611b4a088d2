package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/swarm"
)

// Blame is proven, never taken on another peer's word. The originator
// leaves a peer out only on its own evidence: its own stream to the first
// hop failing, a ping the peer does not answer, bad numbers it received
// itself, a spot-check it refereed. An error frame naming a hop deeper in
// the route is that route's word: an accusation. The originator pings the
// accused; if it answers, nobody is proven guilty, and the rest of the
// generation avoids the accused and every hop that can have written the
// frame, where other peers cover their layers, penalising no one.
//
// Honest hops make the accusation narrow: each refuses bad numbers from
// the hop before it (naming that hop) and checks what comes back from the
// hop after it, and passes back no error frame that names a hop before
// the one that sent it. So a frame naming hop j was written by a hop up to
// j (or by hop j+1, for bad input), and a bad result reaching the
// originator proves its first hop lied.

// fault is a failure the generation routes around, and what the
// originator knows of it.
type fault struct {
	peer     string
	layers   [2]int
	code     string
	reason   string
	evidence string // an Evidence* constant
	proven   bool
	output   bool     // misbehaviour about outputs (recorded in Trust), not a death
	recorded bool     // the referee recorded it in Trust already
	suspects []string // avoided for the rest of the generation, without proof
}

func (f *fault) Error() string {
	if f.peer == "" {
		return "pipeline: " + f.reason
	}
	return fmt.Sprintf("pipeline: stage %s (layers [%d,%d)): %s", short(f.peer), f.layers[0], f.layers[1], f.reason)
}

// judge says what a failed call on route hops proves. An error that is not
// a stage's failure ends the generation.
func (g *generation) judge(ctx context.Context, cause error, hops []Hop, input []int32) (*fault, error) {
	var f *fault
	if errors.As(cause, &f) {
		return f, nil
	}
	var se *StageError
	if !errors.As(cause, &se) {
		return nil, cause
	}
	self := g.o.Host.ID().String()
	f = &fault{peer: se.Peer, layers: se.Layers, code: se.Code, reason: se.Err.Error(), evidence: se.Evidence}
	switch se.Evidence {
	case EvidenceStall:
		f.suspects = remotePeers(hops, self)
		return f, nil
	case "":
	default:
		f.proven = true
		f.output = se.Evidence == EvidenceCheck
		return f, nil
	}
	j := hopIndex(hops, se.Peer, se.Layers)
	if j == 0 && se.Code != CodeBadInput {
		if se.Code == CodeBadFrame && se.Peer == self {
			return nil, cause // this peer's own stage refused its frame: a bug here, not a failure to route around
		}
		f.proven, f.evidence = true, EvidenceSelf // the first hop's word about itself, on this peer's own stream
		return f, nil
	}
	// Another peer's word. Whoever wrote it is among the hops up to the one
	// it names (or the one after, which reports bad input).
	upto := len(hops) - 1
	if j >= 0 {
		upto = j
		if se.Code == CodeBadInput {
			upto = min(j+1, len(hops)-1)
		}
	}
	f.suspects = remotePeers(hops[:upto+1], self)
	f.evidence = EvidenceAccusation
	if (se.Code == CodeBadInput || se.Code == CodeBadOutput) && input != nil {
		// Bad numbers can be seen first hand: run the history through the
		// route hop by hop and check each hop's output here.
		if lf := g.walk(ctx, hops); lf != nil {
			return lf, nil
		}
	}
	if j >= 0 && se.Peer != self {
		if id, err := peer.Decode(se.Peer); err == nil {
			pctx, cancel := context.WithTimeout(ctx, g.o.Progress.Defaults().ProbeTimeout)
			perr := swarm.Ping(pctx, g.o.Host, id)
			cancel()
			if perr != nil && ctx.Err() == nil {
				f.proven, f.evidence, f.suspects = true, EvidencePing, nil
				f.reason += fmt.Sprintf(" (reported by the route; it did not answer this peer's ping: %v)", perr)
				return f, nil
			}
		}
	}
	if lf := g.refereeSuspects(ctx, hops, f.suspects); lf != nil {
		return lf, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g.o.log().Warn("pipeline: unproven accusation: avoiding the accused and the hops that can have made it up for this generation",
		"peer", se.Peer, "layers", se.Layers, "code", se.Code, "suspects", f.suspects, "err", f.reason)
	g.trace(answer.Trace{Kind: "accusation", Failed: se.Peer, Layers: se.Layers, Reason: f.reason, AtToken: len(g.res.Tokens),
		Evidence: f.evidence, Suspects: f.suspects})
	return f, nil
}

// refereeSuspects has the Referee (if any) check the suspects of an
// accusation on the layers they ran: the first found lying is the fault
// (the others found lying are left out too).
func (g *generation) refereeSuspects(ctx context.Context, hops []Hop, suspects []string) *fault {
	if g.o.Referee == nil {
		return nil
	}
	var found *fault
	for _, h := range hops {
		id, err := peer.Decode(h.Peer)
		if err != nil || !slices.Contains(suspects, h.Peer) || ctx.Err() != nil {
			continue
		}
		err = g.o.Referee(ctx, id, swarm.Claim{Model: g.ref.CID, Start: h.Start, End: h.End})
		if !errors.Is(err, ErrCheckFailed) {
			continue
		}
		lf := &fault{peer: h.Peer, layers: [2]int{h.Start, h.End}, code: CodeBadOutput, evidence: EvidenceReferee, proven: true,
			output: true, recorded: true, reason: "suspected, and the referee found it lying: " + err.Error()}
		if found == nil {
			found = lf
		} else {
			g.apply(lf)
		}
	}
	return found
}

// apply acts on a fault: a proven one leaves its peer out (a liar for the
// rest of the generation and in Trust; a dead or hung peer until it is
// heard from again), an unproven one makes its suspects avoided.
func (g *generation) apply(f *fault) {
	self := g.o.Host.ID().String()
	if f.proven && f.peer != "" {
		until := time.Now()
		if f.output && f.peer != self {
			until = until.Add(24 * time.Hour) // its heartbeats do not bring it back
			for h := range g.passed {
				if h.Peer == f.peer {
					delete(g.passed, h)
				}
			}
			if tr := g.o.View.Trust(); tr != nil && !f.recorded {
				if id, err := peer.Decode(f.peer); err == nil {
					d := tr.Fail(id, f.reason)
					g.o.log().Warn("pipeline: a peer lied about its output; banned", "peer", f.peer, "layers", f.layers,
						"evidence", f.evidence, "ban", d, "err", f.reason)
				}
			}
		}
		if at, ok := g.failed[f.peer]; !ok || at.Before(until) {
			g.failed[f.peer] = until
		}
	}
	for _, p := range f.suspects {
		if p != self {
			g.avoid[p]++
		}
	}
}

// plan assembles the cheapest live route without the failed peers and
// without hard (nil: none), avoiding the suspects as far as other peers
// cover their layers: where only suspects hold some layers, those
// suspected least often are used again first.
func (g *generation) plan(ctx context.Context, hard map[string]bool) ([]Hop, error) {
	avoid := maps.Clone(g.avoid)
	for {
		ex := maps.Clone(g.failed)
		far := time.Now().Add(24 * time.Hour)
		for p := range hard {
			ex[p] = far
		}
		for p := range avoid {
			ex[p] = far
		}
		hops, err := g.o.planCtx(ctx, g.ref, g.holders, ex)
		if err == nil || len(avoid) == 0 {
			return hops, err
		}
		var gap *GapError
		least := 0 // the fewest suspicions among the suspects holding missing layers
		if errors.As(err, &gap) {
			for _, h := range g.holders {
				if n := avoid[h.Peer.ID.String()]; n > 0 && overlaps(h.Shard.Start, h.Shard.End, gap.Missing) && (least == 0 || n < least) {
					least = n
				}
			}
		}
		if least == 0 {
			avoid = nil
			continue
		}
		for _, h := range g.holders {
			if p := h.Peer.ID.String(); avoid[p] == least && overlaps(h.Shard.Start, h.Shard.End, gap.Missing) {
				delete(avoid, p)
			}
		}
	}
}

func overlaps(a, b int, ranges [][2]int) bool {
	for _, r := range ranges {
		if a < r[1] && r[0] < b {
			return true
		}
	}
	return false
}

// hopIndex is the index of the hop of hops on peer p running layers (-1:
// none).
func hopIndex(hops []Hop, p string, layers [2]int) int {
	at := -1
	for i, h := range hops {
		if h.Peer == p {
			if h.Start == layers[0] && h.End == layers[1] {
				return i
			}
			if at < 0 {
				at = i
			}
		}
	}
	return at
}

// remotePeers is the peers of hops other than self, once each, in order.
func remotePeers(hops []Hop, self string) []string {
	var out []string
	for _, h := range hops {
		if h.Peer != self && !slices.Contains(out, h.Peer) {
			out = append(out, h.Peer)
		}
	}
	return out
}

// reroute records a failover away from f onto hops.
func (g *generation) reroute(f *fault, at int, hops []Hop, detect time.Duration) answer.Reroute {
	return answer.Reroute{AtToken: at, Failed: f.peer, Layers: f.layers, Reason: f.reason, NewRoute: hops, DetectMS: ms(detect),
		Proven: f.proven, Evidence: f.evidence, Suspects: f.suspects}
}

// credit records in the ledger the hops a second route confirmed.
func (g *generation) credit() {
	tr := g.o.View.Trust()
	if tr == nil {
		return
	}
	agreed := map[peer.ID]bool{}
	for h := range g.passed {
		if id, err := peer.Decode(h.Peer); err == nil && id != g.o.Host.ID() {
			tr.Pass(id, swarm.Claim{Model: g.ref.CID, Start: h.Start, End: h.End})
			agreed[id] = true
		}
	}
	if g.res.Mismatches > 0 {
		return // an answer the routes disagreed on serves nobody's probation
	}
	for id := range agreed {
		tr.Agreed(id)
	}
}
