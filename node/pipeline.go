package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

// pipelineState is this peer's part in pipeline inference: the model store,
// the shard-transfer server, the stages it serves, and its originator.
type pipelineState struct {
	store      *shards.Store
	transfer   *shards.TransferServer
	stages     *pipeline.StageServer
	originator *pipeline.Originator
	drafter    *drafter      // pipeline.draft, or nil
	sources    *shardSources // what the peers this one fetched shard files from sent

	mu         sync.Mutex
	tokenizers map[string]*engine.Tokenizer
	fetch      []ShardSpec // shards to fetch by CID
	closed     bool        // set by the node's teardown
	view       *swarm.Service
	cancel     context.CancelFunc
	wg         sync.WaitGroup

	noteMu sync.Mutex
	noted  map[peer.ID]time.Time // when a peer was last logged as left out of routes
}

// startPipeline opens the store, serves shard transfers and stages, and
// loads the configured shards in the background: files at once, CIDs once
// the swarm view runs (they are fetched from peers, who may not be known
// yet).
func (n *Node) startPipeline(ctx context.Context) error {
	st, err := shards.OpenStore(filepath.Join(n.cfg.DataDir, "models"), shards.WithStoreLogger(n.log))
	if err != nil {
		return err
	}
	p := &pipelineState{store: st, tokenizers: map[string]*engine.Tokenizer{}, sources: &shardSources{}}
	if p.transfer, err = shards.NewTransferServer(n.host, st, n.log); err != nil {
		return err
	}
	p.stages = pipeline.NewStageServer(n.host, n.log)
	p.stages.PeerSessions, p.stages.PeerQueue = n.cfg.Pipeline.PeerSessions, n.cfg.Pipeline.PeerQueue
	p.stages.Refuse = n.refusing
	p.stages.Rank = n.rank
	// A stage opens sessions only on live members of the swarm it has heard
	// from itself (their signed records taught the host their addresses).
	// Alive, not Routable: the route is the originator's choice; this
	// only keeps a requester from making the stage dial peers it does not
	// know.
	p.stages.Known = func(id peer.ID) bool {
		s := n.Swarm()
		return s != nil && s.View().Alive(id)
	}
	if d := n.cfg.Pipeline.Draft; d != "" {
		opts := n.engineOptions()
		opts.Isolated = true // a generation's draft is its own, run alone
		p.drafter = &drafter{path: d, opts: opts}
	}
	n.pipe = p
	for _, s := range n.cfg.Shards {
		spec, _ := ParseShardSpec(s) // validated with the config
		if spec.CID != "" {
			p.fetch = append(p.fetch, spec)
			continue
		}
		// The header is checked now (a broken file stops the start); the
		// slicing and the weights happen in the background, while the API
		// answers.
		info, err := shards.ReadModelInfo(spec.Path)
		if err != nil {
			return err
		}
		if spec.End > info.Layers {
			return fmt.Errorf("shard %s:%d-%d: the model has %d layers", spec.Path, spec.Start, spec.End, info.Layers)
		}
		n.loads.run(func(ctx context.Context) {
			if err := n.loadShardFile(ctx, spec); err != nil && ctx.Err() == nil {
				n.log.Error("shard not loaded", "shard", s, "err", err)
				n.health.set("shard "+s, err.Error())
				return
			}
			go n.publishPS("shards") // takes n.mu: never from here, which Close waits for
		})
	}
	return nil
}

// startShardFetches fetches the shards named by CID, in the background:
// their holders are found through the swarm view, once it runs.
func (n *Node) startShardFetches(ctx context.Context) {
	p := n.pipe
	p.view = n.swarm
	bg, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	for _, spec := range p.fetch {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			n.fetchShard(bg, spec)
		}()
	}
}

