package gossip

import (
	"errors"
	"math"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
)

// Ledger is what the gate asks about a peer: whether this peer banned it
// on evidence it saw itself, and whether it did work this peer verified.
// swarm.Trust is one.
type Ledger interface {
	Banned(peer.ID) (bool, string)
	Proven(peer.ID) bool
}

// DefaultStreamGrace is how long a peer may send gossip without accepting
// this peer's own gossip stream.
const DefaultStreamGrace = 10 * time.Second

// Limits of the gate's bookkeeping.
const (
	maxGateEntries = 4096
	maxQuarantine  = time.Hour
	strikeMemory   = time.Hour // strikes are forgotten after this long without a new one
)

// Reasons a peer is gated.
const (
	GateBanned  = "banned"                    // the ledger bans it
	GateRefused = "refused our gossip stream" // it sends gossip but refuses ours
	GateInvalid = "sent invalid gossip"       // invalid messages while pubsub did not score it
	gateNone    = ""
)

// Gate keeps peers this peer will not hear out of its gossip and off its
// connections: peers its ledger bans, and peers that send gossip but
// refuse (or never open) this peer's own gossip stream, and peers that
// send invalid messages while pubsub does not score them.
//
// The second kind exists because go-libp2p-pubsub scores a peer only once
// this peer's outbound stream to it is open: a peer that refuses that
// stream is never scored (every score component, the application's
// included, reads 0), so neither invalid messages nor bans graylist it.
// The gate watches for it instead: it sees pubsub open and close outbound
// streams (as a raw tracer) and every incoming RPC (as the RPC inspector);
// a peer whose RPCs keep coming for the grace period with no outbound
// stream open is disconnected and refused connections for a quarantine
// that starts at the grace period and doubles with each repeat, up to an
// hour.
//
// For the same reason the gate counts the invalid messages (those pubsub's
// score would count: failed validation, bad or missing signatures) a peer
// sends while no outbound stream to it is open, in its grace period
// included: the count decays as the score's does, and once it weighs
// below the graylist threshold, as it would in the score (four messages),
// the peer is disconnected and quarantined like a refuser. Messages a
// validator only ignores (stale records, old sequence numbers) never
// count, so an honest peer's early heartbeats cost it nothing.
//
// Build it before the host, install it as the host's connection gater
// (libp2p.ConnectionGater), and give it to NewRouter with WithGate. Its
// zero value is not usable: use NewGate.
type Gate struct {
	ledger Ledger
	grace  time.Duration
	now    func() time.Time

	mu       sync.Mutex
	closer   func(peer.ID) // set by the router: disconnects a peer
	outbound map[peer.ID]bool
	waiting  map[peer.ID]*wait // RPCs seen while no outbound stream is open
	strikes  map[peer.ID]*strike
	invalid  map[peer.ID]*invalidCount // invalid messages while no outbound stream is open
}

// invalidCount is a decaying count of a peer's invalid messages.
type invalidCount struct {
	n  float64
	at time.Time
}

// wait is a run of RPCs from a peer with no outbound stream to it: a gap
// longer than the grace period starts a new run (the peer went quiet, or
// reconnected).
type wait struct{ first, last time.Time }

type strike struct {
	n     int
	last  time.Time
	until time.Time
	why   string // GateRefused or GateInvalid
}

// NewGate returns a gate that consults ledger (nil: no bans) and allows a
// peer grace (0: DefaultStreamGrace) to accept this peer's gossip stream.
func NewGate(ledger Ledger, grace time.Duration) *Gate {
	if grace <= 0 {
		grace = DefaultStreamGrace
	}
	return &Gate{ledger: ledger, grace: grace, now: time.Now, outbound: map[peer.ID]bool{},
		waiting: map[peer.ID]*wait{}, strikes: map[peer.ID]*strike{}, invalid: map[peer.ID]*invalidCount{}}
}

