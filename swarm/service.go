package swarm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/llmswarm/llmswarm/gossip"
)

// SelfFunc describes this peer as it is now: platform, roles, shards, load.
// The service fills in the peer ID, addresses, sequence number and time.
type SelfFunc func() gossip.Capability

// Service keeps the view current: it publishes this peer's heartbeat,
// feeds received heartbeats into the view, sweeps dead peers and keeps the
// DHT provider records. Build it with New, then Start it.
type Service struct {
	host   host.Host
	router *gossip.Router
	dht    *dht.IpfsDHT // nil: gossip only
	self   SelfFunc
	view   *View
	probe  *prober
	log    *slog.Logger

	changed chan struct{} // Changed's nudge to the heartbeat loop

	mu      sync.Mutex
	lastSeq uint64
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closed  bool
}

// New builds the service. kad may be nil (no DHT: LAN and bootstrap only).
// opts configure its view.
func New(h host.Host, router *gossip.Router, kad *dht.IpfsDHT, self SelfFunc, live Liveness, log *slog.Logger, opts ...Option) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	v := NewView(h.ID(), live, opts...)
	return &Service{host: h, router: router, dht: kad, self: self, view: v, probe: newProber(h, v, log), log: log,
		changed: make(chan struct{}, 1)}
}

// View is the live peer table.
func (s *Service) View() *View { return s.view }

// Start launches the heartbeat, receive, sweep and DHT loops. They stop at
// Close or when ctx ends.
func (s *Service) Start(ctx context.Context) error {
	sub, err := s.router.SubscribeCapabilities()
	if err != nil {
		return err
	}
	// The peer is in its own table from the start, not from when its
	// first heartbeat comes back through the mesh.
	c := s.record()
	s.view.Observe(&c, time.Now())
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.cancel != nil {
		sub.Cancel()
		return errors.New("swarm: service already started or closed")
	}
	ctx, s.cancel = context.WithCancel(ctx)
	greet := make(chan struct{}, 1)
	if err := s.router.CapsPeerJoins(ctx, func(peer.ID) {
		select {
		case greet <- struct{}{}:
		default:
		}
	}); err != nil {
		s.cancel()
		sub.Cancel()
		return err
	}
	s.wg.Add(4)
	go func() {
		defer s.wg.Done()
		s.probe.run(ctx)
	}()
	go s.receive(ctx, sub)
	go s.heartbeat(ctx, greet)
	go s.sweep(ctx)
	if s.dht != nil {
		s.wg.Add(1)
		go s.dhtLoop(ctx)
	}
	return nil
}

// Close stops the loops and waits for them. It is idempotent.
func (s *Service) Close() error {
	s.mu.Lock()
	s.closed = true
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
	return nil
}

// Changed tells the service that this peer's record changed (a role or
// shard added or removed): the next heartbeat goes out now, not at the
// next tick.
func (s *Service) Changed() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Beat publishes one heartbeat now.
func (s *Service) Beat(ctx context.Context) error {
	c := s.record()
	if err := s.router.PublishCapability(ctx, &c); err != nil {
		return fmt.Errorf("swarm: publishing heartbeat: %w", err)
	}
	return nil
}

// record is this peer's capability record, with the next sequence number.
func (s *Service) record() gossip.Capability {
	c := s.self()
	c.PeerID = s.host.ID().String()
	c.Seq = s.nextSeq()
	c.TimeMS = time.Now().UnixMilli()
	c.Addrs = c.Addrs[:0]
	for _, a := range s.host.Addrs() {
		if len(c.Addrs) == 32 {
			break
		}
		c.Addrs = append(c.Addrs, a.String())
	}
	return c
}

// nextSeq follows the wall clock so a restarted peer's records are newer
// than the ones it sent before, and never repeats within a run.
func (s *Service) nextSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := uint64(time.Now().UnixNano())
	if seq <= s.lastSeq {
		seq = s.lastSeq + 1
	}
	s.lastSeq = seq
	return seq
}

// heartbeat publishes on every tick, and also when a peer joins the topic
// (at most one extra beat per 200 ms), so a newcomer learns of this peer at
// once.
func (s *Service) heartbeat(ctx context.Context, greet <-chan struct{}) {
	defer s.wg.Done()
	t := time.NewTicker(s.view.live.Heartbeat)
	defer t.Stop()
	for {
		if err := s.Beat(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("heartbeat not published", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.changed:
		case <-greet:
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// receive feeds records into the view. A record is evidence that its
// peer is alive only when the peer itself sent it over its connection to
// this peer (or the peer is alive here already: its heartbeats just keep
// it so). A record that others relayed about a peer not alive here is
// only a lead: the peer is probed, and alive once it answers (see
// prober). So an old record replayed to a newcomer never makes a dead
// peer alive, whatever the clocks say.
func (s *Service) receive(ctx context.Context, sub *gossip.CapSubscription) {
	defer s.wg.Done()
	defer sub.Cancel()
	for {
		c, via, err := sub.NextFrom(ctx)
		if err != nil {
			return
		}
		id, err := peer.Decode(c.PeerID)
		if err != nil {
			continue
		}
		now := time.Now()
		switch {
		case id == s.host.ID():
			s.view.Observe(c, now)
		case via == id:
			s.learnAddrs(c)
			s.view.ObserveFrom(c, now, remoteAddr(s.host, id))
		case s.view.Alive(id):
			s.learnAddrs(c)
			s.view.Observe(c, now)
		default:
			s.learnAddrs(c)
			s.probe.heard(id, c, now)
		}
	}
}

// PendingProbes is how many peers heard of only through others wait to
// answer a probe before they count as alive.
func (s *Service) PendingProbes() int { return s.probe.pending() }

// learnAddrs puts a peer's announced addresses in the peerstore, so that
// streams to it can dial directly even when it was only heard through the mesh.
func (s *Service) learnAddrs(c *gossip.Capability) {
	id, err := peer.Decode(c.PeerID)
	if err != nil || id == s.host.ID() {
		return
	}
	addrs := make([]ma.Multiaddr, 0, len(c.Addrs))
	for _, a := range c.Addrs {
		if m, err := ma.NewMultiaddr(a); err == nil {
			addrs = append(addrs, m)
		}
	}
	s.host.Peerstore().AddAddrs(id, addrs, peerstore.RecentlyConnectedAddrTTL)
}

func (s *Service) sweep(ctx context.Context) {
	defer s.wg.Done()
	every := s.view.live.Heartbeat / 4
	if every < 50*time.Millisecond {
		every = 50 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, id := range s.view.Sweep(now) {
				s.log.Info("peer dead", "peer", id, "silent_for", s.view.live.DeadAfter())
			}
			// A peer a call found hung is routable again once it answers.
			s.view.RecheckHung(s.host, Progress{}.Defaults().ProbeTimeout)
		}
	}
}
