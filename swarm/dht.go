package swarm

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/llmswarm/llmswarm/shards"
)

// DHT keys. Members and models are provided under CIDs so that the DHT's
// provider records do the rendezvous. The key strings are versioned.
func nameKey(name string) cid.Cid {
	sum := sha256.Sum256([]byte(name))
	c, _ := shards.DigestCID(sum[:]) // a 32-byte digest always encodes
	return c
}

// MembersKey is provided by every peer of the swarm.
func MembersKey() cid.Cid { return nameKey("swarm/v1/members") }

// ModelKey is provided by every peer holding layers of the model. Model
// CIDs are used as they are; a name that is not a CID is hashed.
func ModelKey(model string) cid.Cid {
	if c, err := shards.ParseModelCID(model); err == nil {
		return c
	}
	return nameKey("swarm/v1/model/" + model)
}

const (
	provideEvery      = 10 * time.Minute
	discoverFirst     = 2 * time.Second
	discoverEvery     = 30 * time.Second // while lookups find members not connected
	discoverIdle      = 10 * time.Minute // the slowest, once they find none
	enoughMembers     = 16               // live peers past which members are not looked up
	maxDiscoverDials  = 16
	dhtRequestTimeout = 20 * time.Second
)

// dhtLoop provides this peer's keys and looks for members it is not yet
// connected to, so that peers outside the LAN and outside the current
// gossip mesh join it. A lookup that finds every member connected
// already doubles the wait before the next (to discoverIdle), and a peer
// that knows enoughMembers live peers looks up none: a member lookup asks
// every provider of the key and its answers list every member (some 80 KB
// in a swarm of 20), so at every 30 s it was most of an idle peer's
// traffic.
func (s *Service) dhtLoop(ctx context.Context) {
	defer s.wg.Done()
	var lastProvide time.Time
	var provided map[cid.Cid]bool
	delay := discoverFirst
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		if len(s.dht.RoutingTable().ListPeers()) == 0 {
			delay = min(2*delay, discoverEvery)
			continue
		}
		keys := s.provideKeys()
		if time.Since(lastProvide) > provideEvery || !sameKeys(provided, keys) {
			s.provide(ctx, keys)
			lastProvide, provided = time.Now(), keys
		}
		if s.liveCount() >= enoughMembers {
			// In the mesh already: a lookup would cost more than it finds.
			delay = min(2*delay, discoverIdle)
			continue
		}
		if s.discover(ctx) > 0 {
			delay = discoverEvery
		} else {
			delay = min(2*delay, discoverIdle)
		}
	}
}

func (s *Service) provideKeys() map[cid.Cid]bool {
	keys := map[cid.Cid]bool{MembersKey(): true}
	for _, sh := range s.self().Shards {
		keys[ModelKey(sh.ModelCID)] = true
	}
	if f := s.view.opts.stored; f != nil {
		for _, m := range f() {
			keys[ModelKey(m)] = true
		}
	}
	return keys
}

func sameKeys(a, b map[cid.Cid]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func (s *Service) provide(ctx context.Context, keys map[cid.Cid]bool) {
	for k := range keys {
		ctx, cancel := context.WithTimeout(ctx, dhtRequestTimeout)
		err := s.dht.Provide(ctx, k, true)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Debug("dht provide failed", "key", k, "err", err)
		}
	}
}

