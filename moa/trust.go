package moa

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/swarm"
)

// Candidates are weighed by what this originator knows of them, not by
// what they announce:
//
//   - speed: the decode tok/s this peer measured of the candidate's own
//     answers (Trust, then this originator's stats); before any, the
//     announced tok/s but never more than unknownSpeed (an announcement
//     may make a peer look slower, never faster);
//   - a peer whose claim to its role model this peer has not verified is
//     weighed × unverifiedFactor, so a verified holder is asked first;
//   - a banned peer is not a candidate at all (swarm.View.Routable).
//
// Vetting is done in the background (vet.go): a holder not yet verified
// is challenged (Vet) when a question first finds it, and gets no prompt
// while a verified holder of its role exists, so a liar fails its
// challenge and never sees a prompt, and a check that stalls or a peer
// with no challenge handler costs the question nothing. A role whose
// holders are all unverified waits a little for their checks, then is
// skipped, or under UnverifiedAsk asked of a few of them (never as
// spotter or aggregator), their answers marked Unverified.

// measured is the decode speed this peer measured of id answering as
// role (0: none yet).
func (o *Originator) measured(id peer.ID, role string) float64 {
	if tr := o.View.Trust(); tr != nil {
		if v, ok := tr.Speed(id, swarm.TokPerSecKey(role)); ok {
			return v
		}
	}
	if ob, ok := o.stats.get(id); ok {
		return ob.tokps
	}
	return 0
}

// weigh sets c's weight and whether it is verified.
func (o *Originator) weigh(c *candidate) {
	speed := c.role.TokPerSec // this peer's own measurement of its own role
	if c.peer.Self {
		c.verified = true
	} else {
		tr := o.View.Trust()
		c.verified = tr != nil && tr.Verified(c.peer.ID, swarm.RoleClaim(c.role.ModelCID))
		if speed = o.measured(c.peer.ID, c.role.Role); speed <= 0 {
			speed = min(c.role.TokPerSec, unknownSpeed)
		}
	}
	c.weight = Weight(speed, c.peer.Cap.Thermal, c.peer.Cap.Load) * c.peer.Cap.PowerFactor()
	if !c.verified {
		c.weight *= unverifiedFactor
	}
}

// decodeRate measures a peer's decode speed from the tokens as they
// arrive here: (tokens − 1) over the time from the first to the last.
type decodeRate struct {
	n           int
	first, last time.Time
}

func (r *decodeRate) token() {
	now := time.Now()
	if r.n == 0 {
		r.first = now
	}
	r.last = now
	r.n++
}

// perSec is the measured tok/s (0: too few tokens to tell).
func (r *decodeRate) perSec() float64 {
	d := r.last.Sub(r.first)
	if r.n < 2 || d <= 0 {
		return 0
	}
	return float64(r.n-1) / d.Seconds()
}
