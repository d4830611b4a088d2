package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A stage bounds what one remote peer may hold on each shard it serves,
// so that one identity cannot take every slot: at most a share of the
// sessions (open, or waiting in the engine's queue for a slot), and at
// most a few more opens waiting for one of those to close. Beyond that an
// open is refused as busy at once. A session counts against the peer that
// opened it: the previous hop of a route (the originator, for the first
// hop), since a stage cannot tell who originated a route.
//
// The share binds only when the shard is contended: while the shard has a
// free slot and no other peer waits, a peer may borrow beyond its share
// (in a two-stage route every session at the second stage comes from the
// first, and its slots must not sit idle). A borrowed session must keep
// working: it closes after StageServer.BorrowedIdle (default 15 s) without
// a completed step, so slots borrowed while the stage was quiet come back
// when others need them.

const defaultBorrowedIdle = 15 * time.Second

// peerKey is one remote peer on one shard.
type peerKey struct {
	peer  string
	shard *Shard
}

// peerGate counts the sessions and waiting opens of each remote peer.
type peerGate struct {
	mu      sync.Mutex
	held    map[peerKey]int
	waiting map[peerKey]int
	freed   chan struct{} // closed when a session is released
}

// peerCapError is a refusal for being over a peer's share.
type peerCapError struct {
	held, share, waiting, queue int
	waited                      time.Duration
}

func (e *peerCapError) Error() string {
	if e.waited > 0 {
		return fmt.Sprintf("your peer holds %d sessions on these layers here (at most %d per peer) and none closed in %s",
			e.held, e.share, e.waited.Round(time.Second))
	}
	return fmt.Sprintf("your peer holds %d sessions on these layers here (at most %d per peer) and %d more opens already wait for one (at most %d)",
		e.held, e.share, e.waiting, e.queue)
}

// acquire takes one of k's share of sessions, waiting (as one of at most
// queue waiters of k) while k holds share, until ctx ends; spare reports,
// given the sessions the gate has let through on the shard (tickets, some
// perhaps still on their way to an engine slot), that the shard has a
// slot nobody is about to take, and then k may borrow one beyond its share
// if no other peer waits (borrowed is true). release gives it back.
func (g *peerGate) acquire(ctx context.Context, k peerKey, share, queue int, spare func(tickets int) bool) (release func(), borrowed bool, err error) {
	start := time.Now()
	g.mu.Lock()
	if g.held == nil {
		g.held, g.waiting = map[peerKey]int{}, map[peerKey]int{}
	}
	waited := false
	for g.held[k] >= share {
		if spare != nil && !g.othersWaitLocked(k) && spare(g.ticketsLocked(k.shard)) {
			borrowed = true
			break
		}
		if !waited {
			if g.waiting[k] >= queue {
				e := &peerCapError{held: g.held[k], share: share, waiting: g.waiting[k], queue: queue}
				g.mu.Unlock()
				return nil, false, e
			}
			g.waiting[k]++
			waited = true
		}
		if g.freed == nil {
			g.freed = make(chan struct{})
		}
		freed := g.freed
		g.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			g.mu.Lock()
			e := &peerCapError{held: g.held[k], share: share, waited: time.Since(start)}
			g.unwait(k)
			g.mu.Unlock()
			return nil, false, e
		}
		g.mu.Lock()
	}
	if waited {
		g.unwait(k)
	}
	g.held[k]++
	g.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { g.release(k) }) }, borrowed, nil
}

// ticketsLocked is how many sessions the gate has let through on shard
// (some may still be waiting for the engine's slot).
func (g *peerGate) ticketsLocked(shard *Shard) int {
	n := 0
	for o, h := range g.held {
		if o.shard == shard {
			n += h
		}
	}
	return n
}

// othersWaitLocked reports whether a peer other than k waits for a
// session on k's shard.
func (g *peerGate) othersWaitLocked(k peerKey) bool {
	for o, n := range g.waiting {
		if o.shard == k.shard && o.peer != k.peer && n > 0 {
			return true
		}
	}
	return false
}

func (g *peerGate) unwait(k peerKey) {
	if g.waiting[k]--; g.waiting[k] <= 0 {
		delete(g.waiting, k)
	}
}

func (g *peerGate) release(k peerKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[k]--; g.held[k] <= 0 {
		delete(g.held, k)
	}
	if g.freed != nil {
		close(g.freed)
		g.freed = nil
	}
}

// peerShare is how many sessions one remote peer may hold on sh, and how
// many more of its opens may wait for one.
func (s *StageServer) peerShare(sh *Shard) (share, queue int) {
	o := sh.Model.Options()
	share = s.PeerSessions
	if share <= 0 {
		// Two, so that one originator can run two generations through a
		// stage at once (or replay one while the other runs).
		share = min(max(2, o.Slots/4), max(o.Slots, 1))
	}
	switch queue = s.PeerQueue; {
	case queue < 0:
		queue = 0
	case queue == 0 && o.Queue > 0:
		queue = max(1, o.Queue/4)
	}
	return share, queue
}
