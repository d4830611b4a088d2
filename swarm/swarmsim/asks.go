package swarmsim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/pipeline"
)

// maxReroutes is how many times an ask replans around a failed hop, as
// node's pipeline requests do (pipeline's default MaxReroutes).
const maxReroutes = 8

// Ask is one pipeline request of p over the model, as node makes it
// without the inference: it looks the holders up when its table does not
// cover the model (EnsureHolders), assembles a route over its view, opens
// a stage stream to every hop (Use), holds them for hold, and, when a hop
// cannot be reached or has gone by the end (a crash mid-request, which
// node's stage streams notice), replans without it and goes on, up to
// maxReroutes times. It returns how many times it rerouted, and an error
// when the request would have failed.
func (s *Sim) Ask(ctx context.Context, p *Peer, model string, layers int, hold time.Duration) (reroutes int, err error) {
	if _, err := p.Service.EnsureHolders(ctx, model); err != nil {
		return 0, fmt.Errorf("looking up the holders: %w", err)
	}
	failed := map[peer.ID]bool{}
	for {
		r, err := routeIn(p.Service.View(), p.ID(), model, layers, failed)
		if err != nil {
			return reroutes, fmt.Errorf("after %d reroutes: %w", reroutes, err)
		}
		bad, err := s.hold(ctx, p, r, hold)
		if err == nil {
			return reroutes, nil
		}
		if reroutes == maxReroutes {
			return reroutes, fmt.Errorf("%d reroutes, last: %w", reroutes, err)
		}
		failed[bad] = true
		reroutes++
	}
}

// hold uses route for d and reports the first hop that failed: one whose
// stage stream did not open, or that has gone by the end.
func (s *Sim) hold(ctx context.Context, p *Peer, r pipeline.Route, d time.Duration) (peer.ID, error) {
	for _, h := range r.Hops {
		id, err := peer.Decode(h.Peer)
		if err != nil {
			return "", err
		}
		if id == p.ID() {
			continue
		}
		release, err := p.Use(ctx, pipeline.Route{Hops: []pipeline.Hop{h}})
		if err != nil {
			return id, err
		}
		defer release()
	}
	time.Sleep(d)
	for _, h := range r.Hops {
		id, _ := peer.Decode(h.Peer)
		if q := s.Find(id); q != nil && q.Gone() {
			return id, fmt.Errorf("hop %s went away during the request", id)
		}
	}
	return "", nil
}

// Churn is a schedule of peers coming and going: every Every one peer
// (never a seed nor one of Keep) leaves or crashes, chosen at random, and
// a new peer with the same Spec joins in its place (a holder's
// replacement holds the same layers, as a device that takes up the
// departed one's shard would).
type Churn struct {
	Every time.Duration
	Keep  []*Peer
	Rand  *rand.Rand
}

// Step makes one change, the peer that goes chosen among those of among
// that may go (nil: all), and returns the peer that went and the one that
// came.
func (s *Sim) Step(c Churn, among []*Peer) (gone, came *Peer, err error) {
	if among == nil {
		among = s.Live()
	}
	var cands []*Peer
	for _, p := range among {
		keep := p.Gone() || p.Index < s.cfg.Seeds
		for _, k := range c.Keep {
			keep = keep || k == p
		}
		if !keep {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return nil, nil, fmt.Errorf("swarmsim: no peer to churn")
	}
	gone = cands[c.Rand.IntN(len(cands))]
	if c.Rand.IntN(2) == 0 {
		gone.Crash()
	} else {
		gone.Leave()
	}
	came, err = s.Add(Spec{Shards: append([]gossip.Shard(nil), gone.Spec.Shards...), Roles: gone.Spec.Roles, Link: gone.Spec.Link})
	return gone, came, err
}

// Find returns the peer with id (gone or not).
func (s *Sim) Find(id peer.ID) *Peer {
	for _, p := range s.Peers() {
		if p.ID() == id {
			return p
		}
	}
	return nil
}
