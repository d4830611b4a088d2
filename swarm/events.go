package swarm

import (
	"sync"
	"sync/atomic"
)

// EventKind says what happened to a peer.
type EventKind int

const (
	PeerJoined    EventKind = iota + 1 // first heartbeat seen
	PeerChanged                        // it announces other roles, shards or addresses
	PeerDead                           // it missed its heartbeats
	PeerAlive                          // a dead peer beats again
	PeerForgotten                      // dead long enough to leave the table
)

func (k EventKind) String() string {
	switch k {
	case PeerJoined:
		return "joined"
	case PeerChanged:
		return "changed"
	case PeerDead:
		return "dead"
	case PeerAlive:
		return "alive"
	case PeerForgotten:
		return "forgotten"
	}
	return "unknown"
}

// Event is a change in the peer table.
type Event struct {
	Kind EventKind
	Peer Peer
}

// Subscription receives events through a bounded channel. When the reader
// falls behind, new events are dropped (and counted), never blocking the
// view.
type Subscription struct {
	c       chan Event
	dropped atomic.Uint64
	parent  *subscribers
	once    sync.Once
}

// C is the event channel. It is closed by Close.
func (s *Subscription) C() <-chan Event { return s.c }

// Dropped is how many events did not fit in the buffer.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close ends the subscription. It is idempotent.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.parent.remove(s)
		close(s.c)
	})
}

type subscribers struct {
	mu   sync.Mutex
	list []*Subscription
}

func (ss *subscribers) add(buf int) *Subscription {
	if buf <= 0 {
		buf = 64
	}
	s := &Subscription{c: make(chan Event, buf), parent: ss}
	ss.mu.Lock()
	ss.list = append(ss.list, s)
	ss.mu.Unlock()
	return s
}

func (ss *subscribers) remove(s *Subscription) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for i, x := range ss.list {
		if x == s {
			ss.list = append(ss.list[:i], ss.list[i+1:]...)
			return
		}
	}
}

func (ss *subscribers) send(e Event) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, s := range ss.list {
		select {
		case s.c <- e:
		default:
			s.dropped.Add(1)
		}
	}
}

// Subscribe returns a subscription with a buffer of buf events (default 64).
func (v *View) Subscribe(buf int) *Subscription { return v.subs.add(buf) }
