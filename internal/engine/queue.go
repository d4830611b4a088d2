package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrQueueFull means every slot is in use and Options.Queue requests are
// already waiting for one. It matches ErrCapacity.
var ErrQueueFull = fmt.Errorf("%w and the wait queue is full", ErrCapacity)

// QueueStats is the slot queue of a model.
type QueueStats struct {
	Waiting  int           // requests waiting for a slot now
	Limit    int           // the most that may wait
	Waited   int64         // requests that had to wait, since load
	WaitTime time.Duration // their total wait
	MaxWait  time.Duration // the longest wait
}

// Add sums two models' queues.
func (q QueueStats) Add(o QueueStats) QueueStats {
	return QueueStats{Waiting: q.Waiting + o.Waiting, Limit: q.Limit + o.Limit, Waited: q.Waited + o.Waited,
		WaitTime: q.WaitTime + o.WaitTime, MaxWait: max(q.MaxWait, o.MaxWait)}
}

// Queue reports the slot queue.
func (m *Model) Queue() QueueStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queue
	q.Limit = max(m.opts.Queue, 0)
	return q
}

// AgingPerSecond is how much a waiting request's rank rises each second
// it waits: the lowest rank (-1) is served at most 20 s after the
// highest (+1) would be, so a request of the lowest rank still is.
const AgingPerSecond = 0.1

type priorityKey struct{}

// WithPriority gives the slot requests made under ctx a rank (default 0),
// in [-1, 1]: when every slot is busy, the waiter of the highest rank
// (aged by the time it waited, AgingPerSecond) takes the next free one,
// ties in arrival order.
func WithPriority(ctx context.Context, rank float64) context.Context {
	return context.WithValue(ctx, priorityKey{}, min(max(rank, -1), 1))
}

func priorityOf(ctx context.Context) float64 {
	p, _ := ctx.Value(priorityKey{}).(float64)
	return p
}

// waiter is a request waiting for a slot.
type waiter struct {
	rank  float64
	since time.Time
}

func (w *waiter) aged(now time.Time) float64 {
	return w.rank + AgingPerSecond*now.Sub(w.since).Seconds()
}

// firstLocked reports whether w (nil: a request not waiting yet, of rank
// at now) comes before every waiter.
func (m *Model) firstLocked(w *waiter, rank float64, now time.Time) bool {
	if w != nil {
		rank = w.aged(now)
	}
	for _, o := range m.waiters {
		if o == w {
			continue
		}
		r := o.aged(now)
		if r > rank || r == rank && (w == nil || o.since.Before(w.since)) {
			return false
		}
	}
	return true
}

// AcquireSession is NewSession that waits, while ctx allows, for a slot
// when all are busy, among at most Options.Queue waiters; beyond that it
// fails at once with ErrQueueFull. The waiter of the highest rank
// (WithPriority) takes the next slot that frees, and a new request does
// not take a slot before a waiter that ranks as high.
func (m *Model) AcquireSession(ctx context.Context) (*Session, error) {
	rank := priorityOf(ctx)
	var me *waiter
	defer func() {
		if me != nil {
			d := time.Since(me.since)
			m.mu.Lock()
			m.waiters = slices.DeleteFunc(m.waiters, func(w *waiter) bool { return w == me })
			m.queue.Waiting--
			m.queue.Waited++
			m.queue.WaitTime += d
			m.queue.MaxWait = max(m.queue.MaxWait, d)
			m.wakeLocked() // the next waiter may be first now
			m.mu.Unlock()
		}
	}()
	for {
		m.mu.Lock()
		first := m.firstLocked(me, rank, time.Now())
		m.mu.Unlock()
		if first {
			s, err := m.NewSession()
			if !errors.Is(err, ErrCapacity) {
				return s, err
			}
		}
		m.mu.Lock()
		if me == nil {
			if m.queue.Waiting >= m.opts.Queue {
				m.mu.Unlock()
				return nil, fmt.Errorf("%w (%d slots busy, %d waiting)", ErrQueueFull, len(m.slots), m.queue.Waiting)
			}
			m.queue.Waiting++
			me = &waiter{rank: rank, since: time.Now()}
			m.waiters = append(m.waiters, me)
		}
		if m.freed == nil {
			m.freed = make(chan struct{})
		}
		freed := m.freed
		m.mu.Unlock()
		// A slot frees when a session closes, or when an idle one expires:
		// look again now and then for the latter.
		select {
		case <-freed:
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// wakeLocked tells the waiters a slot is free.
func (m *Model) wakeLocked() {
	if m.freed != nil {
		close(m.freed)
	}
	m.freed = make(chan struct{})
}
