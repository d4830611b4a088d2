package swarm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
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

// Service keeps the view current: it publishes this peer's record when it
// changes and refreshes it slowly, feeds received records into the view,
// answers and asks the record exchange (exchange.go), probes the peers of
// the table (liveness.go), sweeps dead peers and keeps the DHT provider
// records. Build it with New, then Start it.
type Service struct {
	host   host.Host
	router *gossip.Router
	dht    *dht.IpfsDHT // nil: gossip only
	self   SelfFunc
	view   *View
	probe  *prober
	keep   *keeper
	xchg   *exchange
	log    *slog.Logger

	changed chan struct{} // Changed's nudge to the publisher
	heard   chan struct{} // closed at the first answer of the record exchange
	hearOne sync.Once

	mu      sync.Mutex
	lastSeq uint64
	sealed  []byte            // the record last sealed, as signed: the record exchange hands it out
	pub     gossip.Capability // what it said
	unsent  bool              // it has not been published (no mesh peer came in time)
	pubs    uint64            // records published
	tagged  map[peer.ID]bool  // peers tagged for the connection manager (tagTable)
	started time.Time
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
	s := &Service{host: h, router: router, dht: kad, self: self, view: v, probe: newProber(h, v, log),
		keep: newKeeper(h, v, log), log: log, changed: make(chan struct{}, 1), heard: make(chan struct{}),
		tagged: map[peer.ID]bool{}}
	s.xchg = newExchange(s)
	v.holds = func(id peer.ID) bool { return s.xchg.heldWithin(id, time.Now()) }
	s.probe.lease = s.keep.currentLease
	s.probe.ask = func(ctx context.Context, id peer.ID) error {
		_, err := s.xchg.fetch1(ctx, id)
		return err
	}
	s.keep.check = s.xchg.check
	return s
}

// View is the live peer table.
func (s *Service) View() *View { return s.view }

// Start launches the publisher, receive, liveness, sweep and DHT loops
// and serves the record exchange. They stop at Close or when ctx ends.
func (s *Service) Start(ctx context.Context) error {
	sub, err := s.router.SubscribeCapabilities()
	if err != nil {
		return err
	}
	// The peer is in its own table from the start, not from when its
	// first record comes back through the mesh.
	c := s.record()
	s.view.Observe(&c, time.Now())
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.cancel != nil {
		sub.Cancel()
		return errors.New("swarm: service already started or closed")
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.started = time.Now()
	s.host.SetStreamHandler(RecordsProtocol, s.xchg.serve)
	s.host.SetStreamHandler(RecordsProtocolV1, s.xchg.serve)
	nf := &notifiee{
		connected:    func(id peer.ID) { s.spawn(func() { s.xchg.connected(ctx, id) }) },
		disconnected: func(id peer.ID) { s.spawn(func() { s.keep.disconnected(id) }) },
	}
	s.host.Network().Notify(nf)
	s.wg.Add(6)
	go func() {
		defer s.wg.Done()
		s.probe.run(ctx)
	}()
	go func() {
		defer s.wg.Done()
		s.keep.run(ctx)
	}()
	go func() {
		defer s.wg.Done()
		<-ctx.Done()
		s.host.Network().StopNotify(nf)
		s.host.RemoveStreamHandler(RecordsProtocol)
		s.host.RemoveStreamHandler(RecordsProtocolV1)
	}()
	go s.receive(ctx, sub)
	go s.announce(ctx)
	go s.sweep(ctx)
	if s.dht != nil {
		s.wg.Add(1)
		go s.dhtLoop(ctx)
	}
	// Peers connected before the start (a bootstrap peer dialled first).
	for _, id := range s.host.Network().Peers() {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.xchg.connected(ctx, id)
		}()
	}
	return nil
}

// spawn runs f in a goroutine Close waits for, unless the service is
// closed (connection events go on arriving while it closes).
func (s *Service) spawn(f func()) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		f()
	}()
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
// shard added or removed): the record goes out now (at most once per
// heartbeat), not at the next check.
func (s *Service) Changed() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// publishWait bounds how long a record waits for a peer in the gossip mesh.
const publishWait = 5 * time.Second

// firstRecordWait bounds how long this peer's first record waits for the
// first answer of the record exchange (heardFirst).
const firstRecordWait = 3 * time.Second

