package swarmsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pquic "github.com/libp2p/go-libp2p/p2p/transport/quic"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/swarm"
)

// Config is the swarm's settings; every zero field takes node's default.
type Config struct {
	Link       Link          // every peer's link unless its Spec names one
	Heartbeat  time.Duration // node's heartbeat; default swarm.DefaultHeartbeat
	Misses     int           // node's dead_after_misses; default swarm.DefaultMisses
	Refresh    time.Duration // node's record_refresh; default 0: never
	ProbeRate  float64       // node's probe_rate; default swarm.DefaultProbeRate
	ConnLow    int           // node's conn_low; default 128
	ConnHigh   int           // node's conn_high; default 192
	Neighbours int           // node's peer_table.neighbours; default swarm.DefaultNeighbours
	Seeds      int           // the first Seeds peers are every later peer's bootstrap peers; default 1
	Log        *slog.Logger  // nil: discard
}

func (c Config) withDefaults() Config {
	if c.Heartbeat <= 0 {
		c.Heartbeat = swarm.DefaultHeartbeat
	}
	if c.Misses <= 0 {
		c.Misses = swarm.DefaultMisses
	}
	if !(c.ProbeRate > 0) {
		c.ProbeRate = swarm.DefaultProbeRate
	}
	if c.ConnLow <= 0 {
		c.ConnLow = 128
	}
	if c.ConnHigh <= 0 {
		c.ConnHigh = 192
	}
	if c.Neighbours == 0 {
		c.Neighbours = swarm.DefaultNeighbours
	}
	if c.Seeds <= 0 {
		c.Seeds = 1
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

// Spec is what one peer holds and how it is linked.
type Spec struct {
	Shards []gossip.Shard
	Roles  []gossip.Role
	Link   *Link // nil: Config.Link
}

// Peer is one simulated peer with its control plane.
type Peer struct {
	Index   int
	Host    host.Host
	Router  *gossip.Router
	DHT     *dht.IpfsDHT
	Service *swarm.Service
	Spec    Spec
	Joined  time.Time

	thermal atomic.Value // a string, gossip.Thermal*: Heat changes it
	ep      *endpoint
	protos  *protoCounter
	ctx     context.Context // ends at close
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the seed dials
	once    sync.Once
	gone    atomic.Bool // left or crashed
}

// Sim is a simulated swarm. Build it with New inside a synctest bubble.
type Sim struct {
	cfg Config
	net *simNet

	mu    sync.Mutex
	peers []*Peer
}

// New starts an empty simulated network. Close tears it down (New
// registers it with t.Cleanup, which runs inside the bubble).
func New(cfg Config) *Sim {
	s := &Sim{cfg: cfg.withDefaults(), net: newNetwork()}
	s.cfg.Link = s.cfg.Link.withDefaults()
	s.net.sim.Logger = s.cfg.Log
	s.net.sim.Start()
	return s
}

// Peers returns every peer ever added, gone ones included, by index.
func (s *Sim) Peers() []*Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Peer(nil), s.peers...)
}

// Live returns the peers that have neither left nor crashed.
func (s *Sim) Live() []*Peer {
	var out []*Peer
	for _, p := range s.Peers() {
		if !p.Gone() {
			out = append(out, p)
		}
	}
	return out
}

// Gone reports whether the peer left or crashed.
func (p *Peer) Gone() bool { return p.gone.Load() }

// ID is the peer's libp2p ID.
func (p *Peer) ID() peer.ID { return p.Host.ID() }

// Traffic is what the peer sent so far.
func (p *Peer) Traffic() Traffic { return p.ep.traffic() }

// Add starts one peer with node's wiring of the control plane and starts
// dialling the seed peers; it takes no simulated time. It must run inside
// the bubble.
func (s *Sim) Add(spec Spec) (*Peer, error) {
	s.mu.Lock()
	idx := len(s.peers)
	var seeds []peer.AddrInfo
	for _, sp := range s.peers[:min(len(s.peers), s.cfg.Seeds)] {
		if !sp.Gone() {
			seeds = append(seeds, peer.AddrInfo{ID: sp.ID(), Addrs: sp.Host.Addrs()})
		}
	}
	s.mu.Unlock()
	link := s.cfg.Link
	if spec.Link != nil {
		link = spec.Link.withDefaults()
	}
	p := &Peer{Index: idx, Spec: spec, Joined: time.Now()}
	if err := s.start(p, link, seeds); err != nil {
		p.close()
		return nil, fmt.Errorf("swarmsim: peer %d: %w", idx, err)
	}
	s.mu.Lock()
	s.peers = append(s.peers, p)
	s.mu.Unlock()
	// What node's keepBootstrapped does first, in the background as there:
	// peers added together start together, as daemons started at once.
	ctx := p.ctx
	for _, ai := range seeds {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := p.Host.Connect(ctx, ai); err != nil && ctx.Err() == nil {
				s.cfg.Log.Debug("seed not reachable", "peer", idx, "seed", ai.ID, "err", err)
			}
		}()
	}
	return p, nil
}

