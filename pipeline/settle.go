package pipeline

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/llmswarm/llmswarm/answer"
)

// Settling a dispute from verified weights. Where two holders of some
// layers disagree on real traffic and no third holder nor this peer's own
// copy decides, this peer gets the layers' weights itself, checked
// against the model's manifest (Originator.Verified), serves them to
// itself alone for the time of one replay of the disputed session, a real
// session like the others (tiebreak.go), and convicts the hop its output
// contradicts. It tries once per dispute: what it cannot settle (no
// weights to be had, or no room for them) stays disputed, and answers
// whose route ran the disputed layers on either disputed hop say so
// (answer.Pipeline.Disputed) until the dispute expires with its alert.

// settleWait bounds how long the layers loaded to settle a dispute wait
// for the replay's sessions to end before they are unloaded.
const settleWait = 30 * time.Second

// dispute is two peers disagreeing on layers [lo,hi) of model.
type dispute struct {
	model  string
	lo, hi int
	peers  [2]string // sorted
}

func newDispute(model string, lo, hi int, a, b string) dispute {
	p := [2]string{a, b}
	if b < a {
		p = [2]string{b, a}
	}
	return dispute{model: model, lo: lo, hi: hi, peers: p}
}

// disputes is what this originator tried to settle from verified weights,
// and what stays undecided; usable at its zero value.
type disputes struct {
	mu    sync.Mutex
	tried map[dispute]time.Time // when it was tried
	open  map[dispute]time.Time // undecided, until
}

// try reports whether d may be settled now (it was not tried within
// alertFor), and marks it tried.
func (ds *disputes) try(d dispute) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if at, ok := ds.tried[d]; ok && time.Since(at) < alertFor {
		return false
	}
	if ds.tried == nil {
		ds.tried = map[dispute]time.Time{}
	}
	ds.tried[d] = time.Now()
	return true
}

// undecided records d as undecided for alertFor, or drops it (decided).
func (ds *disputes) undecided(d dispute, still bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.open == nil {
		ds.open = map[dispute]time.Time{}
	}
	now := time.Now()
	for x, until := range ds.open {
		if !until.After(now) {
			delete(ds.open, x)
		}
	}
	if !still {
		delete(ds.open, d)
		return
	}
	if len(ds.open) >= maxAlerts {
		return // the alert still checks these layers
	}
	ds.open[d] = now.Add(alertFor)
}

// over lists the undecided disputes on model whose layers one of hops ran
// on one of the disputed peers.
func (ds *disputes) over(model string, hops []answer.HopStat) []answer.Dispute {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	now := time.Now()
	var out []answer.Dispute
	for d, until := range ds.open {
		if d.model != model || !until.After(now) {
			continue
		}
		for _, h := range hops {
			if h.Start < d.hi && d.lo < h.End && slices.Contains(d.peers[:], h.Peer) {
				out = append(out, answer.Dispute{Start: d.lo, End: d.hi, Peers: slices.Clone(d.peers[:])})
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b answer.Dispute) int { return a.Start - b.Start })
	return out
}

// settleVerified settles the dispute over segment flip of segs (see
// replayVote) with this peer's copy of its layers from weights verified
// against the manifest: nil when it is not tried (tried before, no
// Verified hook, no room) or does not decide. Only s.a or s.b can be
// convicted.
func (g *generation) settleVerified(ctx context.Context, segs []segment, flip, k int, before, after *Result) *fault {
	s := segs[flip]
	self := g.o.Host.ID().String()
	d := newDispute(g.ref.CID, s.lo, s.hi, s.a, s.b)
	if g.o.Verified == nil || g.o.Local == nil || s.a == self || s.b == self || !g.o.disputes.try(d) {
		g.o.disputes.undecided(d, true)
		return nil
	}
	start := time.Now()
	sh, release, err := g.o.Verified(ctx, g.ref.CID, s.lo, s.hi)
	if err != nil {
		g.o.log().Warn("pipeline: a dispute stays undecided: no verified weights to settle it", "model", g.ref.CID,
			"layers", [2]int{s.lo, s.hi}, "peers", d.peers, "err", err)
		g.o.disputes.undecided(d, true)
		return nil
	}
	if sh.ModelCID != g.ref.CID || sh.Start != s.lo || sh.End != s.hi {
		release()
		g.o.log().Warn("pipeline: the weights fetched to settle a dispute hold other layers", "want", [2]int{s.lo, s.hi},
			"got", [2]int{sh.Start, sh.End})
		g.o.disputes.undecided(d, true)
		return nil
	}
	g.o.Local.addPrivate(sh)
	defer func() {
		g.o.Local.dropPrivate(sh)
		release()
	}()
	g.settling = true
	f, _ := g.judgeReplay(ctx, segs, flip, k, self, before, after)
	g.settling = false
	g.o.log().Info("pipeline: settled a dispute from verified weights", "model", g.ref.CID, "layers", [2]int{s.lo, s.hi},
		"decided", f != nil, "took", time.Since(start))
	g.o.disputes.undecided(d, f == nil)
	return f
}

// addPrivate serves sh to this peer's own routes: it is not announced.
func (s *StageServer) addPrivate(sh *Shard) {
	sh.private = true
	s.Add(sh)
}

// dropPrivate stops serving sh, waiting (bounded) for its sessions to end
// so that it may be unloaded.
func (s *StageServer) dropPrivate(sh *Shard) {
	s.mu.Lock()
	s.shards = slices.DeleteFunc(s.shards, func(x *Shard) bool { return x == sh })
	s.mu.Unlock()
	for end := time.Now().Add(settleWait); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if open, _ := sh.Model.Sessions(); open == 0 {
			return
		}
	}
}

// disputedNote marks the answer as run over disputed layers (see above).
func (g *generation) disputedNote() {
	if ds := g.o.disputes.over(g.ref.CID, g.res.Hops); len(ds) > 0 {
		g.res.Disputed = ds
		g.o.log().Warn("pipeline: an answer ran over disputed layers", "model", g.ref.CID, "disputed", fmt.Sprint(ds))
	}
}
