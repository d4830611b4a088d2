package nat

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/pb"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"

	"github.com/llmswarm/llmswarm/client"
)

// counters counts what this peer's NAT traversal did: hole punches
// (DCUtR) it took part in, and, while it relays for others, the circuits
// and bytes it relayed. It is libp2p's hole punch event tracer and relay
// metrics tracer.
type counters struct {
	log *slog.Logger

	punchAttempts  atomic.Int64 // individual simultaneous-open tries
	punchSuccesses atomic.Int64 // hole punches that ended with a direct connection
	punchFailures  atomic.Int64 // hole punches that gave up
	directDials    atomic.Int64 // direct dials that made punching unneeded

	mu       sync.Mutex
	toDirect []time.Duration             // the last successful punches' durations, newest last
	relayed  []time.Duration             // the last times from a relayed connection's opening to its punch, newest last
	punched  func(peer.ID) time.Duration // told of each peer a punch reached; says how long it was relayed
	direct   func(peer.ID) bool          // whether a peer has a direct connection

	relayServing    atomic.Bool // the relay service runs (libp2p's relay manager says)
	circuitsOpen    atomic.Int64
	circuitsTotal   atomic.Int64
	circuitsRefused atomic.Int64
	reservations    atomic.Int64
	relayedBytes    atomic.Int64
}

const keepPunchTimes = 64

func newCounters(log *slog.Logger) *counters {
	return &counters{log: log}
}

// onPunched sets f to be told of each peer a hole punch reached, and
// direct to say whether a peer has a direct connection.
func (c *counters) onPunched(f func(peer.ID) time.Duration, direct func(peer.ID) bool) {
	c.mu.Lock()
	c.punched, c.direct = f, direct
	c.mu.Unlock()
}

func (c *counters) reachedDirectly(p peer.ID) bool {
	c.mu.Lock()
	direct := c.direct
	c.mu.Unlock()
	return direct != nil && direct(p)
}

// Trace is libp2p's hole punch event hook.
func (c *counters) Trace(e *holepunch.Event) {
	switch ev := e.Evt.(type) {
	case *holepunch.HolePunchAttemptEvt:
		c.punchAttempts.Add(1)
	case *holepunch.DirectDialEvt:
		if ev.Success {
			c.directDials.Add(1)
			c.log.Info("nat: direct dial succeeded, no hole punch needed", "peer", e.Remote, "took", ev.EllapsedTime)
		} else {
			c.log.Debug("nat: direct dial failed, punching", "peer", e.Remote, "err", ev.Error)
		}
	case *holepunch.StartHolePunchEvt:
		c.log.Debug("nat: hole punch starting", "peer", e.Remote, "their_addrs", ev.RemoteAddrs, "rtt", ev.RTT)
	case *holepunch.EndHolePunchEvt:
		if ev.Success {
			c.punchSuccesses.Add(1)
			c.mu.Lock()
			c.toDirect = keepLast(c.toDirect, ev.EllapsedTime)
			punched := c.punched
			c.mu.Unlock()
			if punched != nil {
				if d := punched(e.Remote); d > 0 {
					c.mu.Lock()
					c.relayed = keepLast(c.relayed, d)
					c.mu.Unlock()
				}
			}
			c.log.Info("nat: hole punched, direct connection", "peer", e.Remote, "took", ev.EllapsedTime)
		} else if c.reachedDirectly(e.Remote) {
			c.log.Debug("nat: hole punch attempt failed, but another made a direct connection", "peer", e.Remote, "err", ev.Error)
		} else {
			c.punchFailures.Add(1)
			c.log.Debug("nat: hole punch failed, staying relayed", "peer", e.Remote, "took", ev.EllapsedTime, "err", ev.Error)
		}
	case *holepunch.ProtocolErrorEvt:
		// Both sides may start a punch at once; the one that loses the race
		// sees a protocol error while a direct connection exists.
		if c.reachedDirectly(e.Remote) {
			c.log.Debug("nat: hole punch protocol error, but a direct connection exists", "peer", e.Remote, "err", ev.Error)
			return
		}
		c.punchFailures.Add(1)
		c.log.Debug("nat: hole punch protocol error, staying relayed", "peer", e.Remote, "err", ev.Error)
	}
}

// The relay service's metrics hooks.

func (c *counters) RelayStatus(enabled bool) {
	c.relayServing.Store(enabled)
	c.log.Info("nat: relay service", "serving", enabled)
}
func (c *counters) ConnectionOpened() { c.circuitsOpen.Add(1); c.circuitsTotal.Add(1) }
func (c *counters) ConnectionClosed(time.Duration) {
	c.circuitsOpen.Add(-1)
}
func (c *counters) ConnectionRequestHandled(st pb.Status) {
	if st != pb.Status_OK {
		c.circuitsRefused.Add(1)
	}
}
func (c *counters) ReservationAllowed(bool)             { c.reservations.Add(1) }
func (c *counters) ReservationClosed(int)               {}
func (c *counters) ReservationRequestHandled(pb.Status) {}
func (c *counters) BytesTransferred(n int)              { c.relayedBytes.Add(int64(n)) }

var _ relay.MetricsTracer = (*counters)(nil)

// status is the counters for the status API.
func (c *counters) status() client.NATCounters {
	out := client.NATCounters{
		PunchAttempts:     c.punchAttempts.Load(),
		PunchSuccesses:    c.punchSuccesses.Load(),
		PunchFailures:     c.punchFailures.Load(),
		DirectDials:       c.directDials.Load(),
		RelayCircuits:     c.circuitsTotal.Load(),
		RelayOpen:         c.circuitsOpen.Load(),
		RelayRefused:      c.circuitsRefused.Load(),
		RelayedBytes:      c.relayedBytes.Load(),
		RelayReservations: c.reservations.Load(),
	}
	c.mu.Lock()
	out.PunchMSMedian, out.PunchMSLast = medianLast(c.toDirect)
	out.ToDirectMSMedian, out.ToDirectMSLast = medianLast(c.relayed)
	c.mu.Unlock()
	return out
}

// keepLast appends d to ds, keeping the last keepPunchTimes.
func keepLast(ds []time.Duration, d time.Duration) []time.Duration {
	ds = append(ds, d)
	if len(ds) > keepPunchTimes {
		ds = ds[1:]
	}
	return ds
}

// medianLast is the median and the last of ds, in ms (zero when empty).
func medianLast(ds []time.Duration) (median, last float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	last = ms(ds[len(ds)-1])
	s := slices.Clone(ds)
	slices.Sort(s)
	return ms(s[len(s)/2]), last
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
