package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/nat"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

// reference is this peer's own copy of the layers it checks other peers'
// claims with (verify.Reference): its own stage shards and role models
// first; else a one-layer slice cut from a model or a wider slice its
// store holds; else one fetched from a holder through the shard transfer
// (into the store, where the transfer verifies it). Slices are loaded on
// demand and a few are kept loaded.
type reference struct {
	n *Node
	// h and sw are the node's host and view, held here: the node's own
	// fields go nil at Close while a check may still be running.
	h      host.Host
	sw     *swarm.Service
	ledger *swarm.Trust
	sem    chan struct{} // one load or fetch at a time

	mu     sync.Mutex
	loaded map[string]*refModel // by slice path
	closed bool
}

type refModel struct {
	m       *engine.Model
	used    time.Time
	fetched bool // fetched for checks only: removed from the store once unloaded
	model   string
	layer   int
	mem     int64 // taken from max_memory
}

// Bounds of the reference: models kept loaded, the least recently used
// unloaded first (but none a check may still be using), and how long one
// fetch may take.
const (
	refKeep       = 4
	refIdle       = 3 * time.Minute
	refFetchLimit = 5 * time.Minute
	refResponse   = 20 * time.Second // for the source's answer (it may cut the slice first)
	refStall      = 10 * time.Second // for the next bytes of the body
)

// Layer implements verify.Reference.
func (r *reference) Layer(ctx context.Context, model string, l int) (*engine.Model, error) {
	n := r.n
	if m := n.verifyLookup(model, l, l+1); m != nil {
		return m, nil // this peer's own shard or role model
	}
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-r.sem }()
	st := n.pipe.store
	se, ok := st.Slice(model, l, l+1)
	fetched := false
	if !ok {
		var err error
		if se, err = st.EnsureSlice(model, l, l+1); err != nil {
			if se, err = r.fetch(ctx, model, l); err != nil {
				return nil, err
			}
			fetched = true
		}
	}
	return r.load(ctx, se, model, l, fetched)
}

// load returns the loaded slice, loading it if need be.
func (r *reference) load(ctx context.Context, se shards.SliceEntry, model string, l int, fetched bool) (*engine.Model, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, engine.ErrClosed
	}
	if rm := r.loaded[se.Path]; rm != nil {
		rm.used = time.Now()
		r.mu.Unlock()
		return rm.m, nil
	}
	r.mu.Unlock()
	opts := r.n.engineOptions()
	opts.Slots, opts.Queue, opts.Context = 2, 8, 256
	// On the CPU: checks compare a peer with this peer's build (its arch
	// without a GPU's), within the bounds measured for CPUs.
	opts.GPULayers = 0
	// A reference counts against max_memory like what the peer serves:
	// one that does not fit leaves the claim unchecked, not the device
	// out of memory.
	mem, err := r.n.mem.reserve(fmt.Sprintf("reference layer %d of %s", l, model), se.Path, opts)
	if err != nil {
		return nil, err
	}
	m, err := engine.Load(ctx, se.Path, opts)
	if err != nil {
		r.n.mem.release(mem)
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		m.Close()
		r.n.mem.release(mem)
		return nil, engine.ErrClosed
	}
	r.loaded[se.Path] = &refModel{m: m, used: time.Now(), fetched: fetched, model: model, layer: l, mem: mem}
	r.evictLocked()
	return m, nil
}

// evictLocked unloads the least recently used models beyond refKeep that
// no check has used for refIdle (a check is bounded well within it).
func (r *reference) evictLocked() {
	for len(r.loaded) > refKeep {
		var victim string
		var oldest time.Time
		for p, rm := range r.loaded {
			if time.Since(rm.used) > refIdle && (victim == "" || rm.used.Before(oldest)) {
				victim, oldest = p, rm.used
			}
		}
		if victim == "" {
			return
		}
		rm := r.loaded[victim]
		delete(r.loaded, victim)
		rm.m.Close()
		r.n.mem.release(rm.mem)
		if rm.fetched {
			r.n.pipe.store.RemoveSlice(rm.model, rm.layer, rm.layer+1)
		}
	}
}

// fetch gets the one-layer slice [l,l+1) of model from a peer holding it:
// peers this peer has verified first, never a banned one. The shard
// transfer checks what arrives before it is stored.
func (r *reference) fetch(ctx context.Context, model string, l int) (shards.SliceEntry, error) {
	n := r.n
	// Only a model named by its root can be checked on arrival: a slice
	// of a model named by a file CID could be anything, and a poisoned
	// reference would make honest peers fail.
	if c, err := shards.ParseModelCID(model); err != nil || !shards.IsRoot(c) {
		return shards.SliceEntry{}, fmt.Errorf("%s is not a model root: no reference is fetched for it", model)
	}
	var sent fetched
	se, from, errs := r.fetchFirst(ctx, model, r.sources(model, l), func(ctx context.Context, id peer.ID) (shards.SliceEntry, error) {
		return shards.Fetch(ctx, r.h, id, n.pipe.store, model, l, l+1, shards.WithFetchLogger(n.log),
			shards.WithFetchTimeouts(refResponse, refStall), shards.WithoutResume(), sent.option())
	})
	switch {
	case from != "":
		sent.ack(n, model, from)
		n.log.Info("trust: reference layer fetched", "model", model, "layer", l, "from", from, "bytes", se.Size)
		return se, nil
	case ctx.Err() != nil:
		return shards.SliceEntry{}, ctx.Err()
	case len(errs) == 0:
		return shards.SliceEntry{}, fmt.Errorf("no peer to fetch layer %d of %s from", l, model)
	}
	return shards.SliceEntry{}, fmt.Errorf("layer %d of %s: %w", l, model, errors.Join(errs...))
}

