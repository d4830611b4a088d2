package bmcauth

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/bmc"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/swarm"
)

// Bridge timing.
const (
	publishEvery  = time.Second
	forwardEvery  = 100 * time.Millisecond
	openWarnEvery = 30 * time.Second
	pingEvery     = 30 // publications between two PING round-trip probes
)

// bridge drives the board: it forwards the swarm's heartbeats to it,
// pushes partition plans, reads the verified table and publishes it.
type bridge struct {
	s         *Service
	path      string
	key       []byte
	opts      bmc.Options
	deadAfter time.Duration // the board's liveness rule

	mu        sync.Mutex // guards the status fields below
	connected bool
	boot      uint32
	rtt       time.Duration
	lastPub   time.Time
	published uint64
	lastErr   string

	// Owned by the run goroutine.
	fed       map[peer.ID]time.Time // the peer's LastSeen last forwarded
	fedAt     map[peer.ID]time.Time // when it was forwarded
	names     map[bmc.Handle]peer.ID
	models    map[bmc.Handle]string
	last      *bmc.Table
	lastCycle time.Time
	cycles    int
}

// BridgeStatus is the state of this peer's bridge to its board.
type BridgeStatus struct {
	Path      string
	Connected bool
	Boot      uint32
	RTT       time.Duration
	LastPub   time.Time
	Published uint64
	Err       string
}

func newBridge(s *Service, cfg Config) *bridge {
	// The bridge forwards each gossip heartbeat: the board's period must
	// not be shorter than the swarm's heartbeat interval.
	period := min(max(bmc.DefaultPeriod, cfg.Heartbeat), bmc.MaxPeriod)
	rule := bmc.Config{Period: period, Misses: bmc.DefaultMisses}
	return &bridge{
		s: s, path: cfg.Serial, key: cfg.Key, deadAfter: period * time.Duration(rule.Misses),
		opts: bmc.Options{Key: cfg.Key, ResetOnConnect: cfg.ResetOnConnect, Config: rule, Logger: s.log},
		fed:  map[peer.ID]time.Time{}, fedAt: map[peer.ID]time.Time{},
		names: map[bmc.Handle]peer.ID{}, models: map[bmc.Handle]string{},
	}
}

func (b *bridge) status() BridgeStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BridgeStatus{Path: b.path, Connected: b.connected, Boot: b.boot, RTT: b.rtt,
		LastPub: b.lastPub, Published: b.published, Err: b.lastErr}
}

func (b *bridge) run(ctx context.Context) {
	defer b.s.wg.Done()
	br := b.open(ctx)
	if br == nil {
		return
	}
	defer br.Close()
	b.onConnect(ctx, br)
	fwd := time.NewTicker(forwardEvery)
	defer fwd.Stop()
	pub := time.NewTicker(publishEvery)
	defer pub.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-br.Events():
			if !ok {
				return
			}
			switch ev.Kind {
			case bmc.EventConnected, bmc.EventRebooted:
				b.onConnect(ctx, br)
			case bmc.EventDisconnected:
				b.mu.Lock()
				b.connected = false
				b.mu.Unlock()
				b.s.log.Warn("bmc bridge: board gone, reconnecting; no tables until it is back", "path", b.path, "err", ev.Err)
			}
		case <-fwd.C:
			if b.forward(ctx, br) && time.Since(b.lastCycle) > 3*forwardEvery {
				b.cycle(ctx, br) // a node is due to die on the board: publish it now
			}
		case <-pub.C:
			b.cycle(ctx, br)
		}
	}
}

// open waits for the board until ctx ends, warning after 5 s and then
// every openWarnEvery while it does not answer.
func (b *bridge) open(ctx context.Context) *bmc.Bridge {
	b.s.log.Info("bmc bridge: opening the board in the background", "path", b.path, "dtr_reset", b.opts.ResetOnConnect)
	for wait := 5 * time.Second; ; wait = openWarnEvery {
		octx, cancel := context.WithTimeout(ctx, wait)
		br, err := bmc.Open(octx, b.path, &b.opts)
		cancel()
		if err == nil {
			return br
		}
		if ctx.Err() != nil {
			return nil
		}
		b.mu.Lock()
		b.lastErr = err.Error()
		b.mu.Unlock()
		b.s.log.Warn("bmc bridge: board not answering, still trying", "path", b.path, "err", err)
	}
}

