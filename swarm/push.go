package swarm

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Changes past the bound of neighbours. In a swarm whose tables are
// bounded, a record published on the capability topic reaches every peer
// of the swarm (each relays it and announces it in its gossip: about 5 KB
// a peer per record), though only the peers whose tables hold this one
// take it: the others drop it. So once this peer's own table is full (the
// swarm is larger than its bound of neighbours), a changed record is
// pushed to the peers that hold this one instead, and not published:
// they are the peers that asked it something through the record exchange
// lately (a table checks each of its peers every round of its probe
// budget, within minutes), and the push is a question of the exchange that
// carries the record (the answerer takes it, as it takes any asker's).
// What a push misses (a holder not heard from lately, a refused question)
// the holder's next check catches, as it catches any missed change.
const (
	heldFor     = 10 * time.Minute // an asker within it holds this peer
	maxHolders  = 512              // askers remembered
	pushWorkers = 8
	pushTimeout = 5 * time.Second // all the pushes of one record
)

// heldBy notes that id asked this peer something now: its table holds,
// or is about to hold, this peer.
func (e *exchange) heldBy(id peer.ID, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.holders[id]; !ok && len(e.holders) >= maxHolders {
		var oldest peer.ID
		for p, t := range e.holders {
			if oldest == "" || t.Before(e.holders[oldest]) {
				oldest = p
			}
		}
		delete(e.holders, oldest)
	}
	e.holders[id] = now
}

// heldWithin reports whether id asked this peer something within heldFor.
func (e *exchange) heldWithin(id peer.ID, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.holders[id]
	return ok && now.Sub(t) < heldFor
}

// holdersNow returns the peers that asked this peer something within
// heldFor.
func (e *exchange) holdersNow(now time.Time) []peer.ID {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []peer.ID
	for id, t := range e.holders {
		if now.Sub(t) < heldFor {
			out = append(out, id)
		} else {
			delete(e.holders, id)
		}
	}
	return out
}

// push gives sealed, this peer's record, to each peer that holds this one
// (see above), pushWorkers at a time, within pushTimeout in all, and
// returns how many took it. A question refused because this peer asked
// that peer within serveGap is asked once more after it.
func (s *Service) push(ctx context.Context, sealed []byte) int {
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	ids := s.xchg.holdersNow(time.Now())
	work := make(chan peer.ID)
	var wg sync.WaitGroup
	var mu sync.Mutex
	took := 0
	for range min(pushWorkers, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				err := s.xchg.give(ctx, id, sealed)
				var refused *refusal
				if errors.As(err, &refused) {
					select {
					case <-ctx.Done():
					case <-time.After(serveGap):
						err = s.xchg.give(ctx, id, sealed)
					}
				}
				if err == nil {
					mu.Lock()
					took++
					mu.Unlock()
				} else if ctx.Err() == nil {
					s.log.Debug("record not pushed", "peer", id, "err", err)
				}
			}
		}()
	}
	for _, id := range ids {
		if id == s.host.ID() {
			continue
		}
		select {
		case work <- id:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	return took
}

// give asks id a question that carries this peer's record (sealed): id
// takes it as it takes any asker's record. Its answer is a check of its
// own record too.
func (e *exchange) give(ctx context.Context, id peer.ID, sealed []byte) error {
	have := ^uint64(0) // a peer this one does not hold: its record is not wanted
	if p, ok := e.s.view.Get(id); ok && p.Cap.Seq > 0 {
		have = p.Cap.Seq
	}
	return e.checkWith(ctx, id, recordsRequest{Have: have, Self: sealed})
}