// loadShardFile serves layers of a local GGUF: a full model is registered
// in the store and sliced there; a slice is served as it is.
func (n *Node) loadShardFile(ctx context.Context, spec ShardSpec) error {
	info, err := shards.ReadModelInfo(spec.Path)
	if err != nil {
		return err
	}
	if spec.End > info.Layers {
		return fmt.Errorf("shard %s:%d-%d: the model has %d layers", spec.Path, spec.Start, spec.End, info.Layers)
	}
	var modelCID, path string
	if info.LayerRange == [2]int{0, info.Layers} && info.HasEmbedding && info.HasHead {
		me, err := n.pipe.store.AddModel(spec.Path)
		if err != nil {
			return err
		}
		t := n.tasks.startIn(ctx, "slice", fmt.Sprintf("%s [%d,%d)", spec.Path, spec.Start, spec.End), "", 0)
		se, err := n.pipe.store.EnsureSlice(me.CID, spec.Start, spec.End)
		t.finish(err)
		if err != nil {
			return err
		}
		modelCID, path = me.CID, se.Path
	} else {
		if g, err := shards.ReadGGUFFile(spec.Path); err == nil {
			modelCID = g.String(shards.SourceCIDKey)
		}
		// The slice carries its model's manifest: keep it (checked against
		// the root), so this peer can serve it to originators.
		if _, err := n.pipe.store.AdoptManifest(spec.Path); err != nil {
			return fmt.Errorf("shard %s: %w", spec.Path, err)
		}
		// A slice from elsewhere is checked like one fetched from a peer
		// before it is served under the model's root.
		if m, _, ok := n.pipe.store.Manifest(modelCID); ok {
			t0 := time.Now()
			if err := m.VerifySlice(spec.Path, modelCID, info.LayerRange[0], info.LayerRange[1]); err != nil {
				return fmt.Errorf("shard %s: %w", spec.Path, err)
			}
			n.log.Info("shard checked against its model's manifest", "path", spec.Path, "model", modelCID,
				"took", time.Since(t0).Round(time.Millisecond))
		}
		if modelCID == "" {
			return fmt.Errorf("shard %s: a slice that does not record its model's CID; give the full model instead", spec.Path)
		}
		path = spec.Path
	}
	return n.serveShard(ctx, path, modelCID, spec.Start, spec.End)
}

func (n *Node) serveShard(ctx context.Context, path, modelCID string, a, b int) (err error) {
	start := time.Now()
	for _, sh := range n.pipe.stages.Local() {
		if sh.ModelCID == modelCID && sh.Start == a && sh.End == b {
			return nil // served already
		}
	}
	what := fmt.Sprintf("shard %s [%d,%d)", path, a, b)
	t := n.tasks.startIn(ctx, "load", what, "percent", 100)
	defer func() { t.finish(err) }()
	reserved, err := n.mem.reserve(what, path, n.engineOptions())
	if err != nil {
		return err
	}
	opts := n.loadOptions(t)
	opts.Isolated = opts.Isolated || !n.cfg.Pipeline.Batch
	sh, err := pipeline.LoadShard(ctx, path, modelCID, a, b, opts)
	if err != nil {
		n.mem.release(reserved)
		return fmt.Errorf("%s: %w", what, err)
	}
	n.mem.hold(sh.Model, reserved)
	n.pipe.stages.Add(sh)
	n.log.Info("serving shard", "model", sh.Name, "cid", modelCID, "layers", fmt.Sprintf("[%d,%d)", a, b),
		"of", sh.Layers, "mem_bytes", sh.MemBytes, "ms_per_layer", fmt.Sprintf("%.3f", sh.MsPerLayer),
		"load_time", time.Since(start).Round(time.Millisecond))
	return nil
}

