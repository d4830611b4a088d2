package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/shards"
)

// settleLayers implements pipeline.Originator.Verified: layers [lo,hi) of
// model loaded for this peer to settle a dispute on real traffic itself
// (pipeline/settle.go). The weights come from its store, or from a holder
// through the shard transfer, which checks them against the model's
// manifest before they are stored, as a reference layer's are
// (trust_ref.go); either disputed peer may send them. They count against
// max_memory while loaded: a range that does not fit is not settled. The
// returned function unloads them, and removes a slice fetched for this.
func (r *reference) settleLayers(ctx context.Context, model string, lo, hi int) (*pipeline.Shard, func(), error) {
	n := r.n
	if c, err := shards.ParseModelCID(model); err != nil || !shards.IsRoot(c) {
		return nil, nil, fmt.Errorf("%s is not a model root: its weights cannot be checked", model)
	}
	if lo < 0 || hi <= lo {
		return nil, nil, fmt.Errorf("layers [%d,%d) of %s: not a range", lo, hi, model)
	}
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	defer func() { <-r.sem }()
	start := time.Now()
	st := n.pipe.store
	se, ok := st.Slice(model, lo, hi)
	fetched := false
	if !ok {
		var err error
		if se, err = st.EnsureSlice(model, lo, hi); err != nil {
			if se, err = r.fetchRange(ctx, model, lo, hi); err != nil {
				return nil, nil, err
			}
			fetched = true
		}
	}
	drop := func() {
		if fetched {
			st.RemoveSlice(model, lo, hi)
		}
	}
	opts := n.engineOptions()
	// Two sessions (a replay, and one closing); isolated, so that the
	// replay's numbers do not depend on anything beside it.
	opts.Slots, opts.Isolated = 2, true
	opts.GPULayers = 0 // the CPU's numbers: references are judged by the CPU bounds
	mem, err := n.mem.reserve(fmt.Sprintf("layers [%d,%d) of %s, to settle a dispute", lo, hi, model), se.Path, opts)
	if err != nil {
		drop()
		return nil, nil, err
	}
	sh, err := pipeline.LoadShard(ctx, se.Path, model, lo, hi, opts)
	if err != nil {
		n.mem.release(mem)
		drop()
		return nil, nil, err
	}
	n.log.Info("trust: layers loaded to settle a dispute", "model", model, "layers", [2]int{lo, hi}, "bytes", se.Size,
		"fetched", fetched, "took", time.Since(start))
	return sh, func() {
		sh.Model.Close()
		n.mem.release(mem)
		drop()
	}, nil
}

// fetchRange gets the slice [lo,hi) of model from a peer holding it, as
// fetch does one layer (sources that hold layer lo first).
func (r *reference) fetchRange(ctx context.Context, model string, lo, hi int) (shards.SliceEntry, error) {
	n := r.n
	sources := r.sources(model, lo)
	// Holders of the whole range first: the others refuse it.
	view := r.sw.View()
	whole := func(id peer.ID) bool {
		p, ok := view.Get(id)
		return ok && slices.ContainsFunc(p.Cap.Shards, func(sh gossip.Shard) bool {
			return sh.ModelCID == model && sh.Start <= lo && hi <= sh.End
		})
	}
	slices.SortStableFunc(sources, func(a, b peer.ID) int {
		switch wa, wb := whole(a), whole(b); {
		case wa && !wb:
			return -1
		case wb && !wa:
			return 1
		}
		return 0
	})
	se, from, errs := r.fetchFirst(ctx, model, sources, func(ctx context.Context, id peer.ID) (shards.SliceEntry, error) {
		return shards.Fetch(ctx, r.h, id, n.pipe.store, model, lo, hi, shards.WithFetchLogger(n.log),
			shards.WithFetchTimeouts(refResponse, refStall), shards.WithoutResume())
	})
	switch {
	case from != "":
		n.log.Info("trust: layers fetched to settle a dispute", "model", model, "layers", [2]int{lo, hi}, "from", from, "bytes", se.Size)
		return se, nil
	case ctx.Err() != nil:
		return shards.SliceEntry{}, ctx.Err()
	case len(errs) == 0:
		return shards.SliceEntry{}, fmt.Errorf("no peer to fetch layers [%d,%d) of %s from", lo, hi, model)
	}
	return shards.SliceEntry{}, fmt.Errorf("layers [%d,%d) of %s: %w", lo, hi, model, errors.Join(errs...))
}
