package swarmsim

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/swarm"
)

// The model whose layers the scenario's holders serve, and the role its
// last peer serves.
const (
	Role        = "agent"
	ModelCID    = "sim-model"
	ModelLayers = 24
	modelRanges = 4 // shards of ModelLayers/modelRanges layers
)

// Scenario is one run: N peers, of which Holders hold the model's layers
// (spread over modelRanges ranges, each held by Holders/modelRanges
// peers), settle; the idle traffic is measured over Window; a newcomer
// joins and waits for full coverage of the model and a route; a peer on
// its route crashes and the newcomer waits to notice.
type Scenario struct {
	N       int           // peers before the newcomer
	Holders int           // default 8
	Window  time.Duration // idle measurement; default 10 s
	Warmup  time.Duration // after settling, before the idle measurement
	Join    time.Duration // between one peer's start and the next's; 0: all at once
	Limit   time.Duration // bound on every wait but every peer's noticing the crash (at least the bound for peers not in use); default 5 min
	Config  Config
	Logf    func(format string, args ...any) // progress, as each phase ends; nil: none
}

// Report is what a Scenario measured, all times simulated.
type Report struct {
	N                 int
	Settle            time.Duration // until every peer held every other alive
	Idle              Rates
	Tables            Tables
	HeapPerPeer       float64 // bytes of Go heap per peer after settling
	GoroutinesPerPeer float64
	Coverage          time.Duration // newcomer: every holder of the model and of the role in its view
	Route             time.Duration // newcomer: first route assembled
	Hops              int
	Providers         time.Duration // newcomer: every holder among the model\'s DHT providers, from its start
	Detect            time.Duration // newcomer, using its route: a crashed peer of the route not routable
	DetectAll         time.Duration // every live peer (most not using it): the crashed peer not alive
	Rerouted          bool          // newcomer: a route without the crashed peer assembled
	Reroute           time.Duration // newcomer: from the crash to that route
}

// idleBound is how long a peer not in use may take to hold a peer of a
// table of n rows dead: its lease (Liveness.IdleDeadAfter over the
// table's other peers), a tick of the sweep, and one poll of the harness.
func idleBound(cfg Config, n int) time.Duration {
	c := cfg.withDefaults()
	live := swarm.Liveness{Heartbeat: c.Heartbeat, Misses: c.Misses, Refresh: c.Refresh, ProbeRate: c.ProbeRate}
	return live.IdleDeadAfter(n) + c.Heartbeat/4 + Poll
}

// Bound is idleBound over the largest table the swarm had settled to (in
// a swarm past the bound of neighbours the tables are smaller than the
// swarm), with a row for the newcomer.
func (r Report) Bound(cfg Config) time.Duration {
	rows := r.N
	if r.Tables.MaxRows > 0 {
		rows = min(rows, int(r.Tables.MaxRows)+1)
	}
	return idleBound(cfg, rows)
}

func (r Report) String() string {
	return fmt.Sprintf("N=%d settle=%s idle: %s; %s; heap %.1f MiB and %.0f goroutines per peer; newcomer coverage=%s route=%s (%d hops) DHT providers=%s; crash noticed by route user %s, by all %s; rerouted=%v after %s",
		r.N, r.Settle, r.Idle, r.Tables, r.HeapPerPeer/(1<<20), r.GoroutinesPerPeer, r.Coverage, r.Route, r.Hops, r.Providers, r.Detect, r.DetectAll, r.Rerouted, r.Reroute)
}

// PerPeer is the process's Go heap (after a collection) and goroutines
// divided by n: what one simulated peer costs, with the simulated
// network's share.
func PerPeer(n int) (heap, goroutines float64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / float64(n), float64(runtime.NumGoroutine()) / float64(n)
}

// HolderShard is the i-th holder's shard.
func HolderShard(i int) gossip.Shard {
	per := ModelLayers / modelRanges
	r := i % modelRanges
	return gossip.Shard{ModelCID: ModelCID, ModelName: "sim", Quant: "q8_0", Start: r * per, End: (r + 1) * per,
		Layers: ModelLayers, Hidden: 1024, MemBytes: 64 << 20, MsPerLayer: 1}
}