// discover connects to swarm members found in the DHT that this peer is
// not connected to, and returns how many it found.
func (s *Service) discover(ctx context.Context) int {
	found, err := s.FindProviders(ctx, MembersKey(), 64)
	if err != nil {
		s.log.Debug("dht member lookup failed", "err", err)
		return 0
	}
	dials := 0
	for _, ai := range found {
		if ai.ID == s.host.ID() || s.host.Network().Connectedness(ai.ID) == network.Connected {
			continue
		}
		if dials++; dials > maxDiscoverDials {
			return dials
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := s.host.Connect(cctx, ai); err != nil {
			s.log.Debug("dht member not reachable", "peer", ai.ID, "err", err)
		}
		cancel()
	}
	return dials
}

// FindProviders returns up to max peers that provide key.
func (s *Service) FindProviders(ctx context.Context, key cid.Cid, max int) ([]peer.AddrInfo, error) {
	if s.dht == nil {
		return nil, fmt.Errorf("swarm: no DHT configured")
	}
	ctx, cancel := context.WithTimeout(ctx, dhtRequestTimeout)
	defer cancel()
	var out []peer.AddrInfo
	for ai := range s.dht.FindProvidersAsync(ctx, key, max) {
		out = append(out, ai)
	}
	return out, nil
}

// startingFor is how long after its start a peer's lookups wait for a
// first DHT peer.
const startingFor = 10 * time.Second

// maxHolderFetches bounds the providers LearnHolders asks.
const maxHolderFetches = 32

// learnHoldersFor bounds EnsureHolders' lookup: a request waits for it.
const learnHoldersFor = 5 * time.Second

// EnsureHolders is what an originator does before it routes over model:
// when the holders in this peer's table do not cover every layer of the
// model (a newcomer of a swarm larger than the samples it got may hold
// some holders and not others), it looks the holders up (LearnHolders)
// for up to 5 s. It returns how many it learned; 0 and no error when the
// table covered the model already or model is empty. Either way the
// model is wanted for a while (View.Want): the table takes its holders
// past its bound of neighbours. node calls it before a pipeline request,
// and the simulation's route user does too.
func (s *Service) EnsureHolders(ctx context.Context, model string) (int, error) {
	s.view.Want(model, time.Now())
	if model == "" || covers(s.view.HoldersOf(model)) {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, learnHoldersFor)
	defer cancel()
	return s.LearnHolders(ctx, model)
}

// covers reports whether hs (ordered by first layer, as HoldersOf returns
// them) hold every layer of their model, by the layer count their shards
// name (the largest, if they disagree).
func covers(hs []ShardHolder) bool {
	layers := 0
	for _, h := range hs {
		layers = max(layers, h.Shard.Layers)
	}
	next := 0
	for _, h := range hs {
		if h.Shard.Start > next {
			return false
		}
		next = max(next, h.Shard.End)
	}
	return layers > 0 && next >= layers
}

// LearnHolders finds the holders of model through the DHT provider
// records (ModelKey) and asks each that is not alive here for its record
// through the record exchange: one that answers is alive, its record (and
// so its shards) in the view. It returns how many it learned. A peer whose
// table does not hold a model's holders yet (a newcomer of a swarm larger
// than its samples) finds them this way.
func (s *Service) LearnHolders(ctx context.Context, model string) (int, error) {
	s.view.Want(model, time.Now())
	if s.dht == nil {
		return 0, fmt.Errorf("swarm: no DHT configured")
	}
	// A peer that has just started (a newcomer asked at once) may have no
	// DHT peer yet to ask, its bootstrap dials under way: a lookup now
	// would end at once, empty. A peer alone for longer does not wait.
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	for s.dht.RoutingTable().Size() == 0 && time.Since(started) < startingFor {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("swarm: no DHT peer to ask yet: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	ctx, cancel := context.WithTimeout(ctx, dhtRequestTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var learned atomic.Int64
	// Each provider is asked as the lookup finds it, not once it ends.
	for ai := range s.dht.FindProvidersAsync(ctx, ModelKey(model), maxHolderFetches) {
		if ai.ID == s.host.ID() || s.view.Alive(ai.ID) {
			continue
		}
		s.host.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.xchg.Fetch(ctx, ai.ID); err != nil {
				s.log.Debug("a provider of the model did not give its record", "model", model, "peer", ai.ID, "err", err)
				return
			}
			learned.Add(1)
		}()
	}
	wg.Wait()
	return int(learned.Load()), nil
}