// start builds the host and the control plane as node.Start does:
// ledger and gate first (the gate is the connection gater), the gossip
// router with node's options, the DHT, then the swarm service.
func (s *Sim) start(p *Peer, link Link, seeds []peer.AddrInfo) error {
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		return err
	}
	trust := swarm.NewTrust()
	gate := gossip.NewGate(trust, 0)
	cm, err := swarm.NewConnManager(s.cfg.ConnLow, s.cfg.ConnHigh)
	if err != nil {
		return err
	}
	addr := &net.UDPAddr{IP: peerIP(p.Index), Port: 4001}
	p.protos = newProtoCounter()
	p.Host, err = libp2p.New(
		libp2p.Identity(key),
		libp2p.ListenAddrStrings(fmt.Sprintf("/ip4/%s/udp/4001/quic-v1", addr.IP)),
		libp2p.Transport(libp2pquic.NewTransport),
		quicOn(func(a *net.UDPAddr) net.PacketConn {
			p.ep = s.net.endpointAt(a, link)
			return p.ep
		}),
		// As x/simlibp2p: identify's address discovery stalls synctest.
		libp2p.DisableIdentifyAddressDiscovery(),
		libp2p.ResourceManager(&network.NullResourceManager{}),
		libp2p.ConnectionManager(cm),
		libp2p.ConnectionGater(gate),
		libp2p.UserAgent("swarmd/sim"),
		libp2p.Ping(true),
		libp2p.BandwidthReporter(p.protos),
	)
	if err != nil {
		cm.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.ctx, p.cancel = ctx, cancel
	log := s.cfg.Log.With("peer", p.Index)
	p.Router, err = gossip.NewRouter(ctx, p.Host, key, log,
		gossip.WithHeartbeat(s.cfg.Heartbeat),
		gossip.WithColocation(gossip.Colocation{}),
		gossip.WithGate(gate))
	if err != nil {
		return err
	}
	router := p.Router
	trust.OnBan(func(id peer.ID) { router.Ban(id) })
	if p.DHT, err = swarm.NewDHT(ctx, p.Host, dht.ModeServer, seeds); err != nil {
		return err
	}
	keep := map[peer.ID]bool{}
	for _, ai := range seeds {
		keep[ai.ID] = true
	}
	h := p.Host
	live := swarm.Liveness{Heartbeat: s.cfg.Heartbeat, Misses: s.cfg.Misses, Refresh: s.cfg.Refresh, ProbeRate: s.cfg.ProbeRate}
	p.Service = swarm.New(p.Host, p.Router, p.DHT, p.self, live, log,
		swarm.WithTrust(trust),
		swarm.WithAdmission(swarm.Admission{Neighbours: s.cfg.Neighbours}),
		swarm.WithBootstrap(func(id peer.ID) bool { return keep[id] }),
		swarm.WithProtect(func(id peer.ID) bool { return swarm.InferenceStreamOpen(h, id) }),
		swarm.WithInUse(func(id peer.ID) bool { return swarm.InferenceStreamOpen(h, id) }))
	p.Host.SetStreamHandler(pipeline.ProtocolID, holdStage)
	return p.Service.Start(ctx)
}

// self is the peer's record as node's selfCapability fills it for an
// idle daemon: platform, load, and the shards and roles of its Spec.
func (p *Peer) self() gossip.Capability {
	return gossip.Capability{
		Version:  "sim",
		Platform: gossip.Platform{OS: "linux", Arch: "amd64", Cores: 4, RAMBytes: 8 << 30, FreeRAM: 6 << 30},
		Roles:    p.Spec.Roles,
		Shards:   p.Spec.Shards,
		Load:     gossip.Load{Capacity: 4},
		Thermal:  p.thermalNow(),
	}
}

func (p *Peer) thermalNow() string {
	if t, ok := p.thermal.Load().(string); ok {
		return t
	}
	return gossip.ThermalNominal
}

// Heat changes the peer's record as a phone heating up does (its thermal
// state, a change that matters: it goes out at once), and tells its
// control plane.
func (p *Peer) Heat(t string) {
	p.thermal.Store(t)
	p.Service.Changed()
}

// Leave stops the peer cleanly: its connections close with notice.
func (p *Peer) Leave() {
	p.gone.Store(true)
	p.close()
}

// Crash stops the peer without a word: from now on nothing it sends
// arrives, as when a phone loses power.
func (p *Peer) Crash() {
	p.ep.down.Store(true)
	p.gone.Store(true)
	p.close()
}

func (p *Peer) close() {
	p.once.Do(func() {
		var errs []error
		if p.Service != nil {
			errs = append(errs, p.Service.Close())
		}
		if p.Router != nil {
			errs = append(errs, p.Router.Close())
		}
		if p.DHT != nil {
			errs = append(errs, p.DHT.Close())
		}
		if p.cancel != nil {
			p.cancel()
		}
		p.wg.Wait()
		if p.Host != nil {
			errs = append(errs, p.Host.Close())
		}
		_ = errors.Join(errs...) // closing a simulated peer fails only on a bug the leak check reports
	})
}

// Partition cuts the swarm into groups: packets cross only within one.
// Peers in no group form one more group.
func (s *Sim) Partition(groups ...[]*Peer) {
	for _, p := range s.Peers() {
		p.ep.group.Store(0)
	}
	for i, g := range groups {
		for _, p := range g {
			p.ep.group.Store(int32(i + 1))
		}
	}
}

// Heal ends a partition.
func (s *Sim) Heal() { s.Partition() }

// closeGrace is how long Close lets simulated time run after the peers
// stopped: goroutines of the libraries that sleep before they notice the
// end (gossipsub retries a subscription announcement that found a peer's
// queue full after up to 1 s) must end inside the bubble, or synctest
// reports them blocked forever.
const closeGrace = 2 * time.Second

// Close stops every peer and the network.
func (s *Sim) Close() {
	for _, p := range s.Peers() {
		p.close()
	}
	time.Sleep(closeGrace)
	s.net.sim.Close()
}
