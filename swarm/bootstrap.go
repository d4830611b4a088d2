package swarm

import (
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Bootstrap peers in a large swarm. Every peer joins through its
// bootstrap peers, and used to keep them in its table for good (never
// evicted, always probed, their connection kept) and redial them within
// 2 s of losing them. So a bootstrap peer was held by the whole swarm:
// at 1,000 simulated peers the seed held 999 connections, its connection
// manager trimmed them past conn_high, and every peer it cut redialled it
// at once: 210 KiB/s sent by the seed, idle (identify answering the
// redials, 36 KB/s of it), against 0.8 KiB/s for the median peer. Its
// cost grew with the swarm, the one cost that still did.
//
// Now a bootstrap peer (WithBootstrap) is kept only while this peer is
// isolated: its table holds fewer live neighbours than half its bound
// (the table of a newcomer, or of a peer cut off from most of the swarm,
// which rejoins through it). Past that it is a neighbour like any other,
// and a full table lets it go unless it holds this peer (its last answer
// said so, or it asked this peer something within heldFor). node redials
// bootstrap peers only while isolated too. A bootstrap peer is then held
// by its own neighbours and the newcomers of the last minutes, not by the
// swarm. A table with no bound (a BMC bridge's) is always isolated: it
// keeps them as before, as does every peer of a swarm smaller than half
// the bound.

// WithBootstrap names the swarm's bootstrap peers (see above). f is
// called with the table locked: it must be quick and must not call the
// view.
func WithBootstrap(f func(peer.ID) bool) Option { return func(o *options) { o.boot = f } }

// kept reports whether id is kept alive in the table: protected
// (WithProtect), or a bootstrap peer while this peer is isolated.
func (v *View) kept(id peer.ID) bool {
	return v.opts.protect != nil && v.opts.protect(id) ||
		v.opts.boot != nil && v.opts.boot(id) && v.isolated.Load()
}

// Isolated reports whether the table holds fewer live neighbours than
// half its bound (as of the last LetGoBootstrap): while it does, the
// bootstrap peers are kept and redialled.
func (v *View) Isolated() bool { return v.isolated.Load() }

// LetGoBootstrap notes whether the table is isolated and, when it is
// full, lets go of the bootstrap peers it holds but does not need
// (see above). It returns the peers let go.
func (v *View) LetGoBootstrap(now time.Time) []Peer {
	bound := v.opts.admission.Neighbours
	if bound < 0 {
		v.isolated.Store(true)
		return nil
	}
	v.mu.RLock()
	n := v.needsLocked(now)
	k := v.neighboursLocked(n)
	v.isolated.Store(k < (bound+1)/2)
	var maybe []peer.ID
	if v.opts.boot != nil && k >= bound {
		for id, p := range v.peers {
			if p.Alive && v.opts.boot(id) && !p.holdsUs && !v.keptAlive(p) && !n.of(&p.Cap, true) &&
				(v.holds == nil || !v.holds(id)) {
				maybe = append(maybe, id)
			}
		}
	}
	v.mu.RUnlock()
	// inUse is called with no lock held (WithInUse).
	maybe = slices.DeleteFunc(maybe, func(id peer.ID) bool { return v.opts.inUse != nil && v.opts.inUse(id) })
	if len(maybe) == 0 {
		return nil
	}
	var gone []Peer
	v.mu.Lock()
	for _, id := range maybe {
		// A row that changed meanwhile is looked at again next time.
		if p, ok := v.peers[id]; ok && p.Alive && !p.holdsUs {
			delete(v.peers, id)
			gone = append(gone, *p)
		}
	}
	v.mu.Unlock()
	v.sendForgotten(gone)
	return gone
}
