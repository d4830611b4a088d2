package nat

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/llmswarm/llmswarm/client"
)

// reachability follows what AutoNAT (or the config) says of this peer:
// AutoNAT v1's verdict on the peer, and AutoNAT v2's on each address.
type reachability struct {
	forced bool         // nat.reachability is set: v1's event carries it, v2 is ignored
	v1     atomic.Int32 // network.Reachability
	v2     atomic.Int32 // network.Reachability from v2: public once an address is confirmed reachable
}

// get prefers v2's per-address answer: an address confirmed reachable
// makes the peer public; v1 decides otherwise.
func (r *reachability) get() network.Reachability {
	if r.forced {
		return network.Reachability(r.v1.Load())
	}
	v1, v2 := network.Reachability(r.v1.Load()), network.Reachability(r.v2.Load())
	if v2 == network.ReachabilityPublic || v1 == network.ReachabilityUnknown {
		return v2
	}
	return v1
}

// watch updates r from h's event bus until ctx ends; wg counts the
// goroutine that does it.
func (r *reachability) watch(ctx context.Context, h host.Host, wg *sync.WaitGroup) error {
	sub, err := h.EventBus().Subscribe([]any{new(event.EvtLocalReachabilityChanged), new(event.EvtHostReachableAddrsChanged)})
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-sub.Out():
				if !ok {
					return
				}
				switch e := e.(type) {
				case event.EvtLocalReachabilityChanged:
					r.v1.Store(int32(e.Reachability))
				case event.EvtHostReachableAddrsChanged:
					v := network.ReachabilityUnknown
					switch {
					case len(e.Reachable) > 0:
						v = network.ReachabilityPublic
					case len(e.Unreachable) > 0:
						v = network.ReachabilityPrivate
					}
					r.v2.Store(int32(v))
				}
			}
		}
	}()
	return nil
}

// Status is this peer's reachability, the addresses it announces, its
// relay service and the plane's counters, as the status API shows them.
func (s *Service) Status() client.NATStatus {
	st := client.NATStatus{Reachability: "unknown", Announced: []string{}}
	switch s.reach.get() {
	case network.ReachabilityPublic:
		st.Reachability = "public"
	case network.ReachabilityPrivate:
		st.Reachability = "private"
	}
	h := s.host()
	if h == nil {
		return st
	}
	for _, a := range h.Addrs() {
		st.Announced = append(st.Announced, a.String())
		if _, err := a.ValueForProtocol(ma.P_CIRCUIT); err == nil {
			st.Relayed = true
		}
	}
	st.RelayService = s.Relaying()
	if st.RelayService {
		st.RelayLimit = relayLimitName(s.cfg.RelayLimit, s.private)
	}
	st.Counters = s.counters.status()
	return st
}

// Relaying reports whether this peer's relay service runs: turned on, or
// automatic while libp2p judges the peer publicly reachable (AutoNAT v1,
// or a forced nat.reachability).
func (s *Service) Relaying() bool {
	// The relay's own word: libp2p's relay manager starts and stops it
	// ("auto"), or Start started it ("on").
	return s.cfg.RelayService != "off" && s.counters.relayServing.Load()
}