// fetchFirst tries get on each of first in turn, then, if none served,
// on the DHT's other providers of model, until one serves: it returns
// what that one sent and its ID, or the errors of those tried (none:
// there was no source). The DHT is asked last, not first: its lookup
// waits on each peer it asks that does not answer, up to the DHT's
// request timeout, and the stage a failover routes around, frozen with
// its connections open, is such a peer; the spare's check would wait
// that long for a layer the view's other holders send at once.
func (r *reference) fetchFirst(ctx context.Context, model string, first []peer.ID,
	get func(context.Context, peer.ID) (shards.SliceEntry, error)) (shards.SliceEntry, peer.ID, []error) {
	var errs []error
	try := func(ids []peer.ID) (shards.SliceEntry, peer.ID) {
		for _, id := range ids {
			if nat.RelayedOnly(r.h, id) {
				// Relays limit bytes: a source reached only through one
				// cannot send layers, and a direct dial through its NAT
				// would only time out.
				errs = append(errs, fmt.Errorf("%s: reachable only through a relay", id))
				continue
			}
			// The dial for a direct connection is bounded too. A source
			// that stalls is dropped quickly for the next one; what it
			// sent is not kept (reference fetches are not resumed).
			fctx, cancel := context.WithTimeout(network.WithDialPeerTimeout(ctx, refResponse), refFetchLimit)
			se, err := get(fctx, id)
			cancel()
			if err == nil {
				return se, id
			}
			if ctx.Err() != nil {
				return shards.SliceEntry{}, ""
			}
			errs = append(errs, err)
		}
		return shards.SliceEntry{}, ""
	}
	if se, id := try(first); id != "" || ctx.Err() != nil {
		return se, id, errs
	}
	se, id := try(r.providers(ctx, model, first))
	return se, id, errs
}

// sources lists the peers of this peer's view that may serve layer l of
// model: holders of a shard covering it, then holders of the model as a
// role; proven peers first within each; never a peer that is not
// Routable (banned, or found hung and silent since).
func (r *reference) sources(model string, l int) []peer.ID {
	self := r.h.ID()
	var cover, role []peer.ID
	view := r.sw.View()
	for _, p := range view.Peers() {
		// Not Routable: a peer found hung (the one a failover routes
		// around, whose spare this check is for) would hold the fetch
		// until the check's deadline.
		if !view.Routable(p.ID) || p.ID == self {
			continue
		}
		for _, sh := range p.Cap.Shards {
			if sh.ModelCID == model && sh.Start <= l && l < sh.End && !slices.Contains(cover, p.ID) {
				cover = append(cover, p.ID)
			}
		}
		for _, ro := range p.Cap.Roles {
			if ro.ModelCID == model && !slices.Contains(role, p.ID) {
				role = append(role, p.ID)
			}
		}
	}
	return r.usable(nil, cover, role)
}

// providers lists the DHT's providers of model not in skip, proven first,
// none banned, hung or this peer.
func (r *reference) providers(ctx context.Context, model string, skip []peer.ID) []peer.ID {
	var found []peer.ID
	if ais, err := r.sw.FindProviders(ctx, swarm.ModelKey(model), 16); err == nil {
		for _, ai := range ais {
			r.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Hour)
			found = append(found, ai.ID)
		}
	}
	return r.usable(skip, found)[len(skip):]
}

// usable appends to out each group's peers, proven ones first within a
// group, leaving out banned and hung peers, this peer and those already
// in out.
func (r *reference) usable(out []peer.ID, groups ...[]peer.ID) []peer.ID {
	self := r.h.ID()
	view := r.sw.View()
	out = slices.Clone(out)
	for _, group := range groups {
		slices.SortStableFunc(group, func(a, b peer.ID) int {
			pa, pb := r.ledger.Proven(a), r.ledger.Proven(b)
			switch {
			case pa && !pb:
				return -1
			case pb && !pa:
				return 1
			}
			return 0
		})
		for _, id := range group {
			if banned, _ := r.ledger.Banned(id); !banned && id != self && !view.Hung(id) && !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// close unloads every reference model. Slices fetched for checks stay in
// the store for the next run.
func (r *reference) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for p, rm := range r.loaded {
		rm.m.Close()
		r.n.mem.release(rm.mem)
		delete(r.loaded, p)
	}
}
