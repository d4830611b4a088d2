package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	circuit "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/llmswarm/llmswarm/internal/netif"
	"github.com/llmswarm/llmswarm/node/client"
	"github.com/llmswarm/llmswarm/swarm"
)

// natOptions are the libp2p options of cfg: AutoNAT (asking and answering
// dial-backs), port mapping, the relay service while public, and relays
// to reserve on. Hole punching and relay_service "on" start with the host
// (natState.start).
func natOptions(cfg NATConfig, st *natState) ([]libp2p.Option, error) {
	tel, acl, src := st.natc, st.relayACL, st.relaySrc
	relays, err := cfg.relays()
	if err != nil {
		return nil, err
	}
	src.static = relays
	applyPublicCIDRs(cfg.PublicCIDRs)
	opts := []libp2p.Option{libp2p.EnableRelay(), libp2p.EnableAutoNATv2(), libp2p.AddrsFactory(st.addrs)}
	switch cfg.Reachability {
	case "public":
		opts = append(opts, libp2p.ForceReachabilityPublic())
	case "private":
		opts = append(opts, libp2p.ForceReachabilityPrivate())
	default:
		// Answer others' dial-back requests (AutoNAT v1). Not with a forced
		// reachability: libp2p then never closes the service's dialer.
		opts = append(opts, libp2p.EnableNATService())
	}
	if cfg.RelayService == "auto" || cfg.RelayService == "" {
		// The relay manager runs the service only while this peer is
		// publicly reachable; "on" starts it with the node (natState.start).
		opts = append(opts, libp2p.EnableRelayService(relayOptions(cfg, tel, acl)...))
	}
	// While this peer is not publicly reachable, reserve slots on relays:
	// configured ones, and swarm peers that relay.
	opts = append(opts, libp2p.EnableAutoRelayWithPeerSource(src.candidates,
		autorelay.WithNumRelays(2), autorelay.WithMinCandidates(1), autorelay.WithBootDelay(0),
		autorelay.WithMinInterval(3*time.Second), autorelay.WithBackoff(10*time.Second)))
	if cfg.PortMapping != "off" {
		opts = append(opts, libp2p.NATPortMap())
	}
	return opts, nil
}

var publicMu sync.Mutex

// applyPublicCIDRs removes the ranges from manet's unroutable tables, so
// addresses in them count as public (process-wide).
func applyPublicCIDRs(cidrs []string) {
	if len(cidrs) == 0 {
		return
	}
	publicMu.Lock()
	defer publicMu.Unlock()
	for _, s := range cidrs {
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			continue // validated with the config
		}
		// A listed range overlapping the given one is dropped whole.
		keep := func(list []*net.IPNet) []*net.IPNet {
			out := list[:0:0]
			for _, u := range list {
				if !u.Contains(n.IP) && !n.Contains(u.IP) {
					out = append(out, u)
				}
			}
			return out
		}
		manet.Unroutable4 = keep(manet.Unroutable4)
		manet.Private4 = keep(manet.Private4)
		manet.Unroutable6 = keep(manet.Unroutable6)
		manet.Private6 = keep(manet.Private6)
	}
}

// natState is how this peer deals with NAT: what AutoNAT says of it,
// its counters, its relay service and the relays it uses, hole punching.
type natState struct {
	reach    reachability
	natc     *natCounters
	relayACL *relayACL
	relaySrc *relaySource
	punch    *puncher     // nil with nat.hole_punching off
	relay    *relay.Relay // nat.relay_service "on"; nil otherwise (libp2p runs "auto")
	pmp      *pmpMapper   // NAT-PMP where UPnP mapped nothing
	closed   bool
	h        atomic.Pointer[host.Host] // set by start; read without the node's lock

	noteMu sync.Mutex
	noted  map[peer.ID]time.Time // when a peer was last logged as left out of routes
}

// noteOnce reports whether to log, now, that id is left out of routes:
// once a minute per peer.
func (s *natState) noteOnce(id peer.ID) bool {
	s.noteMu.Lock()
	defer s.noteMu.Unlock()
	if s.noted == nil {
		s.noted = map[peer.ID]time.Time{}
	}
	if time.Since(s.noted[id]) < time.Minute {
		return false
	}
	if len(s.noted) > 1024 {
		clear(s.noted)
	}
	s.noted[id] = time.Now()
	return true
}

// addrs is the host's address factory: libp2p's addresses, the
// interface addresses of unspecified listeners where libp2p could list
// none (Android 11+ denies the netlink dump it uses; see internal/netif),
// and ports mapped by NAT-PMP.
func (s *natState) addrs(in []ma.Multiaddr) []ma.Multiaddr {
	out := in
	if h := s.host(); h != nil && !slices.ContainsFunc(in, dialable) {
		if listen := h.Network().ListenAddresses(); slices.ContainsFunc(listen, manet.IsIPUnspecified) {
			if ifs, err := netif.Addrs(); err == nil {
				out = append(slices.Clip(out), netif.Expand(listen, ifs)...)
			}
		}
	}
	if s.pmp != nil {
		out = s.pmp.extra(slices.Clip(out))
	}
	return ma.Unique(out)
}

// dialable reports whether a is an address another device may dial: not
// loopback, not unspecified, not through a relay.
func dialable(a ma.Multiaddr) bool {
	if _, err := a.ValueForProtocol(ma.P_CIRCUIT); err == nil {
		return false
	}
	return !manet.IsIPLoopback(a) && !manet.IsIPUnspecified(a)
}

// host is the libp2p host, once started (nil before).
func (s *natState) host() host.Host {
	if p := s.h.Load(); p != nil {
		return *p
	}
	return nil
}

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

