package engine

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestQueueByRank: with the one slot busy, requests of ranks -1, 0.5, 0
// and 1 wait; as the slot frees again and again they take it highest rank
// first, and a newcomer does not take a freed slot before a waiter of its
// rank. A full queue refuses at once.
func TestQueueByRank(t *testing.T) {
	m := loadT(t, synthFile(t, "llama", "tiny", "f32"), Options{Slots: 1, Context: 64, Queue: 4})
	held, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan float64, 4)
	got := make(chan *Session, 4)
	for i, r := range []float64{-1, 0.5, 0, 1} {
		go func() {
			s, err := m.AcquireSession(WithPriority(t.Context(), r))
			if err != nil {
				t.Error(err)
				return
			}
			order <- r
			got <- s
		}()
		for len(m.waitersSnapshot()) < i+1 { // in this order: ties would go by arrival
			time.Sleep(time.Millisecond)
		}
	}
	if _, err := m.AcquireSession(t.Context()); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a fifth request with four waiting: %v, want ErrQueueFull", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	held.Close()
	want := []float64{1, 0.5, 0, -1}
	for i, w := range want {
		r := <-order
		if r != w {
			t.Fatalf("slot %d went to rank %g, want %g", i, r, w)
		}
		s := <-got
		if i == 0 {
			// A newcomer of rank 0 while ranks 0.5, 0 and -1 wait: it waits too.
			if _, err := m.AcquireSession(WithPriority(ctx, 0)); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a newcomer behind waiters: %v, want it to wait", err)
			}
		}
		s.Close()
	}
}

func (m *Model) waitersSnapshot() []*waiter {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*waiter(nil), m.waiters...)
}