// Run runs the scenario inside the caller's bubble. The error names the
// first wait that did not end within Limit; the report has what was
// measured up to it.
func (sc Scenario) Run() (Report, error) {
	if sc.Holders <= 0 {
		sc.Holders = 8
	}
	if sc.Window <= 0 {
		sc.Window = 10 * time.Second
	}
	if sc.Limit <= 0 {
		sc.Limit = 5 * time.Minute
	}
	logf := sc.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	rep := Report{N: sc.N}
	s := New(sc.Config)
	defer s.Close()
	// Holders are spread over the swarm, none of them a seed.
	every := max(1, (sc.N-1)/max(1, sc.Holders))
	held := 0
	for i := 0; i < sc.N; i++ {
		var spec Spec
		if i > 0 && i%every == 0 && held < sc.Holders {
			spec.Shards = []gossip.Shard{HolderShard(held)}
			held++
		} else if i == sc.N-1 && i > 0 {
			spec.Roles = []gossip.Role{{Role: Role, ModelCID: "sim-agent", TokPerSec: 20, Context: 4096}}
		}
		if _, err := s.Add(spec); err != nil {
			return rep, err
		}
		time.Sleep(sc.Join)
	}
	var err error
	if rep.Settle, err = s.Settle(sc.Limit, sc.Logf); err != nil {
		return rep, fmt.Errorf("settling: %w", err)
	}
	rep.HeapPerPeer, rep.GoroutinesPerPeer = PerPeer(sc.N)
	logf("N=%d settled in %s; heap %.1f MiB and %.0f goroutines per peer", sc.N, rep.Settle, rep.HeapPerPeer/(1<<20), rep.GoroutinesPerPeer)
	time.Sleep(sc.Warmup)
	rep.Idle = s.Measure(sc.Window)
	rep.Tables = s.Tables()
	logf("N=%d idle after %s: %s; %s", sc.N, sc.Warmup, rep.Idle, rep.Tables)

	nc, err := s.Add(Spec{})
	if err != nil {
		return rep, err
	}
	start := time.Now()
	// As node before a pipeline request: the holders are looked up in the
	// DHT while the table holds none; meanwhile the record exchange runs,
	// and the view is watched.
	learned := make(chan struct{})
	go func() {
		defer close(learned)
		if _, err := nc.Service.EnsureHolders(context.Background(), ModelCID); err != nil {
			logf("N=%d newcomer: holders not found in the DHT: %v", sc.N, err)
		}
	}()
	defer func() { <-learned }()
	var covered, routed bool
	if _, err := WaitUntil(sc.Limit, func() bool {
		if !covered && s.Covers(nc, ModelCID) && s.SeesRole(nc, Role) {
			covered, rep.Coverage = true, time.Since(start)
		}
		if !routed {
			if r, err := Route(nc, ModelCID, ModelLayers); err == nil {
				routed, rep.Route, rep.Hops = true, time.Since(start), len(r.Hops)
			}
		}
		return covered && routed
	}); err != nil {
		return rep, fmt.Errorf("newcomer: covered %v (%d of %d holders in its view, of %d rows), routed %v: %w",
			covered, len(nc.Service.View().HoldersOf(ModelCID)), len(s.Holders(ModelCID)), len(nc.Service.View().Peers()), routed, err)
	}
	logf("N=%d newcomer: coverage %s, route %s (%d hops)", sc.N, rep.Coverage, rep.Route, rep.Hops)
	if _, err = WaitUntil(sc.Limit, func() bool {
		found, err := nc.Service.FindProviders(context.Background(), swarm.ModelKey(ModelCID), 64)
		if err != nil {
			return false
		}
		got := map[peer.ID]bool{}
		for _, ai := range found {
			got[ai.ID] = true
		}
		for _, h := range s.Holders(ModelCID) {
			if !got[h.ID()] {
				return false
			}
		}
		return true
	}); err != nil {
		return rep, fmt.Errorf("newcomer finding the holders in the DHT: %w", err)
	}
	rep.Providers = time.Since(start).Round(time.Millisecond)
	logf("N=%d newcomer: every holder among the DHT's providers of the model %s after it started", sc.N, rep.Providers)

	r, _ := Route(nc, ModelCID, ModelLayers)
	var victim *Peer
	for _, h := range r.Hops {
		for _, p := range s.Live() {
			if p.ID().String() == h.Peer && p.Index >= s.cfg.Seeds && p != nc {
				victim = p
			}
		}
	}
	if victim == nil {
		return rep, fmt.Errorf("no peer of the route %v to crash", r.Hops)
	}
	// The newcomer uses its route as a pipeline request does (stage
	// streams open to every hop), so its control plane probes the route's
	// peers every heartbeat; the crash comes a heartbeat later, once the
	// keeper has seen them in use.
	release, err := nc.Use(context.Background(), r)
	if err != nil {
		return rep, err
	}
	defer release()
	time.Sleep(s.cfg.Heartbeat)
	victim.Crash()
	start = time.Now()
	if rep.Detect, err = WaitUntil(sc.Limit, func() bool { return !nc.Service.View().Routable(victim.ID()) }); err != nil {
		return rep, fmt.Errorf("route user noticing the crash: %w", err)
	}
	// The route user plans its next route as soon as it has noticed: each
	// range has another holder (when two or more per range were placed).
	if held >= 2*modelRanges {
		if _, err = WaitUntil(sc.Limit, func() bool {
			r, err := Route(nc, ModelCID, ModelLayers)
			return err == nil && !slices.ContainsFunc(r.Hops, func(h pipeline.Hop) bool { return h.Peer == victim.ID().String() })
		}); err != nil {
			return rep, fmt.Errorf("route user planning a route without the crashed peer: %w", err)
		}
		rep.Rerouted, rep.Reroute = true, time.Since(start)
	}
	// The other peers, most of which do not use it, have until the bound
	// for peers not in use, which grows with the table: a Limit shorter
	// than it (a quick run at 80 peers, whose bound is 330 s) must not end
	// the wait before the design promises an answer.
	if _, err = WaitUntil(max(sc.Limit, rep.Bound(sc.Config)), func() bool {
		for _, p := range s.Live() {
			if p.Service.View().Alive(victim.ID()) {
				return false
			}
		}
		return true
	}); err != nil {
		return rep, fmt.Errorf("every peer noticing the crash: %w", err)
	}
	rep.DetectAll = time.Since(start)
	return rep, nil
}