// heardFirst says that a peer answered this one's record exchange: its
// table now holds what the answer brought (a newcomer's contact hands it
// a sample of up to MaxSample records), so whether the table is full, and
// its record goes to gossip or is pushed (Beat), is known. Before that, a
// newcomer that published at once sent its first record to the whole
// swarm whatever the swarm's size: at a start of many peers at once, N²
// relays and signature checks (until this waited, 500 simulated peers did
// not get through their start: docs/scale.md).
func (s *Service) heardFirst() {
	s.hearOne.Do(func() {
		close(s.heard)
		s.Changed()
	})
}

// mayPublish says whether this peer's records may go out: once the
// exchange answered, or firstRecordWait after the start (a swarm's first
// peer, whom nobody answers until others join).
func (s *Service) mayPublish() bool {
	select {
	case <-s.heard:
		return true
	default:
	}
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	return !started.IsZero() && time.Since(started) >= firstRecordWait
}

// Beat seals this peer's record now, changed or not: from then on it is
// the record the record exchange hands out, whether or not gossip takes
// it. Before the record exchange's first answer (or firstRecordWait) it
// sends nothing (heardFirst). Once this peer's table is full (View.Full,
// counting the leads it is probing) it pushes it to the peers that hold
// this one (push.go); else it publishes it: with no peer on the
// capability topic not yet (it goes out when the first topic peer
// appears), else waiting up to publishWait for a mesh peer; if that fails
// it is published again at the next heartbeat.
func (s *Service) Beat(ctx context.Context) error {
	c := s.record()
	b, err := s.router.SealCapability(&c)
	if err != nil {
		return fmt.Errorf("swarm: sealing this peer's record: %w", err)
	}
	s.mu.Lock()
	s.sealed, s.pub, s.unsent = b, c, true
	s.mu.Unlock()
	// This peer's row holds the record as sealed (the record exchange
	// hands it out).
	s.view.observe(&c, b, time.Now(), netip.Addr{}, 0)
	if !s.mayPublish() {
		// Sealed and handed out by the exchange; sent once the first
		// answer says how large the swarm is (unsent stays true).
		return nil
	}
	if s.view.fullWith(s.probe.pending()) {
		// Past the bound of neighbours: to the peers holding this one,
		// not to the whole swarm (push.go). A newcomer counts the leads
		// its contact's sample brought, which it is still probing: each
		// answers a question that carries this peer's record, and takes
		// it if its table would.
		s.push(ctx, b)
		s.mu.Lock()
		if s.pub.Seq == c.Seq {
			s.unsent = false
		}
		s.mu.Unlock()
		return nil
	}
	if len(s.router.PubSub().ListPeers(gossip.CapsTopic)) == 0 {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, publishWait)
	err = s.router.PublishSealed(pctx, b)
	cancel()
	if err != nil {
		return fmt.Errorf("swarm: publishing this peer's record: %w", err)
	}
	s.mu.Lock()
	s.pubs++
	if s.pub.Seq == c.Seq {
		s.unsent = false
	}
	s.mu.Unlock()
	return nil
}

// Published is how many records this peer has published since it
// started: a peer whose record does not change publishes none (one per
// Refresh, if set).
func (s *Service) Published() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pubs
}

// Fetch asks id for its current record through the record exchange and
// puts it in the view (id answered: it is alive); see RecordsProtocol.
func (s *Service) Fetch(ctx context.Context, id peer.ID) (*gossip.Capability, error) {
	return s.xchg.Fetch(ctx, id)
}

// sealedSelf is this peer's record as last sealed by Beat, published or
// not (sealed now if Beat has not run yet).
func (s *Service) sealedSelf() ([]byte, error) {
	s.mu.Lock()
	b := s.sealed
	s.mu.Unlock()
	if b != nil {
		return b, nil
	}
	c := s.record()
	return s.router.SealCapability(&c)
}

// selfSeq is the sequence number of the record sealedSelf gives (0 when
// none is sealed yet: it seals a new one).
func (s *Service) selfSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sealed == nil {
		return 0
	}
	return s.pub.Seq
}

// record is this peer's capability record, with the next sequence number.
func (s *Service) record() gossip.Capability {
	c := s.self()
	c.PeerID = s.host.ID().String()
	c.Seq = s.nextSeq()
	c.TimeMS = time.Now().UnixMilli()
	c.Addrs = s.addrs()
	return c
}

