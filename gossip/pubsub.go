package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Topic names. The version is part of the name: a v2 record goes on a v2 topic.
const (
	CapsTopic = "swarm/v1/caps"
	BMCTopic  = "swarm/v1/bmc"
)

// maxMessageBytes bounds every gossip message on the wire, whatever the topic.
const maxMessageBytes = 128 << 10

// Router is this peer's gossipsub router with the swarm's topics joined and
// their validators registered.
type Router struct {
	ps      *pubsub.PubSub
	host    host.Host
	key     crypto.PrivKey
	log     *slog.Logger
	gate    *Gate // nil: none
	seqs    *seqTracker
	bmcSeqs *seqTracker // publish seqs of BMC tables, apart from capability seqs
	caps    *pubsub.Topic
	rate    *rateLimit // records per signer on the capability topic
	mu      sync.Mutex
	topics  map[string]*pubsub.Topic
	closed  bool
	// handlers are topic event handlers, cancelled by Close.
	handlers []*pubsub.TopicEventHandler
}

// NewRouter starts gossipsub on h with strict signing and peer scoring and
// joins the capability topic. key must be h's private key.
func NewRouter(ctx context.Context, h host.Host, key crypto.PrivKey, log *slog.Logger, opts ...Option) (*Router, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := config{heartbeat: time.Second}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.gate != nil {
		cfg.ledger = cfg.gate.ledger
	}
	cfg.net = h.Network()
	params, thresholds := scoreParams(&cfg)
	psOpts := []pubsub.Option{
		pubsub.WithMessageSigning(true),
		pubsub.WithStrictSignatureVerification(true),
		pubsub.WithMaxMessageSize(maxMessageBytes),
		pubsub.WithPeerScore(params, thresholds),
		pubsub.WithPeerExchange(true),
		// A record goes to the mesh, not to every peer of the topic: with
		// flood publishing each record cost its author one copy per topic
		// peer, and the mesh forwarded those copies again.
		pubsub.WithFloodPublish(false),
	}
	if g := cfg.gate; g != nil {
		g.setCloser(func(p peer.ID) {
			// Off pubsub's event loop, which calls the inspector.
			go h.Network().ClosePeer(p)
		})
		psOpts = append(psOpts, pubsub.WithAppSpecificRpcInspector(g.inspect), pubsub.WithRawTracer(tracer{g}),
			pubsub.WithBlacklist(blacklist{g}))
	}
	if cfg.inspect != nil {
		psOpts = append(psOpts, pubsub.WithPeerScoreInspect(pubsub.ExtendedPeerScoreInspectFn(func(m map[peer.ID]*pubsub.PeerScoreSnapshot) {
			out := make(map[peer.ID]float64, len(m))
			for p, s := range m {
				out[p] = s.Score
			}
			cfg.inspect(out)
		}), time.Second))
	}
	ps, err := pubsub.NewGossipSub(ctx, h, psOpts...)
	if err != nil {
		return nil, fmt.Errorf("gossip: starting gossipsub: %w", err)
	}
	r := &Router{ps: ps, host: h, key: key, log: log, gate: cfg.gate, seqs: newSeqTracker(4096), topics: map[string]*pubsub.Topic{},
		rate: newRateLimit(cfg.heartbeat, floodBurst, 4096)}
	if err := ps.RegisterTopicValidator(CapsTopic, r.validateCapability); err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	r.bmcSeqs = newSeqTracker(256)
	if err := ps.RegisterTopicValidator(BMCTopic, r.validateBMCTable); err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	r.caps, err = r.Join(CapsTopic)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// PubSub exposes the underlying router for topics registered by other layers.
func (r *Router) PubSub() *pubsub.PubSub { return r.ps }

// Join joins a topic once and returns the handle.
func (r *Router) Join(name string) (*pubsub.Topic, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	if t, ok := r.topics[name]; ok {
		return t, nil
	}
	t, err := r.ps.Join(name)
	if err != nil {
		return nil, fmt.Errorf("gossip: joining %s: %w", name, err)
	}
	r.topics[name] = t
	return t, nil
}

// PublishCapability seals c with the router's key and publishes it.
func (r *Router) PublishCapability(ctx context.Context, c *Capability) error {
	b, err := SealCapability(c, r.key)
	if err != nil {
		return err
	}
	return r.caps.Publish(ctx, b)
}

// PublishSealed publishes a record this router sealed (SealCapability).
// It waits (until ctx ends) for a peer in this peer's mesh of the topic:
// a record published before the mesh formed would reach nobody, and
// records go out only when they change.
func (r *Router) PublishSealed(ctx context.Context, sealed []byte) error {
	return r.caps.Publish(ctx, sealed, pubsub.WithReadiness(pubsub.MinTopicSize(1)))
}

// SealCapability signs c with the router's key (c must name this peer).
func (r *Router) SealCapability(c *Capability) ([]byte, error) { return SealCapability(c, r.key) }

// SubscribeCapabilities returns a subscription yielding every valid, fresh
// capability record, including this peer's own.
func (r *Router) SubscribeCapabilities() (*CapSubscription, error) {
	s, err := r.caps.Subscribe(pubsub.WithBufferSize(256))
	if err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	return &CapSubscription{sub: s}, nil
}

// CapsPeerJoins calls fn (from one goroutine) each time a peer joins the
// capability topic, until ctx ends. (Publishing on every join was a storm
// at scale: newcomers ask for records through the swarm's record exchange.)
func (r *Router) CapsPeerJoins(ctx context.Context, fn func(peer.ID)) error {
	h, err := r.caps.EventHandler()
	if err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	r.mu.Lock()
	r.handlers = append(r.handlers, h)
	r.mu.Unlock()
	go func() {
		for {
			ev, err := h.NextPeerEvent(ctx)
			if err != nil {
				return
			}
			if ev.Type == pubsub.PeerJoin {
				fn(ev.Peer)
			}
		}
	}()
	return nil
}

// Subscription yields the records of one topic that its validator
// accepted, already decoded (the validator leaves them in ValidatorData).
type Subscription[T any] struct{ sub *pubsub.Subscription }

// Next blocks until the next record or ctx ends.
func (s *Subscription[T]) Next(ctx context.Context) (*T, error) {
	for {
		m, err := s.sub.Next(ctx)
		if err != nil {
			return nil, err
		}
		if rec, ok := m.ValidatorData.(*T); ok {
			return rec, nil
		}
	}
}

// NextFrom is Next, and also names the peer the record came from: its
// author when the author sent it over its own connection, else the peer
// that forwarded it.
func (s *Subscription[T]) NextFrom(ctx context.Context) (*T, peer.ID, error) {
	for {
		m, err := s.sub.Next(ctx)
		if err != nil {
			return nil, "", err
		}
		if rec, ok := m.ValidatorData.(*T); ok {
			return rec, m.ReceivedFrom, nil
		}
	}
}

// NextSealed is NextFrom, and also returns the record's sealed bytes as its
// author signed them (which others may verify again).
func (s *Subscription[T]) NextSealed(ctx context.Context) (*T, peer.ID, []byte, error) {
	for {
		m, err := s.sub.Next(ctx)
		if err != nil {
			return nil, "", nil, err
		}
		if rec, ok := m.ValidatorData.(*T); ok {
			return rec, m.ReceivedFrom, m.GetData(), nil
		}
	}
}

// Cancel ends the subscription.
func (s *Subscription[T]) Cancel() { s.sub.Cancel() }

// CapSubscription yields validated capability records.
type CapSubscription = Subscription[Capability]

// validateCapability is the capability topic's validator: it rejects (and
// so penalises the sender through peer scoring) oversize, malformed,
// unsigned and mis-signed records, and ignores stale ones. A signer that
// publishes faster than the flood limit (one record per heartbeat, a
// burst of floodBurst) has its excess records dropped: rejected when it
// sends them itself (it floods, and scores down for it), ignored when
// others relay them (they saw the record first inside the limit).
func (r *Router) validateCapability(ctx context.Context, from peer.ID, m *pubsub.Message) pubsub.ValidationResult {
	res := validator(r.log, r.seqs, "capability", checkCapability)(ctx, from, m)
	if res != pubsub.ValidationAccept {
		return res
	}
	author := m.GetFrom()
	if !r.rate.allow(author, time.Now()) {
		r.log.Debug("capability over the flood limit", "peer", author, "via", from)
		m.ValidatorData = nil
		if from == author {
			return pubsub.ValidationReject
		}
		return pubsub.ValidationIgnore
	}
	return res
}

// checkCapability opens a capability message and checks it was published
// by the peer it describes.
func checkCapability(m *pubsub.Message) (*Capability, peer.ID, error) {
	c, signer, err := OpenCapability(m.GetData())
	if err != nil {
		return nil, "", err
	}
	if err := checkAuthor(m, signer, "capability"); err != nil {
		return nil, "", err
	}
	return c, signer, nil
}

// Ban stops hearing p at once: its connections are closed (the gate, if
// any, refuses new ones while the ledger bans it) and pubsub drops its
// stream and mesh links. Wire it to the ledger's ban notifications
// (swarm.Trust.OnBan); it does not block.
func (r *Router) Ban(p peer.ID) {
	go r.ps.BlacklistPeer(p)
	if r.gate != nil {
		r.gate.Ban(p)
	}
}

// Gate is the router's gate (nil when it has none).
func (r *Router) Gate() *Gate { return r.gate }

// Close leaves all topics. The gossipsub router itself stops with the
// context it was created with.
func (r *Router) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	// Cancel event handlers here, before the topics close: pubsub reads its
	// handler map unlocked while removing a topic, so the cancel must
	// happen-before the close (a channel send in t.Close orders them).
	for _, h := range r.handlers {
		h.Cancel()
	}
	var errs []error
	for name, t := range r.topics {
		if err := t.Close(); err != nil {
			errs = append(errs, fmt.Errorf("gossip: closing %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// ErrClosed is returned by a closed router.
var ErrClosed = errors.New("gossip: router closed")
