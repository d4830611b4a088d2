package bmcauth

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/swarm"
)

// Freshness is how long a table stays in force after it was received:
// bridges publish every second, so a bridge that missed four publications
// in a row is silent and loses its authority to the next live BMC.
const Freshness = 5 * time.Second

// maxIgnored bounds the publishers outside Config.Allowed that are
// remembered (and shown) at once.
const maxIgnored = 16

// Config says which BMCs a Service listens to and, with Serial, which board
// it bridges.
type Config struct {
	// Self is this peer's ID: a bridge publishes under it and trusts the
	// tables it verified itself.
	Self peer.ID
	// Allowed are the BMC peers whose tables are accepted (bmc_peers).
	Allowed []peer.ID
	// Serial, when set, is the board's serial device: this peer is then a
	// BMC bridge.
	Serial string
	// Key is the board's HMAC key (with Serial).
	Key []byte
	// ResetOnConnect pulses DTR when the board's port is opened (with Serial).
	ResetOnConnect bool
	// Heartbeat is the swarm's heartbeat interval: the board's liveness
	// period is not shorter, since the bridge forwards gossip heartbeats.
	Heartbeat time.Duration
	// OnTable, if set, is called after a table is accepted.
	OnTable func()
}

// Service keeps the last table of every allowed BMC, applies the authority
// rule, and with Config.Serial runs the bridge of this peer's board.
//
// Authority rule: among the allowed BMC peers (Config.Allowed, plus this
// peer when it is a bridge) whose last accepted table was received less
// than Freshness ago, the one with the lowest peer ID (base58 text order)
// is the authority. When it goes silent for longer than Freshness the next
// lowest live one takes over; when every BMC is silent no table is in force
// and the BMC declares nobody dead.
type Service struct {
	self    peer.ID
	router  *gossip.Router
	view    *swarm.View
	log     *slog.Logger
	allowed map[peer.ID]bool
	onTable func()
	bridge  *bridge // nil unless Config.Serial

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	mu        sync.Mutex
	sources   map[peer.ID]*Source   // last accepted table per allowed BMC
	ignored   map[peer.ID]time.Time // not-allowed publishers, last seen
	authority peer.ID               // as last logged
}

// New builds a service that receives tables through router and, as a
// bridge, follows the peers of view. A nil log discards.
func New(router *gossip.Router, view *swarm.View, cfg Config, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{
		self: cfg.Self, router: router, view: view, log: log, onTable: cfg.OnTable,
		allowed: map[peer.ID]bool{}, sources: map[peer.ID]*Source{}, ignored: map[peer.ID]time.Time{},
	}
	for _, id := range cfg.Allowed {
		s.allowed[id] = true
	}
	if cfg.Serial != "" {
		s.allowed[s.self] = true // a bridge trusts the tables it verified itself
		s.bridge = newBridge(s, cfg)
	}
	return s
}

// Start subscribes to the BMC topic and starts receiving tables and, as a
// bridge, driving the board. A board that is not plugged in is waited for.
// The service runs until ctx ends or Close.
func (s *Service) Start(ctx context.Context) error {
	sub, err := s.router.SubscribeBMCTables()
	if err != nil {
		return err
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Add(2)
	go s.receive(ctx, sub)
	go s.watch(ctx)
	if s.bridge != nil {
		s.wg.Add(1)
		go s.bridge.run(ctx)
	}
	allowed := make([]string, 0, len(s.allowed))
	for id := range s.allowed {
		allowed = append(allowed, id.String())
	}
	sort.Strings(allowed)
	path := ""
	if s.bridge != nil {
		path = s.bridge.path
	}
	s.log.Info("bmc: accepting tables", "bmc_peers", strings.Join(allowed, ","), "fresh_for", Freshness,
		"bridge", path)
	return nil
}

// Close stops the service and waits for its goroutines. It is idempotent.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		if s.cancel != nil {
			s.cancel()
		}
		s.wg.Wait()
	})
	return nil
}

// receive feeds tables from gossip into the state.
func (s *Service) receive(ctx context.Context, sub *gossip.BMCSubscription) {
	defer s.wg.Done()
	defer sub.Cancel()
	for {
		rec, err := sub.Next(ctx)
		if err != nil {
			return
		}
		if s.accept(rec, time.Now()) && s.onTable != nil {
			s.onTable()
		}
	}
}

// watch logs, once a second, the authority changes that silence causes.
func (s *Service) watch(ctx context.Context) {
	defer s.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case now := <-tick.C:
			s.mu.Lock()
			s.noteAuthorityLocked(now, nil)
			s.mu.Unlock()
		case <-ctx.Done():
			return
		}
	}
}
