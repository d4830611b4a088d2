package node

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

// eventBuffer is how many events a subscriber may lag behind before the
// oldest are dropped for it.
const eventBuffer = 256

// eventHub fans the peer's live events out to subscribers (the API's
// /v1/swarm/events streams). Publishing never blocks: a subscriber that
// falls eventBuffer events behind loses its oldest ones and is told how
// many in a "dropped" event.
type eventHub struct {
	mu   sync.Mutex
	subs map[*subscriber]struct{}
}

type subscriber struct {
	ch      chan client.SwarmEvent
	dropped int
}

// publish sends v as an event of type typ to every subscriber.
func (h *eventHub) publish(typ string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		return // our own types always marshal
	}
	ev := client.SwarmEvent{Type: typ, TimeMS: time.Now().UnixMilli(), Data: data}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		for {
			select {
			case s.ch <- ev:
			default:
				select { // full: drop its oldest and try again
				case <-s.ch:
					s.dropped++
				default:
				}
				continue
			}
			break
		}
	}
}

// Subscribe returns a channel of the peer's events from now on, and a
// function that ends the subscription and closes the channel. A reader that
// falls behind loses the oldest events; the next event it gets after that
// is a "dropped" event whose data is the count.
func (n *Node) Subscribe() (<-chan client.SwarmEvent, func()) {
	h := &n.events
	s := &subscriber{ch: make(chan client.SwarmEvent, eventBuffer)}
	out := make(chan client.SwarmEvent)
	stop := make(chan struct{})
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*subscriber]struct{}{}
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	go func() {
		defer close(out)
		for {
			var ev client.SwarmEvent
			select {
			case ev = <-s.ch:
			case <-stop:
				return
			}
			h.mu.Lock()
			lost := s.dropped
			s.dropped = 0
			h.mu.Unlock()
			if lost > 0 {
				d, _ := json.Marshal(lost)
				select {
				case out <- client.SwarmEvent{Type: "dropped", TimeMS: ev.TimeMS, Data: d}:
				case <-stop:
					return
				}
			}
			select {
			case out <- ev:
			case <-stop:
				return
			}
		}
	}()
	var once sync.Once
	return out, func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.subs, s)
			h.mu.Unlock()
			close(stop)
		})
	}
}