// Gated reports whether p is kept out now, and why.
func (g *Gate) Gated(p peer.ID) (bool, string) {
	if g == nil {
		return false, gateNone
	}
	if g.ledger != nil {
		if banned, _ := g.ledger.Banned(p); banned {
			return true, GateBanned
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.strikes[p]; ok && g.now().Before(s.until) {
		return true, s.why
	}
	return false, gateNone
}

func (g *Gate) gated(p peer.ID) bool { ok, _ := g.Gated(p); return ok }

// Strikes is how many times p was caught refusing this peer's gossip
// stream or sending invalid gossip unscored (within the last hour).
func (g *Gate) Strikes(p peer.ID) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.strikes[p]; ok {
		return s.n
	}
	return 0
}

// Ban disconnects p at once (the ledger has just banned it); until the
// ban ends the gate refuses its connections.
func (g *Gate) Ban(p peer.ID) {
	g.mu.Lock()
	closer := g.closer
	g.mu.Unlock()
	if closer != nil {
		closer(p)
	}
}

// setCloser is called by the router it serves.
func (g *Gate) setCloser(f func(peer.ID)) {
	g.mu.Lock()
	g.closer = f
	g.mu.Unlock()
}

var (
	errGateBanned  = errors.New("gossip: peer banned")
	errGateRefused = errors.New("gossip: peer refuses our gossip stream")
	errGateInvalid = errors.New("gossip: peer sent invalid gossip")
)

// inspect is the pubsub RPC inspector: it runs on every incoming RPC,
// before subscriptions, control messages or payloads are looked at.
func (g *Gate) inspect(from peer.ID, _ *pubsub.RPC) error {
	if g.ledger != nil {
		if banned, _ := g.ledger.Banned(from); banned {
			return errGateBanned
		}
	}
	g.mu.Lock()
	now := g.now()
	if s, ok := g.strikes[from]; ok && now.Before(s.until) {
		g.mu.Unlock()
		if s.why == GateInvalid {
			return errGateInvalid
		}
		return errGateRefused
	}
	if g.outbound[from] {
		g.mu.Unlock()
		return nil
	}
	w, ok := g.waiting[from]
	if !ok || now.Sub(w.last) > g.grace {
		if !ok && len(g.waiting) >= maxGateEntries {
			g.forgetOldestWaiting()
		}
		g.waiting[from] = &wait{first: now, last: now}
		g.mu.Unlock()
		return nil
	}
	w.last = now
	if now.Sub(w.first) < g.grace {
		g.mu.Unlock()
		return nil
	}
	// It has spoken for the whole grace period without taking our stream.
	delete(g.waiting, from)
	closer := g.strikeLocked(from, now, GateRefused)
	g.mu.Unlock()
	if closer != nil {
		closer(from)
	}
	return errGateRefused
}

// strikeLocked quarantines p for the grace period, doubled for each
// strike within the last hour, and returns the closer to disconnect it
// with; g.mu must be held.
func (g *Gate) strikeLocked(p peer.ID, now time.Time, why string) func(peer.ID) {
	s := g.strikes[p]
	if s == nil || now.Sub(s.last) > strikeMemory {
		if s == nil && len(g.strikes) >= maxGateEntries {
			g.forgetOldestStrike(now)
		}
		s = &strike{}
		g.strikes[p] = s
	}
	s.n++
	s.last = now
	s.why = why
	q := g.grace
	for i := 1; i < s.n && q < maxQuarantine; i++ {
		q *= 2
	}
	s.until = now.Add(min(q, maxQuarantine))
	return g.closer
}

// penalised reports whether pubsub's score counts a rejection for this
// reason (it does not for messages a validator ignored, throttled or
// never saw).
func penalised(reason string) bool {
	switch reason {
	case pubsub.RejectValidationIgnored, pubsub.RejectValidationThrottled, pubsub.RejectValidationQueueFull,
		pubsub.RejectBlacklstedPeer, pubsub.RejectBlacklistedSource:
		return false
	}
	return true
}

// rejected counts an invalid message from p while no outbound stream to
// p is open (pubsub does not score p then) and quarantines p once the
// count would put its score below the graylist threshold.
func (g *Gate) rejected(p peer.ID, reason string) {
	if p == "" || !penalised(reason) {
		return
	}
	g.mu.Lock()
	now := g.now()
	if s, ok := g.strikes[p]; g.outbound[p] || (ok && now.Before(s.until)) {
		g.mu.Unlock()
		return // pubsub scores it, or it is cut off already
	}
	c, ok := g.invalid[p]
	if !ok {
		if len(g.invalid) >= maxGateEntries {
			g.forgetOldestInvalid()
		}
		c = &invalidCount{at: now}
		g.invalid[p] = c
	}
	c.n = c.n*math.Pow(invalidMessageDecay, now.Sub(c.at).Seconds()) + 1
	c.at = now
	if invalidMessageWeight*c.n*c.n >= GraylistThreshold {
		g.mu.Unlock()
		return
	}
	delete(g.invalid, p)
	delete(g.waiting, p)
	closer := g.strikeLocked(p, now, GateInvalid)
	g.mu.Unlock()
	if closer != nil {
		closer(p)
	}
}

func (g *Gate) forgetOldestInvalid() {
	forgetOldest(g.invalid, func(c *invalidCount) time.Time { return c.at })
}

func (g *Gate) forgetOldestWaiting() {
	forgetOldest(g.waiting, func(w *wait) time.Time { return w.last })
}

// forgetOldest deletes the entry of m whose time (at) is earliest.
func forgetOldest[V any](m map[peer.ID]V, at func(V) time.Time) {
	var victim peer.ID
	var oldest time.Time
	for p, v := range m {
		if t := at(v); victim == "" || t.Before(oldest) {
			victim, oldest = p, t
		}
	}
	delete(m, victim)
}

func (g *Gate) forgetOldestStrike(now time.Time) {
	var victim peer.ID
	var oldest time.Time
	for p, s := range g.strikes {
		if now.Before(s.until) {
			continue
		}
		if victim == "" || s.last.Before(oldest) {
			victim, oldest = p, s.last
		}
	}
	if victim == "" { // every entry is in force: drop the one that ends first
		for p, s := range g.strikes {
			if victim == "" || s.until.Before(oldest) {
				victim, oldest = p, s.until
			}
		}
	}
	delete(g.strikes, victim)
}

// blacklist adapts the gate to pubsub's Blacklist: messages written or
// forwarded by a banned peer are dropped before validation, and a banned
// peer's new connections get no gossip stream.
type blacklist struct{ g *Gate }

func (b blacklist) Add(peer.ID) bool { return true }
func (b blacklist) Contains(p peer.ID) bool {
	if b.g.ledger == nil {
		return false
	}
	banned, _ := b.g.ledger.Banned(p)
	return banned
}

// The gate as a connection gater: gated peers are neither dialled nor
// accepted (checked again once the remote's identity is known).

// InterceptPeerDial implements connmgr.ConnectionGater.
func (g *Gate) InterceptPeerDial(p peer.ID) bool { return !g.gated(p) }

// InterceptAddrDial implements connmgr.ConnectionGater.
func (g *Gate) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return !g.gated(p) }

