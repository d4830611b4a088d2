package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/swarm"
)

// Who can check a route. A spot check (a second route, a probe's second
// holder, this peer's own copy) needs another holder of every layer it
// checks: layers that one remote peer alone holds, and this peer not,
// are that peer's word in any answer, plain or speculative (a last hop
// that accepts every draft there goes unseen). The answer names them
// (answer.Pipeline.Unchecked, a trace event "unchecked"), and with
// Originator.RequireChecked the originator refuses such a route before
// the prompt leaves it.

// ErrUnchecked: the route has layers nobody but the peer that runs them
// holds, and the originator requires checked routes.
var ErrUnchecked = errors.New("pipeline: layers nobody can check")

// UncheckedError is a route refused for its unchecked layers.
type UncheckedError struct {
	Ranges []Hop // each with the one peer that holds it
}

func (e *UncheckedError) Error() string {
	return fmt.Sprintf("%v: %s; no other live peer holds them and this peer has no copy (pipeline.require_checked)",
		ErrUnchecked, rangesText(e.Ranges))
}

func (e *UncheckedError) Unwrap() error { return ErrUnchecked }

func rangesText(rs []Hop) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("layers [%d,%d) on %s", r.Start, r.End, short(r.Peer)))
	}
	return strings.Join(out, ", ")
}

// unchecked lists the layers of hops that no peer but the hop's own holds
// among the live holders not failed, and this peer has no copy of: runs of
// such layers within each remote hop, with the hop's peer.
func (o *Originator) unchecked(ref ModelRef, holders []swarm.ShardHolder, failed map[string]time.Time, hops []Hop) []Hop {
	self := o.Host.ID().String()
	ex := o.excluded(failed)
	hs := o.routeHolders(ref, holders)
	covered := func(p string, l int) bool {
		if o.Local != nil && o.Local.find(ref.CID, l, l+1) != nil {
			return true
		}
		for _, h := range hs {
			if h.Peer != p && h.Start <= l && l < h.End && (h.Peer == self || !ex(h.Peer)) {
				return true
			}
		}
		return false
	}
	var out []Hop
	for _, h := range hops {
		if h.Peer == self {
			continue
		}
		run := -1
		for l := h.Start; l <= h.End; l++ {
			bare := l < h.End && !covered(h.Peer, l)
			switch {
			case bare && run < 0:
				run = l
			case !bare && run >= 0:
				out = append(out, Hop{Peer: h.Peer, Start: run, End: l})
				run = -1
			}
		}
	}
	return out
}

// refuseUnchecked is the error for a route with unchecked layers when
// the originator requires checked ones (nil otherwise).
func (o *Originator) refuseUnchecked(ref ModelRef, holders []swarm.ShardHolder, failed map[string]time.Time, hops []Hop) error {
	if !o.RequireChecked {
		return nil
	}
	if u := o.unchecked(ref, holders, failed, hops); len(u) > 0 {
		return &UncheckedError{Ranges: u}
	}
	return nil
}

// noteUnchecked records in the answer the layers of route hops nobody can
// check, and refuses the route where the originator requires checked ones.
func (g *generation) noteUnchecked(hops []Hop) error {
	u := g.o.unchecked(g.ref, g.holders, g.failed, hops)
	if len(u) == 0 {
		return nil
	}
	if g.o.RequireChecked {
		return &UncheckedError{Ranges: u}
	}
	fresh := false
	for _, r := range u {
		if !slices.Contains(g.res.Unchecked, r) {
			g.res.Unchecked = append(g.res.Unchecked, r)
			fresh = true
		}
	}
	if fresh {
		g.o.log().Warn("pipeline: layers of the route nobody else holds: the answer is unchecked there", "model", g.ref.CID,
			"layers", rangesText(u))
		g.trace(answer.Trace{Kind: "unchecked", AtToken: len(g.res.Tokens), Route: u,
			Reason: "no other live peer holds these layers and this peer has no copy: nothing can check them"})
	}
	return nil
}