// addrs is what this peer's record says of its addresses now.
func (s *Service) addrs() []string {
	var out []string
	for _, a := range s.host.Addrs() {
		if len(out) == 32 {
			break
		}
		out = append(out, a.String())
	}
	return out
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

// announce publishes this peer's record when it changes in a way that
// matters (see material), at most once per heartbeat so that a burst of
// changes is one record; again every Refresh, if set; and once when the first
// peer of the capability topic appears (what was published before
// reached nobody). Nothing is published when other peers join: a
// newcomer asks for records through the record exchange.
func (s *Service) announce(ctx context.Context) {
	defer s.wg.Done()
	live := s.view.live
	t := time.NewTicker(live.Heartbeat)
	defer t.Stop()
	publish := func() time.Time {
		if err := s.Beat(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("record not published", "err", err)
		}
		return time.Now()
	}
	last := publish()
	hadPeers := false
	for {
		nudged := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.changed:
			nudged = true
			if wait := live.Heartbeat - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}
		peers := len(s.router.PubSub().ListPeers(gossip.CapsTopic)) > 0
		s.mu.Lock()
		pub, unsent := s.pub, s.unsent
		s.mu.Unlock()
		cur := s.self()
		cur.Addrs = s.addrs()
		if nudged || material(&pub, &cur) || live.Refresh > 0 && time.Since(last) >= live.Refresh || peers && (!hadPeers || unsent) {
			last = publish()
		} else if pub.Seq != 0 {
			// This peer's own row shows its state now (its load, for
			// swarmctl peers and the API), under the published record's
			// sequence number: it is never sent.
			cur.PeerID, cur.Seq, cur.TimeMS = pub.PeerID, pub.Seq, time.Now().UnixMilli()
			s.view.observe(&cur, nil, time.Now(), netip.Addr{}, 0)
		}
		hadPeers = peers
	}
}

// receive feeds records into the view. A record is evidence that its
// peer is alive only when the peer itself sent it over its connection to
// this peer. A newer record that others relayed about a peer alive here
// updates what the table says of it but keeps it alive no longer; about a
// peer not alive here it is only a lead: the peer is probed, and alive
// once it answers (see prober). So an old record replayed to a newcomer
// never makes a dead peer alive, whatever the clocks say.
func (s *Service) receive(ctx context.Context, sub *gossip.CapSubscription) {
	defer s.wg.Done()
	defer sub.Cancel()
	for {
		c, via, sealed, err := sub.NextSealed(ctx)
		if err != nil {
			return
		}
		id, err := peer.Decode(c.PeerID)
		if err != nil || id == s.host.ID() {
			continue
		}
		now := time.Now()
		if via == id {
			s.learnAddrs(c)
			s.view.observe(c, sealed, now, remoteAddr(s.host, id), s.keep.currentLease())
			continue
		}
		s.lead(id, c, sealed, now)
	}
}

// lead takes a record of id that others handed on: it updates the row of
// a peer alive here, and makes any other peer the table would take (see
// View.Room) a candidate to probe.
func (s *Service) lead(id peer.ID, c *gossip.Capability, sealed []byte, now time.Time) {
	s.learnAddrs(c)
	if !s.view.update(c, sealed) && s.view.Room(id, c, now) {
		s.probe.heard(id, c, sealed, now)
	}
}

// liveCount is how many peers other than this one are alive in the view.
func (s *Service) liveCount() int {
	n := 0
	for _, p := range s.view.rows() {
		if p.Alive {
			n++
		}
	}
	return n
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

// sweep makes dead the peers whose lease ended unanswered (the keeper's
// probes extend the leases of peers that answer) and forgets long-dead
// ones, and every tagEvery tags the table's live peers for the
// connection manager (tagTable) and closes the connections this peer
// has no use for (closeIdleConns).
func (s *Service) sweep(ctx context.Context) {
	defer s.wg.Done()
	every := max(s.view.live.Heartbeat/4, 50*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	var lastTag time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, id := range s.view.Sweep(now) {
				s.log.Info("peer dead", "peer", id, "why", "unanswered for its lease")
			}
			if now.Sub(lastTag) >= tagEvery {
				lastTag = now
				for _, p := range s.view.LetGoBootstrap(now) {
					s.log.Debug("bootstrap peer let go: the table is full and it does not hold this peer", "peer", p.ID)
				}
				s.tagTable()
				s.closeIdleConns(now)
			}
			// A peer a call found hung is routable again once it answers.
			s.view.RecheckHung(s.host, Progress{}.Defaults().ProbeTimeout)
		}
	}
}
