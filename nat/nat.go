package nat

import (
	"context"
	"errors"
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
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"go.uber.org/fx"

	"github.com/llmswarm/llmswarm/internal/netif"
	"github.com/llmswarm/llmswarm/swarm"
)

// Sentinel errors of Start.
var (
	ErrStarted = errors.New("nat: already started")
	ErrClosed  = errors.New("nat: closed")
)

// Service is how one peer deals with NAT: what AutoNAT says of it, its
// counters, its relay service and the relays it uses, port mapping and
// hole punching. Build it with New before the libp2p host (the host's
// options come from it), Start it on the host, Close it before closing
// the host.
type Service struct {
	cfg     Config
	log     *slog.Logger
	private bool

	reach    reachability
	counters *counters
	acl      *relayACL
	src      *relaySource
	pmp      *pmpMapper
	h        atomic.Pointer[host.Host] // set by Start; read without mu
	punch    atomic.Pointer[puncher]   // nil with nat.hole_punching off
	relay    *relay.Relay              // nat.relay_service "on"; nil otherwise (libp2p runs "auto")
	cancel   context.CancelFunc        // ends the reachability watch
	watching sync.WaitGroup

	mu      sync.Mutex
	started bool
	closed  bool
	idents  event.Subscription // identify's results from the host's first connection on; the puncher takes it
}

// Option configures New.
type Option func(*settings) error

type settings struct {
	private bool
	trust   *swarm.Trust
}

// WithPrivateSwarm says whether the peer is in a private swarm (every
// peer holds the swarm key): its relay then serves any peer that got
// through, and relay_limit defaults to "member".
func WithPrivateSwarm(private bool) Option {
	return func(s *settings) error { s.private = private; return nil }
}

// WithTrust gives the peer's trust ledger: the relay refuses banned
// peers and keeps its slots for peers that have not proven work within
// nat.relay_unproven, and relay candidates skip banned peers and prefer
// proven ones.
// Without it nobody is banned and nobody proven.
func WithTrust(t *swarm.Trust) Option {
	return func(s *settings) error { s.trust = t; return nil }
}

// New readies the plane for cfg: the parts the libp2p host's options
// hook into (counters, relay ACL, relay finder, address factory). It
// applies cfg.PublicCIDRs to the process-wide table of unroutable
// ranges. log nil discards.
func New(cfg Config, log *slog.Logger, opts ...Option) (*Service, error) {
	var set settings
	for _, o := range opts {
		if err := o(&set); err != nil {
			return nil, err
		}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	relays, err := cfg.relays()
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: log, private: set.private, counters: newCounters(log), pmp: &pmpMapper{log: log}}
	s.acl = &relayACL{log: log, private: set.private}
	s.acl.budget.limit, s.acl.budget.open = cfg.RelayUnproven, s.counters.circuitsOpen.Load
	if set.trust != nil {
		banned := func(id peer.ID) bool { b, _ := set.trust.Banned(id); return b }
		s.acl.banned.Store(&banned)
		proven := set.trust.Proven
		s.acl.proven.Store(&proven)
	}
	s.src = &relaySource{ledger: set.trust, static: relays}
	s.reach.forced = cfg.Reachability == "public" || cfg.Reachability == "private"
	applyPublicCIDRs(cfg.PublicCIDRs)
	return s, nil
}

// Options are the libp2p options of the plane: AutoNAT (asking and
// answering dial-backs), port mapping, the relay service while public,
// relays to reserve on, and the address factory. Hole punching and
// relay_service "on" start with Start.
func (s *Service) Options() []libp2p.Option {
	cfg := s.cfg
	opts := []libp2p.Option{libp2p.EnableRelay(), libp2p.EnableAutoNATv2(), libp2p.AddrsFactory(s.addrs)}
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
		// publicly reachable; "on" starts it with the peer (Start).
		opts = append(opts, libp2p.EnableRelayService(s.relayOptions()...))
	}
	// While this peer is not publicly reachable, reserve slots on relays:
	// configured ones, and swarm peers that relay.
	opts = append(opts, libp2p.EnableAutoRelayWithPeerSource(s.src.candidates,
		autorelay.WithNumRelays(2), autorelay.WithMinCandidates(1), autorelay.WithBootDelay(0),
		autorelay.WithMinInterval(3*time.Second), autorelay.WithBackoff(10*time.Second)))
	if cfg.PortMapping != "off" {
		opts = append(opts, libp2p.NATPortMap())
	}
	if cfg.HolePunching != "off" {
		opts = append(opts, libp2p.WithFxOption(fx.Invoke(s.watchIdentify)))
	}
	return opts
}