// watch updates r from h's event bus until ctx ends.
func (r *reachability) watch(ctx context.Context, h host.Host) error {
	sub, err := h.EventBus().Subscribe([]any{new(event.EvtLocalReachabilityChanged), new(event.EvtHostReachableAddrsChanged)})
	if err != nil {
		return err
	}
	go func() {
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

// natStatus is this peer's reachability and announced addresses.
func (n *Node) natStatus() client.NATStatus {
	st := client.NATStatus{Reachability: "unknown", Announced: []string{}}
	switch n.nat.reach.get() {
	case network.ReachabilityPublic:
		st.Reachability = "public"
	case network.ReachabilityPrivate:
		st.Reachability = "private"
	}
	h := n.Host()
	if h == nil {
		return st
	}
	for _, a := range h.Addrs() {
		st.Announced = append(st.Announced, a.String())
		if _, err := a.ValueForProtocol(ma.P_CIRCUIT); err == nil {
			st.Relayed = true
		}
	}
	st.RelayService = n.relaying()
	if st.RelayService {
		st.RelayLimit = relayLimitName(n.cfg.NAT.RelayLimit, n.private)
	}
	st.Counters = n.nat.natc.status()
	return st
}

func relayOptions(cfg NATConfig, tel *natCounters, acl *relayACL) []relay.Option {
	return []relay.Option{relay.WithMetricsTracer(tel), relay.WithLimit(relayLimit(cfg.RelayLimit, acl.private)), relay.WithACL(acl)}
}

// init readies what the libp2p host's options need.
func (s *natState) init(log *slog.Logger, private bool, ledger *swarm.Trust) {
	s.natc = newNATCounters(log)
	s.relayACL = &relayACL{log: log, private: private}
	banned := func(id peer.ID) bool { b, _ := ledger.Banned(id); return b }
	s.relayACL.banned.Store(&banned)
	s.relaySrc = &relaySource{ledger: ledger}
	s.pmp = &pmpMapper{log: log}
}

// start follows reachability on h, and starts the relay service of
// nat.relay_service "on" and hole punching.
func (s *natState) start(ctx context.Context, h host.Host, cfg NATConfig, log *slog.Logger) error {
	s.h.Store(&h)
	s.relayACL.h.Store(&h)
	s.relaySrc.h.Store(&h)
	s.reach.forced = cfg.Reachability == "public" || cfg.Reachability == "private"
	if err := s.reach.watch(ctx, h); err != nil {
		return err
	}
	if cfg.RelayService == "on" {
		r, err := relay.New(h, relayOptions(cfg, s.natc, s.relayACL)...)
		if err != nil {
			return fmt.Errorf("relay service: %w", err)
		}
		s.relay = r
	}
	if cfg.PortMapping != "off" {
		s.pmp.start(h)
	}
	if cfg.HolePunching != "off" {
		p, err := newPuncher(h, s.natc, log)
		if err != nil {
			return err
		}
		s.punch = p
	}
	return nil
}

// setView gives the relay finder the peer table.
func (s *natState) setView(v *swarm.View) {
	s.relaySrc.view.Store(v)
}

// close stops hole punching and the relay service, once. The fields stay
// set: the API may still read them.
func (s *natState) close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if s.pmp != nil {
		s.pmp.stop()
	}
	if s.punch != nil {
		s.punch.close()
	}
	if s.relay != nil {
		return s.relay.Close()
	}
	return nil
}

// relaying reports whether this peer's relay service runs: turned on, or
// automatic while libp2p judges the peer publicly reachable (AutoNAT v1,
// or a forced nat.reachability).
func (n *Node) relaying() bool {
	// The relay's own word: libp2p's relay manager starts and stops it
	// ("auto"), or the node started it ("on").
	return n.cfg.NAT.RelayService != "off" && n.nat.natc != nil && n.nat.natc.relayServing.Load()
}

// connKind is how this peer reaches id: "local" (itself), "punched",
// "direct" or "relayed" (the best of its open connections), or "" when
// none is open.
func (n *Node) connKind(id peer.ID) string {
	h := n.nat.host() // not n.Host(): generations call this while Close holds the node's lock
	if h == nil {
		return ""
	}
	if id == h.ID() {
		return "local"
	}
	best := ""
	for _, c := range h.Network().ConnsToPeer(id) {
		switch k := n.nat.punch.kind(c); {
		case k != "relayed":
			return k // direct or punched: what a new stream takes
		case best == "":
			best = k
		}
	}
	return best
}

// Relayed connections whose relay allows at least this much carry
// pipeline traffic; smaller ones (libp2p's default: 128 KiB, 2 minutes)
// carry control traffic only.
const (
	bulkRelayBytes    = 16 << 20
	bulkRelayDuration = 5 * time.Minute
)

// relayedOnlyControl reports whether every open connection to id goes
// through a relay whose limits fit control traffic only: a pipeline hop
// there would be cut by the relay mid-generation.
func relayedOnlyControl(h host.Host, id peer.ID) bool {
	if !relayedOnly(h, id) {
		return false
	}
	for _, c := range h.Network().ConnsToPeer(id) {
		st := c.Stat()
		if !st.Limited {
			return false
		}
		data, _ := st.Extra[circuit.StatLimitData].(uint64)
		dur, _ := st.Extra[circuit.StatLimitDuration].(time.Duration)
		if (data == 0 || data >= bulkRelayBytes) && (dur == 0 || dur >= bulkRelayDuration) {
			return false
		}
	}
	return true
}