// onConnect provisions the key into a fresh board (once per board: the
// board refuses later keys) and measures the link.
func (b *bridge) onConnect(ctx context.Context, br *bmc.Bridge) {
	info, err := br.Info(ctx)
	if err != nil {
		b.setErr(err)
		return
	}
	if !info.Keyed {
		if err := br.Provision(ctx, b.key); err != nil && !errors.Is(err, bmc.ErrProvisioned) {
			b.setErr(err)
			b.s.log.Error("bmc bridge: provisioning the key failed", "path", b.path, "err", err)
			return
		}
		b.s.log.Info("bmc bridge: provisioned bmc_key into the board's EEPROM (one time)", "path", b.path)
	}
	rtt, err := br.Ping(ctx)
	if err != nil {
		b.setErr(err)
		return
	}
	clear(b.fed) // a new or rebooted board has empty tables: feed everyone now
	clear(b.fedAt)
	b.last = nil
	b.mu.Lock()
	b.connected, b.boot, b.rtt = true, info.Boot, rtt
	b.mu.Unlock()
	b.s.log.Info("bmc bridge: board ready", "path", b.path, "boot", info.Boot, "fw", info.FW,
		"rtt", rtt.Round(10*time.Microsecond), "dead_after", b.deadAfter)
}

// forward sends the board a heartbeat for every tracked peer whose gossip
// heartbeat arrived since the last one forwarded, so a peer that stops
// beating on gossip stops beating on the board and the board's own clock
// declares it dead. It reports whether a tracked node is now due to die on
// the board while the last table read still shows it live.
func (b *bridge) forward(ctx context.Context, br *bmc.Bridge) bool {
	now := time.Now()
	peers := b.s.view.Peers()
	clear(b.names)
	clear(b.models)
	inView := make(map[peer.ID]bool, len(peers))
	for _, p := range peers {
		inView[p.ID] = true
		b.names[bmc.HandleFor([]byte(p.ID))] = p.ID
		for _, sh := range p.Cap.Shards {
			b.models[modelHandle(sh.ModelCID)] = sh.ModelCID
		}
	}
	for id := range b.fed {
		if !inView[id] {
			delete(b.fed, id)
			delete(b.fedAt, id)
		}
	}
	for _, p := range trackedPeers(peers) {
		if !p.LastSeen.After(b.fed[p.ID]) {
			continue
		}
		load := uint8(min(max(p.Cap.Load.Active, 0), 255))
		if _, err := br.Heartbeat(ctx, bmc.HandleFor([]byte(p.ID)), load); err != nil {
			b.setErr(err)
			if errors.Is(err, bmc.ErrFull) {
				b.makeRoom(ctx, br)
			}
			if errors.Is(err, bmc.ErrDisconnected) || errors.Is(err, bmc.ErrClosed) {
				return false
			}
			continue
		}
		b.fed[p.ID], b.fedAt[p.ID] = p.LastSeen, now
	}
	if b.last == nil {
		return false
	}
	for id, at := range b.fedAt {
		if now.Sub(at) > b.deadAfter+20*time.Millisecond && b.last.Live(bmc.HandleFor([]byte(id))) {
			return true
		}
	}
	return false
}

// trackedPeers are the peers the board follows: every peer alive in gossip
// (the board has room for bmc.MaxNodes), peers announcing shards first.
// Pipeline stages are what routing needs the BMC for, but any peer may
// route MoA queries too, so all are tracked while there is room.
func trackedPeers(peers []swarm.Peer) []swarm.Peer {
	var out []swarm.Peer
	for _, p := range peers {
		if p.Alive {
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].Cap.Shards) > 0 && len(out[j].Cap.Shards) == 0 })
	if len(out) > bmc.MaxNodes {
		out = out[:bmc.MaxNodes]
	}
	return out
}

// makeRoom frees a board slot: the node the board has known dead longest
// among those gossip does not show alive.
func (b *bridge) makeRoom(ctx context.Context, br *bmc.Bridge) {
	if b.last == nil {
		return
	}
	var victim *bmc.Node
	for i, nd := range b.last.Nodes {
		if id, ok := b.names[nd.Handle]; nd.Live || (ok && b.s.view.Alive(id)) {
			continue
		}
		if victim == nil || nd.Age > victim.Age {
			victim = &b.last.Nodes[i]
		}
	}
	if victim != nil {
		if _, err := br.ForgetNode(ctx, victim.Handle); err != nil {
			b.setErr(err)
		}
	}
}