// watchIdentify subscribes to identify's results while the host is being
// built, before it connects anywhere: hole punching learns this peer's
// public address from what its first peers observe, and the host's first
// connection (to a static relay, dialed as the host starts when the peer
// is private) may be the only direct one it ever has.
func (s *Service) watchIdentify(h host.Host) error {
	sub, err := h.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted), eventbus.BufSize(256))
	if err != nil {
		return fmt.Errorf("hole punching: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idents != nil {
		s.idents.Close() // a second host built from the same options
	}
	s.idents = sub
	return nil
}

func (s *Service) relayOptions() []relay.Option {
	return []relay.Option{relay.WithMetricsTracer(s.counters), relay.WithLimit(relayLimit(s.cfg.RelayLimit, s.private)), relay.WithACL(s.acl)}
}

// Start follows reachability on h (built with Options), and starts the
// relay service of nat.relay_service "on", NAT-PMP and hole punching.
// What it started before an error is stopped by Close.
func (s *Service) Start(ctx context.Context, h host.Host) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.started:
		return ErrStarted
	}
	s.started = true
	s.h.Store(&h)
	s.acl.h.Store(&h)
	s.src.h.Store(&h)
	ctx, s.cancel = context.WithCancel(ctx)
	if err := s.reach.watch(ctx, h, &s.watching); err != nil {
		return err
	}
	if s.cfg.RelayService == "on" {
		r, err := relay.New(h, s.relayOptions()...)
		if err != nil {
			return fmt.Errorf("relay service: %w", err)
		}
		s.relay = r
	}
	if s.cfg.PortMapping != "off" {
		s.pmp.start(h)
	}
	if s.cfg.HolePunching != "off" {
		sub := s.idents
		s.idents = nil
		p, err := newPuncher(h, sub, s.counters, s.log)
		if err != nil {
			return err
		}
		s.punch.Store(p)
	}
	return nil
}

// SetView gives the relay finder the swarm's peer table: alive peers that
// relay become relay candidates.
func (s *Service) SetView(v *swarm.View) {
	s.src.view.Store(v)
}

// Close stops hole punching, port mapping and the relay service, once;
// also after a Start that failed half-way, or none. Status, ConnKind and
// Kind still answer afterwards.
func (s *Service) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.cancel != nil {
		s.cancel()
		s.watching.Wait()
	}
	s.pmp.stop()
	if s.idents != nil {
		s.idents.Close() // built a host, never started on it
		s.idents = nil
	}
	if p := s.punch.Load(); p != nil {
		p.close()
	}
	if s.relay != nil {
		return s.relay.Close()
	}
	return nil
}

// Warning is a sentence on a risky setting of the plane, or "": member
// relay limits in a public swarm.
func (s *Service) Warning() string {
	if s.cfg.RelayLimit == "member" && !s.private {
		return "nat.relay_limit is member in a public swarm: any swarm member may move up to 1 GiB each way per circuit through this peer's relay"
	}
	return ""
}

// host is the libp2p host, once started (nil before).
func (s *Service) host() host.Host {
	if p := s.h.Load(); p != nil {
		return *p
	}
	return nil
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

// addrs is the host's address factory: libp2p's addresses, the
// interface addresses of unspecified listeners where libp2p could list
// none (Android 11+ denies the netlink dump it uses; see internal/netif),
// and ports mapped by NAT-PMP.
func (s *Service) addrs(in []ma.Multiaddr) []ma.Multiaddr {
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
