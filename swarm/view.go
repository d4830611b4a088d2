package swarm

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// Peer is one row of the peer table.
type Peer struct {
	ID        peer.ID
	Cap       gossip.Capability // the latest verified record
	Alive     bool
	Self      bool
	FirstSeen time.Time
	LastSeen  time.Time
	DeadSince time.Time // zero while alive
	// Addr is the IP address this peer was last seen answering from (its
	// connection to this peer); zero when unknown.
	Addr netip.Addr

	until   time.Time // alive until then unless it answers again (Sweep)
	sealed  []byte    // Cap as its peer signed it (nil: not kept)
	holdsUs bool      // its last answer said its table holds this peer (mutual.go)
}

// Liveness parameters of a View and of the Service that keeps it.
//
// A peer is alive while it answers: its own record over its own
// connection, a probe, or the record exchange. The peers this one uses
// (see WithInUse) are probed every Heartbeat and are dead after Misses
// failed probes in a row; the other peers of the table are probed on a
// budget of ProbeRate probes per second whatever the table's size, and
// at once when their last connection closes. A record is published when
// it changes (at most once per Heartbeat), and again every Refresh if set;
// the probes of peers not in use check their records, taking newer ones.
type Liveness struct {
	Heartbeat   time.Duration // probe interval of the peers in use, and the fastest records go out; default 1 s
	Misses      int           // failed probes in a row before a peer is dead; default 2
	Refresh     time.Duration // an unchanged record is published again after this; 0 (default): never
	ProbeRate   float64       // probes per second of the peers not in use; default 0.5
	ForgetAfter time.Duration // a dead peer is dropped from the table after this; default 10 min
	MaxPeers    int           // table size bound; default 4096
}

// Defaults of Liveness.
const (
	DefaultHeartbeat = time.Second
	DefaultMisses    = 2
	DefaultProbeRate = 0.5
)

func (l Liveness) withDefaults() Liveness {
	if l.Heartbeat <= 0 {
		l.Heartbeat = DefaultHeartbeat
	}
	if l.Misses <= 0 {
		l.Misses = DefaultMisses
	}
	l.Refresh = max(l.Refresh, 0)
	if !(l.ProbeRate > 0) {
		l.ProbeRate = DefaultProbeRate
	}
	if l.ForgetAfter <= 0 {
		l.ForgetAfter = 10 * time.Minute
	}
	if l.MaxPeers <= 0 {
		l.MaxPeers = 4096
	}
	return l
}

// DeadAfter is how long a peer in use may go unanswered before it is
// dead: Misses probes of Heartbeat. A record alone keeps a peer alive
// this long (a peer the Service probes holds a longer lease: see lease).
func (l Liveness) DeadAfter() time.Duration {
	l = l.withDefaults()
	return time.Duration(l.Misses) * l.Heartbeat
}

// View is the peer table. It is safe for concurrent use.
type View struct {
	self peer.ID
	live Liveness
	opts options

	mu     sync.RWMutex
	peers  map[peer.ID]*Peer
	wanted map[string]time.Time // models wanted, until when (neighbours.go)
	subs   subscribers
	hung   hungSet // peers found hung (hung.go)
	// holds reports whether a peer asked this one anything within
	// heldFor (the Service's record exchange; nil: none known). It is
	// called with mu held.
	holds func(peer.ID) bool
	// isolated: fewer live neighbours than half the bound (bootstrap.go).
	isolated atomic.Bool
}

// NewView returns an empty table for the peer self.
func NewView(self peer.ID, live Liveness, opts ...Option) *View {
	o := options{}
	for _, f := range opts {
		f(&o)
	}
	o.admission = o.admission.withDefaults()
	v := &View{self: self, live: live.withDefaults(), opts: o, peers: make(map[peer.ID]*Peer)}
	v.isolated.Store(true) // an empty table
	return v
}

// Liveness returns the parameters the view judges peers by.
func (v *View) Liveness() Liveness { return v.live }

// Observe records a verified capability heartbeat received at now, with
// the evidence that its peer answered this peer (see ObserveFrom).
func (v *View) Observe(c *gossip.Capability, now time.Time) { v.ObserveFrom(c, now, netip.Addr{}) }

// ObserveFrom records a verified capability heartbeat received at now
// from a peer that this peer has seen answer: the record came over the
// peer's own connection, or the peer answered a probe, or it is alive in
// the table already. addr is the IP address it answered from (zero:
// unknown, or unchanged). A record relayed by others about a peer that is
// not alive here is no such evidence: the Service probes that peer first
// (see Service), so replayed records never make a silent peer alive.
//
// A peer not in the table is admitted by the admission policy (see
// Admission); it may evict another, or be refused.
func (v *View) ObserveFrom(c *gossip.Capability, now time.Time, addr netip.Addr) {
	v.observe(c, nil, now, addr, 0)
}