// fetchShard pulls layers [a,b) of a model from a peer that holds them (or
// the whole model), verified by CID, and serves them. It retries with
// backoff until it succeeds or the peer stops.
func (n *Node) fetchShard(ctx context.Context, spec ShardSpec) {
	backoff := time.Second
	for {
		err := n.tryFetchShard(ctx, spec)
		if err == nil || ctx.Err() != nil {
			return
		}
		if errors.Is(err, errPermanent) || errors.Is(err, errNoMemory) {
			n.log.Error("shard not fetched", "model", spec.CID, "layers", fmt.Sprintf("[%d,%d)", spec.Start, spec.End), "err", err)
			n.health.set("shard "+spec.CID, err.Error())
			return
		}
		n.log.Warn("shard not fetched yet; retrying", "model", spec.CID, "layers", fmt.Sprintf("[%d,%d)", spec.Start, spec.End),
			"err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (n *Node) tryFetchShard(ctx context.Context, spec ShardSpec) error {
	// A slice already in the store is served under the name it was stored
	// by (an older store's slices are named by their model's file CID).
	if se, ok := n.pipe.store.Slice(spec.CID, spec.Start, spec.End); ok {
		return n.serveShard(ctx, se.Path, spec.CID, spec.Start, spec.End)
	}
	if root, ok := n.pipe.store.RootOf(spec.CID); ok {
		spec.CID = root
	} else if c, err := shards.ParseModelCID(spec.CID); err == nil && !shards.IsRoot(c) {
		return fmt.Errorf("%w: %s is a file CID and this peer does not have that file: layers fetched from peers are checked against the model's root, which only the whole file proves; name the model by its root (swarmd model info FILE prints it as cid)", errPermanent, spec.CID)
	}
	if se, ok := n.pipe.store.Slice(spec.CID, spec.Start, spec.End); ok {
		return n.serveShard(ctx, se.Path, spec.CID, spec.Start, spec.End)
	}
	if _, ok := n.pipe.store.Model(spec.CID); ok {
		se, err := n.pipe.store.EnsureSlice(spec.CID, spec.Start, spec.End)
		if err != nil {
			return err
		}
		return n.serveShard(ctx, se.Path, spec.CID, spec.Start, spec.End)
	}
	var lastErr error = fmt.Errorf("no peer announces model %s", spec.CID)
	what := fmt.Sprintf("layers [%d,%d)", spec.Start, spec.End)
	for _, id := range n.pipe.sources.order(n.shardSources(ctx, spec)) {
		if !n.usableSource(id) {
			continue // banned since the list was made
		}
		fctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		t := n.tasks.startIn(ctx, "fetch", fmt.Sprintf("%s:%d-%d from %s", spec.CID, spec.Start, spec.End, id), "bytes", 0)
		var got atomic.Int64
		var sent fetched
		se, err := shards.Fetch(fctx, n.host, id, n.pipe.store, spec.CID, spec.Start, spec.End,
			shards.WithProgress(func(done, total int64) { got.Store(done); t.update("download", done, total) }),
			shards.WithBlame(func(p peer.ID, err error) { n.sourceFailed(p, spec.CID, what, 0, err) }), sent.option())
		cancel()
		t.finish(err)
		if err != nil {
			n.sourceFailed(id, spec.CID, what, got.Load(), err)
			lastErr = fmt.Errorf("from %s: %w", id, err)
			continue
		}
		sent.ack(n, spec.CID, id)
		n.pipe.sources.good(id, se.Size)
		n.log.Info("shard fetched", "model", spec.CID, "layers", fmt.Sprintf("[%d,%d)", spec.Start, spec.End),
			"from", id, "cid", se.CID, "bytes", se.Size)
		return n.serveShard(ctx, se.Path, spec.CID, spec.Start, spec.End)
	}
	return lastErr
}

// shardSources lists peers to fetch from: live holders covering the range
// first, then other holders of the model, then DHT providers of it.
func (n *Node) shardSources(ctx context.Context, spec ShardSpec) []peer.ID {
	var cover, other []peer.ID
	seen := map[peer.ID]bool{n.host.ID(): true}
	sw := n.pipe.view
	for _, h := range sw.View().HoldersOf(spec.CID) {
		if seen[h.Peer.ID] {
			continue
		}
		seen[h.Peer.ID] = true
		if h.Shard.Start <= spec.Start && spec.End <= h.Shard.End {
			cover = append(cover, h.Peer.ID)
		} else {
			other = append(other, h.Peer.ID)
		}
	}
	out := append(cover, other...)
	if found, err := sw.FindProviders(ctx, swarm.ModelKey(spec.CID), 16); err == nil {
		for _, ai := range found {
			if !seen[ai.ID] {
				seen[ai.ID] = true
				n.host.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Hour)
				out = append(out, ai.ID)
			}
		}
	}
	return out
}

// tokenizer gives the originator a model's tokenizer: from a local file of
// the model when this peer has one, else from its header fetched from a
// holder (metadata only, no weights).
func (n *Node) tokenizer(ctx context.Context, m pipeline.ModelRef, holders []swarm.ShardHolder) (*engine.Tokenizer, error) {
	p := n.pipe
	p.mu.Lock()
	t := p.tokenizers[m.CID]
	p.mu.Unlock()
	if t != nil {
		return t, nil
	}
	path := ""
	for _, sh := range p.stages.Local() {
		if sh.ModelCID == m.CID {
			path = sh.Path
		}
	}
	if path == "" {
		if h, ok := p.store.Header(m.CID); ok {
			path = h.Path
		}
	}
	var lastErr error
	for _, h := range holders {
		if path != "" {
			break
		}
		if !n.usableSource(h.Peer.ID) {
			continue
		}
		var err error
		if path, err = shards.FetchHeader(ctx, n.host, h.Peer.ID, p.store, m.CID); err != nil {
			n.sourceFailed(h.Peer.ID, m.CID, "header", 0, err)
			lastErr = err
			path = ""
		}
	}
	if path == "" {
		return nil, fmt.Errorf("no holder gave its header: %v", lastErr)
	}
	t, err := engine.LoadTokenizer(path)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.tokenizers[m.CID] = t
	p.mu.Unlock()
	return t, nil
}

// errPermanent marks a shard fetch that retrying cannot fix.
var errPermanent = errors.New("cannot be fetched")

// manifest returns a model's manifest: from the store, else fetched from a
// holder (any holder will do: the bytes must hash to the root).
func (n *Node) manifest(ctx context.Context, root string, holders []swarm.ShardHolder) (*shards.Manifest, error) {
	if m, _, ok := n.pipe.store.Manifest(root); ok {
		return m, nil
	}
	lastErr := errors.New("no live holder")
	tried := map[peer.ID]bool{n.host.ID(): true}
	for _, h := range holders {
		if tried[h.Peer.ID] {
			continue
		}
		tried[h.Peer.ID] = true
		m, err := shards.FetchManifest(ctx, n.host, h.Peer.ID, n.pipe.store, root, shards.WithFetchLogger(n.log))
		if err == nil {
			return m, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("no holder served it: %w", lastErr)
}

func (n *Node) newPipelineOriginator() *pipeline.Originator {
	o := &pipeline.Originator{
		Host: n.host, View: n.swarm.View(), Local: n.pipe.stages, Exclude: n.excludedFromStages, Tokenizer: n.tokenizer, Log: n.log,
		Manifest:  n.manifest,
		RTT:       func(id peer.ID) time.Duration { return n.host.Peerstore().LatencyEWMA(id) },
		ConnKind:  n.nat.ConnKind,
		Progress:  n.cfg.Progress.swarm(),
		SpotCheck: pipeline.SpotCheck{Probability: n.cfg.Pipeline.SpotCheck, Tolerance: n.cfg.Pipeline.SpotTolerance, Probation: n.cfg.Pipeline.SpotProbation},
		Arch:      n.computeArch(),
	}
	o.RequireChecked, o.Audit = n.cfg.Pipeline.RequireChecked, n.cfg.Pipeline.SpotAudit
	o.PrefillChunk = n.cfg.Pipeline.PrefillChunk
	o.Acknowledge, o.Introduce = n.ledger.Ack, n.ledger.Introduce
	switch {
	case n.pipe.drafter != nil:
		o.Drafter = n.pipe.drafter.draft
	case n.cfg.Pipeline.DraftSwarm:
		o.Drafter = n.swarmDraft
	}
	return o
}

func (p *pipelineState) close() error {
	if p.closed {
		return nil
	}
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
	var err error
	if p.transfer != nil {
		p.transfer.Close()
	}
	if p.stages != nil {
		err = p.stages.Close()
	}
	if p.drafter != nil {
		p.drafter.close()
	}
	return err
}

// noteOnce reports whether to log, now, that id is left out of routes:
// once a minute per peer.
func (p *pipelineState) noteOnce(id peer.ID) bool {
	p.noteMu.Lock()
	defer p.noteMu.Unlock()
	if p.noted == nil {
		p.noted = map[peer.ID]time.Time{}
	}
	if time.Since(p.noted[id]) < time.Minute {
		return false
	}
	if len(p.noted) > 1024 {
		clear(p.noted)
	}
	p.noted[id] = time.Now()
	return true
}

// excludedFromStages reports peers a pipeline route must not use beyond
// those the view says are not Routable (the BMC's dead among them, see
// swarmOptions): those reached only through a relay that limits circuits
// to control traffic, which would cut the generation (a private swarm's
// relays, or member limits, carry it). Only pipeline routes apply this:
// the MoA originator has no such hook.
func (n *Node) excludedFromStages(id peer.ID) bool {
	// n.nat, not n.Host(): generations call this while Close holds the node's lock.
	if !n.nat.ControlOnly(id) {
		return false
	}
	if n.pipe.noteOnce(id) {
		n.log.Info("pipeline: not routing through a peer reached only through a relay limited to control traffic", "peer", id)
	}
	return true
}
