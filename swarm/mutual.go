package swarm

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Mutual neighbours. A peer joining a swarm larger than its bound of
// neighbours finds the tables of the peers it probes full: they answer
// but do not take it, so it holds them and they do not hold it, and each
// such pair costs both a connection for one table's sake (at 300
// simulated peers joining one every 100 ms, 46 of a peer's 157
// connections held for its own table only and 46 for the other's). So a
// peer whose table is full takes a peer that holds it (asked it within
// heldFor: a newcomer probing its leads, a peer whose table it is in) in
// place of a neighbour that does not hold it: one whose last answer to
// this peer's questions said so (recordsAnswer.Held), that has not asked
// it anything within heldFor, and that it does not need, keep or use.
// The evicted peer loses nothing (its table did not hold this one), the
// taken one gains a neighbour that probes it back, and tables become
// mutual: a connection serves both. The answer says whether the
// answerer's table holds the asker, so the asker learns it.

// holdsUs marks whether id's last answer said its table holds this peer.
func (v *View) holdsUs(id peer.ID, held bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if p, ok := v.peers[id]; ok {
		p.holdsUs = held
	}
}

// swapVictimLocked returns a neighbour that id, which holds this peer,
// may take the place of in a full table (see above), or nil. v.mu must
// be held.
func (v *View) swapVictimLocked(id peer.ID, now time.Time) *Peer {
	if v.opts.admission.Neighbours < 0 || v.holds == nil || !v.holds(id) {
		return nil
	}
	n := v.needsLocked(now)
	for _, p := range v.peers {
		if p.Alive && !p.holdsUs && !v.keptAlive(p) && !n.of(&p.Cap, true) && !v.holds(p.ID) {
			return p
		}
	}
	return nil
}
