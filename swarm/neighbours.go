package swarm

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// A bounded table of neighbours. In a swarm of thousands a peer does not
// hold every other: it holds the peers it needs and up to
// Admission.Neighbours others, so that its probes (a budget over the
// table) run over connections it keeps, a round of them stays minutes
// long, and its table, connections and memory do not grow with the swarm.
// A peer is needed when it is this one, proven (Trust), protected
// (WithProtect: BMC peers, peers serving this peer's open requests), a
// bootstrap peer while this peer is isolated (bootstrap.go), or holds
// what this peer needs and the table lacks:
//   - layers of a model this peer serves or wanted in the last wantFor
//     (EnsureHolders: a route over it was asked for), while the table holds
//     fewer than holdersKept live holders of the model or the peer holds
//     layers no live holder in the table holds (within the model's layer
//     count: claims past it, or of another count, fill nothing);
//   - a role, while the table holds fewer than rolesKept live peers
//     serving it (of at most maxRolesKept role names: names are free).
//
// The rest of the swarm is found through the DHT's provider records,
// which EnsureHolders reads when the table does not cover a model.
const (
	holdersKept  = 32
	rolesKept    = 4
	maxRolesKept = 16
)

// wantFor is how long a model looked up stays wanted: its holders are
// admitted past the bound of neighbours, and records relayed about them
// are followed up.
const wantFor = 10 * time.Minute

// Want marks model (a CID or a name, as shards name it) wanted until
// now+wantFor: the table admits its holders past the bound of neighbours.
func (v *View) Want(model string, now time.Time) {
	if model == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.wanted == nil {
		v.wanted = map[string]time.Time{}
	}
	for m, until := range v.wanted {
		if now.After(until) {
			delete(v.wanted, m)
		}
	}
	if len(v.wanted) < maxWanted || v.wanted[model] != (time.Time{}) {
		v.wanted[model] = now.Add(wantFor)
	}
}

// maxWanted bounds the models wanted at once (a caller's typos must not
// grow the map).
const maxWanted = 256

// needs is what the table lacks, read once under v.mu.
type needs struct {
	v       *View
	now     time.Time
	own     map[string]bool
	holders map[string]int    // live holders in the table by model CID
	layers  map[string][]span // layers they hold, merged
	count   map[string]int    // the model's layer count: this peer's shard's, else the least a holder claims
	roles   map[string]int    // live peers in the table by role served
}

type span struct{ start, end int }

// needsLocked reads the table. v.mu must be held.
func (v *View) needsLocked(now time.Time) *needs {
	n := &needs{v: v, now: now, own: map[string]bool{}, holders: map[string]int{}, layers: map[string][]span{},
		count: map[string]int{}, roles: map[string]int{}}
	if me, ok := v.peers[v.self]; ok {
		for _, s := range me.Cap.Shards {
			n.own[s.ModelCID] = true
			n.count[s.ModelCID] = s.Layers
		}
	}
	for _, p := range v.peers {
		if !p.Alive || p.Self {
			continue
		}
		for _, s := range p.Cap.Shards {
			n.holders[s.ModelCID]++
			n.layers[s.ModelCID] = addSpan(n.layers[s.ModelCID], span{s.Start, s.End})
			if c, ok := n.count[s.ModelCID]; s.Layers > 0 && !n.own[s.ModelCID] && (!ok || s.Layers < c) {
				n.count[s.ModelCID] = s.Layers
			}
		}
		for _, r := range p.Cap.Roles {
			if _, ok := n.roles[r.Role]; ok || len(n.roles) < maxRolesKept {
				n.roles[r.Role]++
			}
		}
	}
	return n
}

// of reports whether the peer of c is needed (see above). held says the
// table holds it alive: then it is among what the table holds.
func (n *needs) of(c *gossip.Capability, held bool) bool {
	if c == nil {
		return false
	}
	self := 0
	if held {
		self = 1
	}
	for _, s := range c.Shards {
		if n.wants(s) && (n.holders[s.ModelCID]-self < holdersKept || !held && n.fills(s)) {
			return true
		}
	}
	for _, r := range c.Roles {
		if k, ok := n.roles[r.Role]; ok && k-self < rolesKept || !ok && len(n.roles) < maxRolesKept {
			return true
		}
	}
	return false
}