// cycle pushes partition changes, forgets nodes the swarm has forgotten,
// reads the verified table and publishes it.
func (b *bridge) cycle(ctx context.Context, br *bmc.Bridge) {
	if !br.Connected() {
		return
	}
	b.lastCycle = time.Now()
	b.syncPartitions(ctx, br)
	if b.last != nil {
		for _, nd := range b.last.Nodes {
			if _, known := b.names[nd.Handle]; !known && !nd.Live {
				if _, err := br.ForgetNode(ctx, nd.Handle); err != nil {
					b.setErr(err)
				}
			}
		}
	}
	tab, err := br.Table(ctx)
	if err != nil {
		if errors.Is(err, bmc.ErrBadMAC) {
			err = fmt.Errorf("%w: the board holds another key than bmc_key (erase its EEPROM to re-key)", err)
		}
		b.setErr(err)
		return
	}
	b.last = tab
	if b.cycles++; b.cycles%pingEvery == 0 {
		if rtt, err := br.Ping(ctx); err == nil {
			b.mu.Lock()
			b.rtt = rtt
			b.mu.Unlock()
		}
	}
	now := time.Now()
	rec := gossip.NewBMCTable(b.s.self, NextSeq(), now, tab, b.names, b.models)
	if err := b.s.router.PublishBMCTable(ctx, rec); err != nil {
		if ctx.Err() == nil {
			b.setErr(err)
		}
		return
	}
	b.mu.Lock()
	b.lastPub, b.boot = now, tab.Boot
	b.published++
	b.lastErr = ""
	b.mu.Unlock()
}

// syncPartitions makes the board's partition table match the shard
// announcements of the peers in the view (alive or dead: a dead peer still
// holds its layers until the view forgets it).
func (b *bridge) syncPartitions(ctx context.Context, br *bmc.Bridge) {
	type key struct{ node, model bmc.Handle }
	want := map[key]bmc.Partition{}
	for h, id := range b.names {
		p, ok := b.s.view.Get(id)
		if !ok {
			continue
		}
		for _, sh := range p.Cap.Shards {
			k := key{h, modelHandle(sh.ModelCID)}
			if _, dup := want[k]; dup || sh.Start < 0 || sh.End > bmc.MaxLayer || sh.Start >= sh.End || len(want) >= bmc.MaxParts {
				continue // the board keeps one range per (node, model)
			}
			want[k] = bmc.Partition{Node: h, Model: k.model, First: uint16(sh.Start), End: uint16(sh.End)}
		}
	}
	have := map[key]bmc.Partition{}
	if b.last != nil {
		for _, p := range b.last.Parts {
			have[key{p.Node, p.Model}] = p
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			if _, err := br.DeletePartition(ctx, k.node, k.model); err != nil && !errors.Is(err, bmc.ErrNotFound) {
				b.setErr(err)
			}
		}
	}
	for k, p := range want {
		if have[k] != p {
			if _, err := br.SetPartition(ctx, p); err != nil {
				b.setErr(err)
			}
		}
	}
}

// setErr records the bridge's last error and logs it when it changes.
func (b *bridge) setErr(err error) {
	b.mu.Lock()
	changed := b.lastErr != err.Error()
	b.lastErr = err.Error()
	b.mu.Unlock()
	if changed {
		b.s.log.Warn("bmc bridge", "path", b.path, "err", err)
	}
}

var seqClock struct {
	sync.Mutex
	last uint64
}

// NextSeq is the publish sequence of the next BMC table record this process
// publishes. It follows the wall clock, so a restarted bridge's records are
// newer than those it published before.
func NextSeq() uint64 {
	seqClock.Lock()
	defer seqClock.Unlock()
	seq := max(uint64(time.Now().UnixNano()), seqClock.last+1)
	seqClock.last = seq
	return seq
}

// modelHandle names a model on the board: the handle of its binary CID, or
// of the string when it is not a CID.
func modelHandle(model string) bmc.Handle {
	if c, err := cid.Decode(model); err == nil {
		return bmc.HandleFor(c.Bytes())
	}
	return bmc.HandleFor([]byte(model))
}
