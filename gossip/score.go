package gossip

import (
	"fmt"
	"math"
	"net"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Score thresholds. A peer below GossipThreshold gets no gossip from this
// peer and its gossip is ignored; below PublishThreshold it gets none of
// this peer's own messages; below GraylistThreshold every RPC it sends is
// dropped unread.
const (
	GossipThreshold   = -100
	PublishThreshold  = -500
	GraylistThreshold = -1000
)

// Application-specific scores (P5) from the ledger: a banned peer is far
// below the graylist threshold, a peer with verified work a little above
// zero (enough to be preferred for the mesh and its peer exchange).
const (
	BannedScore = 2 * GraylistThreshold
	ProvenScore = 10
)

// Colocation sets the IP-colocation factor (P6): beyond Threshold peers
// on one IP (for IPv6, also on one /64), each of them scores
// Weight × (peers − Threshold)². Loopback addresses count like any
// other (go-libp2p-pubsub leaves them out; loopbackCrowd puts them back).
type Colocation struct {
	// Threshold is how many peers one IP may hold before the penalty
	// (default 8: a household behind one NAT).
	Threshold int
	// Weight is the penalty's weight, negative (default -8: 12 peers on
	// one IP fall below the gossip threshold, 20 below the graylist).
	Weight float64
	// Whitelist holds networks exempt from it (e.g. a lab LAN).
	Whitelist []*net.IPNet
}

// Defaults of Colocation.
const (
	DefaultColocationThreshold = 8
	DefaultColocationWeight    = -8
)

func (c Colocation) withDefaults() Colocation {
	if c.Threshold <= 0 {
		c.Threshold = DefaultColocationThreshold
	}
	if c.Weight == 0 {
		c.Weight = DefaultColocationWeight
	}
	return c
}

// The weight (squared count) and the per-second decay of invalid messages
// in the score; the gate counts those of unscored peers the same way.
const (
	invalidMessageWeight = -100
	invalidMessageDecay  = 0.99
)

// scoreParams builds the peer-score parameters.
//
// Invalid messages cost a lot and decay slowly (a record over the flood
// limit, sent by its own author, counts as invalid: see
// validateCapability); time in mesh and first deliveries earn a little.
// Mesh delivery (P3, P3b) is not scored: a peer publishes its record only
// when it changes and refreshes it every few minutes, so an honest mesh
// peer on a quiet swarm delivers nothing for minutes, and a rule that
// expected a record every heartbeat would prune every honest peer. The
// application score (P5) comes from the ledger. The IP-colocation factor
// (P6) is on. The behaviour penalty (P7) counts GRAFTs during a backoff
// and broken IWANT promises.
func scoreParams(cfg *config) (*pubsub.PeerScoreParams, *pubsub.PeerScoreThresholds) {
	topic := func() *pubsub.TopicScoreParams {
		return &pubsub.TopicScoreParams{
			TopicWeight:                    1,
			TimeInMeshWeight:               0.01,
			TimeInMeshQuantum:              time.Second,
			TimeInMeshCap:                  100,
			FirstMessageDeliveriesWeight:   1,
			FirstMessageDeliveriesDecay:    0.9,
			FirstMessageDeliveriesCap:      20,
			InvalidMessageDeliveriesWeight: invalidMessageWeight,
			InvalidMessageDeliveriesDecay:  invalidMessageDecay,
		}
	}
	caps := topic()

	col := cfg.colocation.withDefaults()
	var crowd *loopbackCrowd // P6 on loopback, which pubsub does not count
	if cfg.net != nil {
		crowd = &loopbackCrowd{net: cfg.net, col: col}
	}
	l := cfg.ledger
	app := func(p peer.ID) float64 {
		if l != nil {
			if banned, _ := l.Banned(p); banned {
				return BannedScore
			}
			if l.Proven(p) {
				return ProvenScore + crowd.penalty(p)
			}
		}
		return crowd.penalty(p)
	}
	return &pubsub.PeerScoreParams{
			Topics:                      map[string]*pubsub.TopicScoreParams{CapsTopic: caps, BMCTopic: topic()},
			AppSpecificScore:            app,
			AppSpecificWeight:           1,
			IPColocationFactorWeight:    col.Weight,
			IPColocationFactorThreshold: col.Threshold,
			IPColocationFactorWhitelist: col.Whitelist,
			BehaviourPenaltyWeight:      -1,
			BehaviourPenaltyThreshold:   6,
			BehaviourPenaltyDecay:       0.9,
			DecayInterval:               time.Second,
			DecayToZero:                 0.01,
			RetainScore:                 10 * time.Minute,
		}, &pubsub.PeerScoreThresholds{
			GossipThreshold:             GossipThreshold,
			PublishThreshold:            PublishThreshold,
			GraylistThreshold:           GraylistThreshold,
			AcceptPXThreshold:           10,
			OpportunisticGraftThreshold: 5,
		}
}

// Option configures a Router.
type Option func(*config) error

type config struct {
	heartbeat  time.Duration
	colocation Colocation
	ledger     Ledger
	gate       *Gate
	inspect    func(map[peer.ID]float64)
	net        network.Network // the host's, for the colocation count on loopback
}

// WithHeartbeat sets the flood limit of the capability topic: an honest
// peer publishes at most one record per d (default 1 s; it publishes only
// when its record changes, and refreshes it every few minutes), so a
// signer that sustains more than one record per d beyond a burst of ten
// floods, and its excess records are dropped (see validateCapability).
func WithHeartbeat(d time.Duration) Option {
	return func(c *config) error {
		if d < 10*time.Millisecond || d > time.Hour {
			return fmt.Errorf("gossip: heartbeat %s out of range", d)
		}
		c.heartbeat = d
		return nil
	}
}

// WithColocation sets the IP-colocation factor.
func WithColocation(col Colocation) Option {
	return func(c *config) error {
		if col.Threshold < 0 {
			return fmt.Errorf("gossip: colocation threshold %d is negative", col.Threshold)
		}
		if !(col.Weight <= 0) || math.IsInf(col.Weight, 0) {
			return fmt.Errorf("gossip: colocation weight %v: want a finite weight <= 0", col.Weight)
		}
		c.colocation = col
		return nil
	}
}

// WithGate makes the router report to gate (which should also be the
// host's connection gater): it drops RPCs of gated peers and finds peers
// that refuse this peer's gossip stream. Peers are scored by the gate's
// ledger: a banned peer at BannedScore (graylisted: nothing it sends is
// read), its messages dropped wherever they come from; a proven peer at
// ProvenScore.
func WithGate(g *Gate) Option {
	return func(c *config) error {
		c.gate = g
		return nil
	}
}

// WithScoreInspectForTest calls f about every second with the score of
// every peer pubsub tracks.
func WithScoreInspectForTest(f func(map[peer.ID]float64)) Option {
	return func(c *config) error {
		c.inspect = f
		return nil
	}
}
