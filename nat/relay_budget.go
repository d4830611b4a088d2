package nat

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
)

// DefaultRelayUnproven is nat.relay_unproven's default: relay slots held
// by peers that have not proven work, and open circuits beyond which such
// a peer opens no more. libp2p's relay holds up to 128 slots in all, so
// proven peers keep at least 96 of them.
const DefaultRelayUnproven = 32

// unprovenBudget is the share of this peer's relay that peers which have
// not proven work to it may use (a challenge passed: swarm.Trust.Proven).
// Saying the swarm's protocols is all a member needs to show, and anyone
// can; without a budget, strangers could hold every slot of the relay and
// squeeze out the peers doing the swarm's work. A proven peer is never
// refused by the budget; an unproven one gets a slot while fewer than
// limit unproven peers hold one, and a circuit (as its source) while fewer
// than limit circuits are open through the relay. A proven peer may open
// a circuit to an unproven one: that is how an unproven peer behind NAT
// is reached to be challenged. A private swarm's relay has no budget:
// every peer that got through holds the swarm key.
type unprovenBudget struct {
	limit int              // <0: none at all; 0: DefaultRelayUnproven
	open  func() int64     // circuits open through the relay now
	ttl   time.Duration    // how long a slot lasts unless renewed; 0: libp2p's default
	now   func() time.Time // nil: time.Now

	mu   sync.Mutex
	held map[peer.ID]time.Time // unproven peers holding a slot -> when it expires
}

func (b *unprovenBudget) max() int {
	switch {
	case b.limit < 0:
		return 0
	case b.limit == 0:
		return DefaultRelayUnproven
	}
	return b.limit
}

func (b *unprovenBudget) clock() time.Time {
	if b.now != nil {
		return b.now()
	}
	return time.Now()
}

// reserve reports whether unproven peer p may take (or renew) a slot, and
// counts it. A slot ends when it expires or when p disconnects (the relay
// drops it then); proven is asked again of every holder, so a peer that
// proves itself leaves the budget.
func (b *unprovenBudget) reserve(h host.Host, p peer.ID, proven func(peer.ID) bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock()
	if b.held == nil {
		b.held = map[peer.ID]time.Time{}
	}
	for id, until := range b.held {
		if now.After(until) || (h != nil && h.Network().Connectedness(id) != network.Connected) || (proven != nil && proven(id)) {
			delete(b.held, id)
		}
	}
	ttl := b.ttl
	if ttl == 0 {
		ttl = relay.DefaultResources().ReservationTTL
	}
	if _, ok := b.held[p]; !ok && len(b.held) >= b.max() {
		return false
	}
	b.held[p] = now.Add(ttl)
	return true
}

// connect reports whether an unproven peer may open one more circuit.
func (b *unprovenBudget) connect() bool {
	if b.open == nil {
		return b.max() > 0
	}
	return b.open() < int64(b.max())
}

// holders is how many unproven peers hold a slot by the budget's count.
func (b *unprovenBudget) holders() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}
