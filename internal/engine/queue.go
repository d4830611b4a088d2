package engine

import (
	"context"
	"errors"
	"fmt"
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

// AcquireSession is NewSession that waits, while ctx allows, for a slot
// when all are busy, among at most Options.Queue waiters; beyond that it
// fails at once with ErrQueueFull. Waiters are woken when a slot frees, and
// take it in no promised order.
func (m *Model) AcquireSession(ctx context.Context) (*Session, error) {
	var start time.Time
	waiting := false
	defer func() {
		if waiting {
			d := time.Since(start)
			m.mu.Lock()
			m.queue.Waiting--
			m.queue.Waited++
			m.queue.WaitTime += d
			m.queue.MaxWait = max(m.queue.MaxWait, d)
			m.mu.Unlock()
		}
	}()
	for {
		s, err := m.NewSession()
		if !errors.Is(err, ErrCapacity) {
			return s, err
		}
		m.mu.Lock()
		if !waiting {
			if m.queue.Waiting >= m.opts.Queue {
				m.mu.Unlock()
				return nil, fmt.Errorf("%w (%d slots busy, %d waiting)", ErrQueueFull, len(m.slots), m.queue.Waiting)
			}
			m.queue.Waiting++
			waiting, start = true, time.Now()
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
