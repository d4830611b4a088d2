package moa

import (
	"context"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
)

// maxCallsPerPeer bounds the MoA calls one originator has open to one
// peer at once, for all roles together: within the streams one peer may
// open to another (AddLimits: 32) and within what a role peer with the
// default engine lets one peer hold and line up (perPeerLimit: 5 + 16).
// Questions beyond it wait here, in this peer, for one of those calls to
// end, instead of being refused by the role peer.
const maxCallsPerPeer = 16

// peerCalls counts the calls in flight to each peer.
type peerCalls struct {
	mu    sync.Mutex
	n     map[peer.ID]int
	freed chan struct{} // closed when a call ends
}

// acquire takes a place for a call to id, waiting for one until ctx ends.
func (p *peerCalls) acquire(ctx context.Context, id peer.ID) error {
	p.mu.Lock()
	if p.n == nil {
		p.n = map[peer.ID]int{}
	}
	for p.n[id] >= maxCallsPerPeer {
		if p.freed == nil {
			p.freed = make(chan struct{})
		}
		freed := p.freed
		p.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
	p.n[id]++
	p.mu.Unlock()
	return nil
}

// release gives back a place taken by acquire.
func (p *peerCalls) release(id peer.ID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[id]--; p.n[id] <= 0 {
		delete(p.n, id)
	}
	if p.freed != nil {
		close(p.freed)
		p.freed = nil
	}
}