// observe is ObserveFrom with the record's sealed bytes (nil: unknown) and
// a lease: the peer is alive until now+max(lease, DeadAfter) unless it
// answers again.
func (v *View) observe(c *gossip.Capability, sealed []byte, now time.Time, addr netip.Addr, lease time.Duration) {
	id, err := peer.Decode(c.PeerID)
	if err != nil {
		return // validated records always decode; be defensive anyway
	}
	addr = addr.Unmap()
	v.mu.Lock()
	p, ok := v.peers[id]
	if ok && c.Seq < p.Cap.Seq {
		v.mu.Unlock()
		return
	}
	var ev *Event
	var evicted []Peer
	switch {
	case !ok:
		var admitted bool
		if evicted, admitted = v.admitLocked(id, c, addr, now); !admitted {
			v.mu.Unlock()
			v.sendForgotten(evicted)
			return
		}
		p = &Peer{ID: id, Self: id == v.self, FirstSeen: now}
		v.peers[id] = p
		ev = &Event{Kind: PeerJoined}
	case !p.Alive:
		ev = &Event{Kind: PeerAlive}
	case changed(&p.Cap, c):
		ev = &Event{Kind: PeerChanged}
	}
	if sealed != nil || c.Seq != p.Cap.Seq {
		p.sealed = sealed
	}
	p.Cap = *c
	p.Alive = true
	p.LastSeen = now
	if until := now.Add(max(lease, v.live.DeadAfter())); until.After(p.until) {
		p.until = until
	}
	p.DeadSince = time.Time{}
	if addr.IsValid() {
		p.Addr = addr
	}
	var snapshot Peer
	if ev != nil {
		snapshot = *p
	}
	v.mu.Unlock()
	v.sendForgotten(evicted)
	if ev != nil {
		ev.Peer = snapshot
		v.subs.send(*ev)
	}
}

// Sweep marks peers silent for too long as dead and forgets long-dead ones.
// It returns the peers that died in this sweep.
func (v *View) Sweep(now time.Time) []peer.ID {
	deadAfter := v.live.DeadAfter()
	var died []Peer
	var forgotten []Peer
	v.mu.Lock()
	for id, p := range v.peers {
		if p.Self {
			continue
		}
		until := p.until
		if until.IsZero() {
			until = p.LastSeen.Add(deadAfter)
		}
		if p.Alive && now.After(until) {
			p.Alive = false
			p.DeadSince = now
			died = append(died, *p)
		} else if !p.Alive && now.Sub(p.DeadSince) > v.live.ForgetAfter {
			delete(v.peers, id)
			forgotten = append(forgotten, *p)
		}
	}
	v.mu.Unlock()
	ids := make([]peer.ID, 0, len(died))
	for _, p := range died {
		ids = append(ids, p.ID)
		v.subs.send(Event{Kind: PeerDead, Peer: p})
	}
	for _, p := range forgotten {
		v.subs.send(Event{Kind: PeerForgotten, Peer: p})
	}
	return ids
}

func (v *View) sendForgotten(ps []Peer) {
	for _, p := range ps {
		v.subs.send(Event{Kind: PeerForgotten, Peer: p})
	}
}

// Peers returns every known peer, this one first, then by ID.
func (v *View) Peers() []Peer {
	v.mu.RLock()
	out := make([]Peer, 0, len(v.peers))
	for _, p := range v.peers {
		out = append(out, *p)
	}
	v.mu.RUnlock()
	slices.SortFunc(out, func(a, b Peer) int {
		if a.Self != b.Self {
			if a.Self {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID.String(), b.ID.String())
	})
	return out
}

// Get returns one peer.
func (v *View) Get(id peer.ID) (Peer, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	p, ok := v.peers[id]
	if !ok {
		return Peer{}, false
	}
	return *p, true
}

// Alive reports whether the view holds id as a live peer.
func (v *View) Alive(id peer.ID) bool {
	p, ok := v.Get(id)
	return ok && p.Alive
}

// RoleHolder is a live peer serving a role.
type RoleHolder struct {
	Peer Peer
	Role gossip.Role
}

// ByRole returns the live peers serving role, fastest first.
func (v *View) ByRole(role string) []RoleHolder {
	var out []RoleHolder
	for _, p := range v.Peers() {
		if !p.Alive {
			continue
		}
		for _, r := range p.Cap.Roles {
			if r.Role == role {
				out = append(out, RoleHolder{Peer: p, Role: r})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b RoleHolder) int {
		switch {
		case a.Role.TokPerSec > b.Role.TokPerSec:
			return -1
		case a.Role.TokPerSec < b.Role.TokPerSec:
			return 1
		}
		return 0
	})
	return out
}

// ShardHolder is a live peer holding a layer range of a model.
type ShardHolder struct {
	Peer  Peer
	Shard gossip.Shard
}

// HoldersOf returns the live peers holding layers of model (matched by CID
// or by name), ordered by the first layer they hold.
func (v *View) HoldersOf(model string) []ShardHolder {
	var out []ShardHolder
	for _, p := range v.Peers() {
		if !p.Alive {
			continue
		}
		for _, s := range p.Cap.Shards {
			if s.ModelCID == model || (s.ModelName != "" && s.ModelName == model) {
				out = append(out, ShardHolder{Peer: p, Shard: s})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b ShardHolder) int { return a.Shard.Start - b.Shard.Start })
	return out
}

// changed reports whether a record says something new beyond its sequence
// number, clock and load.
func changed(old, c *gossip.Capability) bool {
	return !slices.Equal(old.Addrs, c.Addrs) || !slices.Equal(old.Roles, c.Roles) ||
		!slices.Equal(old.Shards, c.Shards) || !old.Platform.Equal(c.Platform) || old.Thermal != c.Thermal
}