// fills reports whether s holds layers of its model no live holder in the
// table holds, within the model's layer count as the table knows it (a
// range past it, or a shard claiming another count, fills nothing: a
// record's claims are free).
func (n *needs) fills(s gossip.Shard) bool {
	if c, ok := n.count[s.ModelCID]; ok && s.Layers != c {
		return false
	}
	if s.Start < 0 || s.End <= s.Start || s.End > s.Layers {
		return false
	}
	return !within(n.layers[s.ModelCID], span{s.Start, s.End})
}

func (n *needs) wants(s gossip.Shard) bool {
	if n.own[s.ModelCID] {
		return true
	}
	for _, m := range []string{s.ModelCID, s.ModelName} {
		if until, ok := n.v.wanted[m]; ok && m != "" && !n.now.After(until) {
			return true
		}
	}
	return false
}

// addSpan merges sp into the sorted, disjoint spans ss.
func addSpan(ss []span, sp span) []span {
	if sp.end <= sp.start {
		return ss
	}
	out := make([]span, 0, len(ss)+1)
	for _, s := range ss {
		switch {
		case s.end < sp.start:
			out = append(out, s)
		case sp.end < s.start:
			out = append(out, sp)
			sp = s
		default:
			sp = span{min(s.start, sp.start), max(s.end, sp.end)}
		}
	}
	return append(out, sp)
}

// within reports whether the spans ss hold every layer of sp.
func within(ss []span, sp span) bool {
	for _, s := range ss {
		if s.start <= sp.start && sp.end <= s.end {
			return true
		}
	}
	return sp.end <= sp.start
}

// neighboursLocked counts the live rows of peers this one does not need.
// v.mu must be held.
func (v *View) neighboursLocked(n *needs) int {
	k := 0
	for _, p := range v.peers {
		if p.Alive && !v.keptAlive(p) && !n.of(&p.Cap, true) {
			k++
		}
	}
	return k
}

// roomLocked reports whether the bound of neighbours lets id, not in the
// table, in with its record c (nil: not known yet), in place of a
// neighbour if need be (mutual.go). v.mu must be held.
func (v *View) roomLocked(id peer.ID, c *gossip.Capability, now time.Time) bool {
	return v.freeRoomLocked(id, c, now) || v.swapVictimLocked(id, now) != nil
}

// freeRoomLocked is roomLocked without taking a neighbour's place.
func (v *View) freeRoomLocked(id peer.ID, c *gossip.Capability, now time.Time) bool {
	bound := v.opts.admission.Neighbours
	if bound < 0 || id == v.self || v.proven(id) || v.kept(id) {
		return true
	}
	n := v.needsLocked(now)
	return n.of(c, false) || v.neighboursLocked(n) < bound
}

// Room reports whether the table would take id, whose record is c (nil:
// not known yet), as far as the bound of neighbours goes: a peer it has
// or needs, or any while fewer than Neighbours others are alive in it. A
// record relayed about a peer it would not take is not followed up (no
// probe), and a peer that connects is not asked for its record unless
// the table would take it.
func (v *View) Room(id peer.ID, c *gossip.Capability, now time.Time) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if _, ok := v.peers[id]; ok {
		return true
	}
	return v.roomLocked(id, c, now)
}

// Full reports whether the table holds as many peers it does not need as
// its bound of neighbours: the swarm is larger than its neighbourhood.
func (v *View) Full() bool { return v.fullWith(0) }

// fullWith is Full counting pending more peers not yet alive (leads being
// probed: a newcomer's sample from its contact) as neighbours.
func (v *View) fullWith(pending int) bool {
	bound := v.opts.admission.Neighbours
	if bound < 0 {
		return false
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.neighboursLocked(v.needsLocked(time.Now()))+pending >= bound
}