// InterceptAccept implements connmgr.ConnectionGater.
func (g *Gate) InterceptAccept(network.ConnMultiaddrs) bool { return true }

// InterceptSecured implements connmgr.ConnectionGater.
func (g *Gate) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return !g.gated(p)
}

// InterceptUpgraded implements connmgr.ConnectionGater.
func (g *Gate) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }

// tracer is the gate's view of pubsub's outbound streams. pubsub calls it
// synchronously from its event loop; it only updates two maps.
type tracer struct{ g *Gate }

func (t tracer) OnNewOutboundStream(p peer.ID, _ protocol.ID) {
	t.g.mu.Lock()
	t.g.outbound[p] = true
	delete(t.g.waiting, p)
	t.g.mu.Unlock()
}

func (t tracer) OnClosedOutboundStream(p peer.ID) {
	t.g.mu.Lock()
	delete(t.g.outbound, p)
	delete(t.g.waiting, p)
	t.g.mu.Unlock()
}

func (tracer) Join(string)                     {}
func (tracer) Leave(string)                    {}
func (tracer) Graft(peer.ID, string)           {}
func (tracer) Prune(peer.ID, string)           {}
func (tracer) ValidateMessage(*pubsub.Message) {}
func (tracer) DeliverMessage(*pubsub.Message)  {}
func (t tracer) RejectMessage(m *pubsub.Message, reason string) {
	t.g.rejected(m.ReceivedFrom, reason)
}
func (tracer) DuplicateMessage(*pubsub.Message)     {}
func (tracer) ThrottlePeer(peer.ID)                 {}
func (tracer) RecvRPC(*pubsub.RPC)                  {}
func (tracer) SendRPC(*pubsub.RPC, peer.ID)         {}
func (tracer) DropRPC(*pubsub.RPC, peer.ID)         {}
func (tracer) UndeliverableMessage(*pubsub.Message) {}
