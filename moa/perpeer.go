package moa

import (
	"context"
	"fmt"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
)

// perPeer counts each remote peer's requests per role: those let through
// to the model (answering, or in the engine's queue for a slot), at most a
// share of the role's capacity, and those waiting here for one of them to
// end. A peer over its share queues here, not in the engine's queue, so
// that one identity flooding a role holds only its share of the slots and
// engine queue and others still get in; only when its own line here is
// full too is a request answered busy.
type perPeer struct {
	mu      sync.Mutex
	n       map[peerRole]int
	waiting map[peerRole]int
	freed   chan struct{} // closed when a request is released
}

type peerRole struct {
	peer peer.ID
	role string
}

// perPeerLimit is the share of capacity (slots + queue) one peer may hold
// at the model, and how many more of its requests may wait here for one
// of those to end: as many as the engine's queue holds.
func perPeerLimit(slots, queue int) (share, wait int) {
	return max(2, (slots+max(queue, 0))/4), max(queue, 0)
}

// peerBusyError is a refusal: the peer holds its share and its line here
// is full.
type peerBusyError struct {
	role                 string
	held, share, waiting int
}

func (e *peerBusyError) Error() string {
	return fmt.Sprintf("your peer already has %d %s requests in flight here (at most %d per peer) and %d more waiting (at most that many)",
		e.held, e.role, e.share, e.waiting)
}

// acquire counts a request of id for role, waiting while id holds share
// (as one of at most wait waiters of id) until ctx ends.
func (p *perPeer) acquire(ctx context.Context, id peer.ID, role string, share, wait int) error {
	p.mu.Lock()
	if p.n == nil {
		p.n, p.waiting = map[peerRole]int{}, map[peerRole]int{}
	}
	k := peerRole{id, role}
	waited := false
	for p.n[k] >= share {
		if !waited {
			if p.waiting[k] >= wait {
				e := &peerBusyError{role: role, held: p.n[k], share: share, waiting: p.waiting[k]}
				p.mu.Unlock()
				return e
			}
			p.waiting[k]++
			waited = true
		}
		if p.freed == nil {
			p.freed = make(chan struct{})
		}
		freed := p.freed
		p.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			p.mu.Lock()
			p.unwaitLocked(k)
			p.mu.Unlock()
			return ctx.Err()
		}
		p.mu.Lock()
	}
	if waited {
		p.unwaitLocked(k)
	}
	p.n[k]++
	p.mu.Unlock()
	return nil
}

func (p *perPeer) unwaitLocked(k peerRole) {
	if p.waiting[k]--; p.waiting[k] <= 0 {
		delete(p.waiting, k)
	}
}

func (p *perPeer) release(id peer.ID, role string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := peerRole{id, role}
	if p.n[k]--; p.n[k] <= 0 {
		delete(p.n, k)
	}
	if p.freed != nil {
		close(p.freed)
		p.freed = nil
	}
}
