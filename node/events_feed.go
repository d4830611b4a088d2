package node

import (
	"context"
	"time"

	"github.com/llmswarm/llmswarm/bmcauth"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/swarm"
)

// The producers of the event hub's "peers", "roles", "shards" and "bmc"
// events (the "task" events come from the task tracker).

// publishPS tells subscribers, and the swarm (a heartbeat now), that this
// peer's served models may have changed: typ is "roles" or "shards", the
// data what it serves now.
func (n *Node) publishPS(typ string) {
	if s := n.Swarm(); s != nil {
		s.Changed()
	}
	if ps, err := n.PS(); err == nil {
		n.events.publish(typ, ps)
	}
}

// watchView publishes the peer table as a "peers" event whenever the view
// changes (a peer joins, dies, comes back, is forgotten, or announces other
// roles or shards). A burst of changes gives one event.
func (n *Node) watchView(ctx context.Context, v *swarm.View) {
	sub := v.Subscribe(64)
	go func() {
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-sub.C():
				if !ok {
					return
				}
			}
		burst:
			for {
				select {
				case <-sub.C():
				default:
					break burst
				}
			}
			if p, err := n.Peers(); err == nil {
				n.events.publish("peers", p)
			}
		}
	}()
}

// publishBMC publishes the BMC state as a "bmc" event (a table arrived).
func (n *Node) publishBMC(s *bmcauth.Service) {
	now := time.Now()
	n.events.publish("bmc", bmcOut(s.Snapshot(now), now))
}

// EventsSnapshot is what a new reader of the event feed starts from: the
// state the later events change.
func (n *Node) EventsSnapshot() (client.EventsSnapshot, error) {
	st, err := n.Status()
	if err != nil {
		return client.EventsSnapshot{}, err
	}
	id, err := n.ID()
	if err != nil {
		return client.EventsSnapshot{}, err
	}
	peers, err := n.Peers()
	if err != nil {
		return client.EventsSnapshot{}, err
	}
	ps, err := n.PS()
	if err != nil {
		return client.EventsSnapshot{}, err
	}
	out := client.EventsSnapshot{ID: id, Status: st, Peers: peers, PS: ps}
	n.mu.Lock()
	s := n.bmc
	n.mu.Unlock()
	if s != nil {
		now := time.Now()
		b := bmcOut(s.Snapshot(now), now)
		out.BMC = &b
	}
	return out, nil
}
