package swarm

import (
	"net/netip"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// Admission is how a full peer table chooses whom to keep. Identities cost
// nothing, so a sybil can announce thousands: the table keeps room for
// peers with work this peer verified itself (Trust.Proven), caps what one
// network may hold, and evicts from the most crowded network first, so
// that an honest newcomer gets in however many sybils knock.
//
//   - Peers without proven work ("unproven") may hold at most
//     UnprovenShare of MaxPeers entries.
//   - Unproven peers on one subnet (/24 for IPv4, /64 for IPv6, by the
//     address they answered from) may hold at most PerSubnet entries.
//   - To make room, the table evicts: dead peers first (the longest dead),
//     then an unproven peer from the subnet holding the most unproven
//     entries (the least recently seen there), and only when that subnet
//     holds at least two more than the newcomer's, so that sybils cannot
//     churn each other or a lone newcomer out. This peer itself, proven
//     peers and protected peers (WithProtect: e.g. BMC peers, peers
//     serving this peer's open requests; WithBootstrap: bootstrap peers
//     while this peer is isolated) are never evicted alive.
//   - Past Neighbours live rows of peers this peer does not need, a peer
//     it does not need is refused (see neighbours.go): the table is a
//     bounded neighbourhood, not a directory of the swarm.
type Admission struct {
	UnprovenShare float64 // default 0.5; 1: no reserve for proven peers
	PerSubnet     int     // default 64; negative: no cap
	Neighbours    int     // default 64; negative: no bound (a BMC bridge's table lists its room)
}

// Defaults of Admission.
const (
	DefaultUnprovenShare = 0.5
	DefaultPerSubnet     = 64
	DefaultNeighbours    = 64
)

func (a Admission) withDefaults() Admission {
	if a.UnprovenShare <= 0 || a.UnprovenShare > 1 || a.UnprovenShare != a.UnprovenShare {
		a.UnprovenShare = DefaultUnprovenShare
	}
	if a.PerSubnet == 0 {
		a.PerSubnet = DefaultPerSubnet
	}
	if a.Neighbours == 0 {
		a.Neighbours = DefaultNeighbours
	}
	return a
}

// Option configures a View, or the Service that keeps one.
type Option func(*options)

type options struct {
	trust     *Trust
	admission Admission
	protect   func(peer.ID) bool
	boot      func(peer.ID) bool // bootstrap.go
	stored    func() []string
	dead      func(peer.ID) bool
	inUse     func(peer.ID) bool
}

// WithTrust tells the table which peers did verified work (the rest are
// unproven; see Admission). Without it every peer is unproven.
func WithTrust(t *Trust) Option { return func(o *options) { o.trust = t } }

// WithAdmission sets the admission policy.
func WithAdmission(a Admission) Option { return func(o *options) { o.admission = a } }

// WithProtect names peers never evicted while alive. f is called with the
// table locked: it must be quick and must not call the view.
func WithProtect(f func(peer.ID) bool) Option { return func(o *options) { o.protect = f } }

// WithStored names the full models this peer stores and serves by
// shard transfer without serving any of their layers (a pulled model):
// their model keys are provided in the DHT beside those of the shards it
// serves, so peers looking for the model find it.
func WithStored(f func() []string) Option { return func(o *options) { o.stored = f } }

// WithInUse names the peers this one uses now (routes, role peers,
// open calls): they and the peers it used in the last two minutes are
// probed every heartbeat, so one that dies is noticed within
// Misses×Heartbeat (see Liveness). f is called often, with no lock held:
// it must be quick.
func WithInUse(f func(peer.ID) bool) Option { return func(o *options) { o.inUse = f } }

func (v *View) proven(id peer.ID) bool { return v.opts.trust != nil && v.opts.trust.Proven(id) }

// keptAlive reports whether p may not be evicted while alive.
func (v *View) keptAlive(p *Peer) bool {
	return p.Self || v.proven(p.ID) || v.kept(p.ID)
}

// Subnet is the network a peer is counted in by the caps on unproven or
// unverified peers: /24 (IPv4) or /64 (IPv6), loopback included; the zero
// prefix for an unknown address.
func Subnet(a netip.Addr) netip.Prefix { return subnet(a) }

// subnet is the network a peer is counted in: /24 (IPv4) or /64 (IPv6);
// the zero prefix for an unknown address.
func subnet(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	bits := 64
	if a.Is4() {
		bits = 24
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// admitLocked decides whether id, answering from addr with its record c,
// gets a row, and evicts whom that takes. v.mu must be held.
func (v *View) admitLocked(id peer.ID, c *gossip.Capability, addr netip.Addr, now time.Time) (evicted []Peer, ok bool) {
	if id == v.self {
		return nil, true
	}
	evict := func(p *Peer) {
		delete(v.peers, p.ID)
		evicted = append(evicted, *p)
	}
	if !v.freeRoomLocked(id, c, now) {
		victim := v.swapVictimLocked(id, now) // mutual.go
		if victim == nil {
			return nil, false
		}
		evict(victim)
	}
	adm := v.opts.admission
	if !v.proven(id) {
		net := subnet(addr)
		var unproven, inNet, onNet int
		var deadOnNet *Peer
		for _, p := range v.peers {
			if p.Self || v.proven(p.ID) {
				continue
			}
			unproven++
			if subnet(p.Addr) == net {
				inNet++
				if net.IsValid() {
					onNet++
					if !p.Alive && !v.protected(p) && (deadOnNet == nil || p.DeadSince.Before(deadOnNet.DeadSince)) {
						deadOnNet = p
					}
				}
			}
		}
		if adm.PerSubnet > 0 && onNet >= adm.PerSubnet {
			if deadOnNet == nil {
				return evicted, false
			}
			evict(deadOnNet)
			unproven--
			inNet--
		}
		if unproven >= int(adm.UnprovenShare*float64(v.live.MaxPeers)) {
			victim := v.unprovenVictimLocked(inNet)
			if victim == nil {
				return evicted, false
			}
			evict(victim)
		}
	}
	if len(v.peers) >= v.live.MaxPeers {
		victim := v.deadVictimLocked()
		if victim == nil && v.proven(id) {
			victim = v.unprovenVictimLocked(-1)
		}
		if victim == nil {
			return evicted, false
		}
		evict(victim)
	}
	return evicted, true
}

func (v *View) protected(p *Peer) bool { return v.kept(p.ID) }

// deadVictimLocked is the peer dead the longest (never this one).
func (v *View) deadVictimLocked() *Peer {
	var victim *Peer
	for _, p := range v.peers {
		if !p.Self && !p.Alive && (victim == nil || p.DeadSince.Before(victim.DeadSince)) {
			victim = p
		}
	}
	return victim
}

// unprovenVictimLocked picks the unproven peer to evict for a newcomer
// whose subnet already holds newcomerNet unproven entries (-1: a proven
// newcomer, which any unproven peer gives way to): a dead one if any,
// else the least recently seen in the subnet with the most unproven
// entries, if that subnet holds at least newcomerNet+2. Nil: nobody.
func (v *View) unprovenVictimLocked(newcomerNet int) *Peer {
	var dead *Peer
	counts := map[netip.Prefix]int{}
	for _, p := range v.peers {
		if v.keptAlive(p) {
			if !p.Self && !p.Alive && !v.proven(p.ID) && (dead == nil || p.DeadSince.Before(dead.DeadSince)) {
				dead = p // a protected peer that died may go
			}
			continue
		}
		if !p.Alive {
			if dead == nil || p.DeadSince.Before(dead.DeadSince) {
				dead = p
			}
			continue
		}
		counts[subnet(p.Addr)]++
	}
	if dead != nil {
		return dead
	}
	var crowded netip.Prefix
	most := 0
	for net, n := range counts {
		if n > most {
			crowded, most = net, n
		}
	}
	if most == 0 || most < newcomerNet+2 {
		return nil
	}
	var victim *Peer
	for _, p := range v.peers {
		if p.Alive && !v.keptAlive(p) && subnet(p.Addr) == crowded && (victim == nil || p.LastSeen.Before(victim.LastSeen)) {
			victim = p
		}
	}
	return victim
}
