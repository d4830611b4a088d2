package swarm

import "github.com/libp2p/go-libp2p/core/peer"

// Routable reports whether a strategy may route work through id: the view
// holds it alive, no call found it hung since it last answered a ping
// (MarkHung), this peer's ledger (WithTrust) does not ban it, and no
// authority outside the view (WithDead: a BMC's table) declares it dead.
//
// It is the one answer every strategy (MoA candidates, pipeline routes,
// their standby and replanned routes, the check that a hop died) shares.
// What only some of them ask stays at their sites, beside it: whether a
// record takes new work (this peer's own roles and stages are used
// anyway), the peers a generation saw fail, and relays too limited for
// a pipeline's traffic.
func (v *View) Routable(id peer.ID) bool {
	if !v.Alive(id) || v.Hung(id) {
		return false
	}
	if t := v.opts.trust; t != nil {
		if banned, _ := t.Banned(id); banned {
			return false
		}
	}
	return v.opts.dead == nil || !v.opts.dead(id)
}

// Trust returns this peer's ledger the view was built with (WithTrust),
// which strategies read speeds and verified claims from and record
// failures in: nil when there is none, or when v is nil.
func (v *View) Trust() *Trust {
	if v == nil {
		return nil
	}
	return v.opts.trust
}

// WithDead names the peers an authority outside the view declares dead
// (a BMC's table): never Routable, even while their heartbeats still
// arrive. It is set once, when the view is built; dead is called on
// routing decisions, concurrently and without the view's lock: it must
// be quick, and returns false while the authority has no table in force.
func WithDead(dead func(peer.ID) bool) Option { return func(o *options) { o.dead = dead } }
