package moa

import (
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
)

// perPeer counts each remote peer's requests in flight per role
// (answering or waiting for a slot), so that one identity cannot take a
// role's whole capacity: it gets at most a quarter of the slots and queue
// together (and at least 2).
type perPeer struct {
	mu sync.Mutex
	n  map[peerRole]int
}

type peerRole struct {
	peer peer.ID
	role string
}

// perPeerLimit is the share of capacity (slots + queue) one peer may hold.
func perPeerLimit(slots, queue int) int {
	return max(2, (slots+max(queue, 0))/4)
}

// acquire counts a request of id for role, unless it already holds limit.
func (p *perPeer) acquire(id peer.ID, role string, limit int) (held int, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == nil {
		p.n = map[peerRole]int{}
	}
	k := peerRole{id, role}
	if p.n[k] >= limit {
		return p.n[k], false
	}
	p.n[k]++
	return p.n[k], true
}

func (p *perPeer) release(id peer.ID, role string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := peerRole{id, role}
	if p.n[k]--; p.n[k] <= 0 {
		delete(p.n, k)
	}
}
