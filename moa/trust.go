package moa

import (
	"context"
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
// Vetting is done before use: a peer not yet verified is challenged (Vet)
// just before its first real question, so a liar fails its challenge and
// never sees a prompt. A peer this peer cannot check (it has no copy of
// the model to check with) is asked, and its answer says Unverified.

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

// vetted runs Vet on a candidate not yet verified, and notes whether it
// is verified now.
func (o *Originator) vetted(ctx context.Context, c *candidate) error {
	if c.verified || o.Vet == nil {
		return nil
	}
	claim := swarm.RoleClaim(c.role.ModelCID)
	vctx, cancel := context.WithTimeout(ctx, vetWait)
	err := o.Vet(vctx, c.peer.ID, claim)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Skipped only if its check banned it (the ledger's word): a peer
		// that went dead meanwhile is asked, and fails as a dead peer does.
		if tr := o.View.Trust(); tr != nil {
			if banned, _ := tr.Banned(c.peer.ID); banned {
				return err
			}
		}
		// Not proven a liar: slow to check, busy, or reached through a
		// relay whose limits a check's trace exceeds. Asked, weighed low,
		// and its answer says it is unverified; a check still running goes
		// on and bans it if it lies.
		o.log().Info("agent asked unverified: its check did not finish", "peer", c.peer.ID, "model", claim.Model, "err", err)
		c.verified = false
		return nil
	}
	tr := o.View.Trust()
	c.verified = tr != nil && tr.Verified(c.peer.ID, claim)
	return nil
}

// vetWait is how long a question waits for a role peer's check before it
// asks the peer unverified.
const vetWait = 15 * time.Second

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
