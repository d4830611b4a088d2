package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/bmcauth"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/ledger"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/nat"
	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/swarm"
)

// Node is one peer. Set Config and Logger, then call Start; the zero
// Config is valid. Close is idempotent and also tears down a node whose
// Start failed half-way.
type Node struct {
	Config Config
	Logger *slog.Logger // nil: discard
	// API, when set, serves the local HTTP API on Config.API's address
	// (cmd/swarmd and mobile set api.New(node)). Without it the peer
	// serves no HTTP.
	API HTTPServer

	mu      sync.Mutex
	started bool
	closed  bool
	cfg     Config // Config with defaults applied
	log     *slog.Logger
	start   time.Time
	key     crypto.PrivKey
	host    host.Host
	dht     *dht.IpfsDHT
	router  *gossip.Router
	trust   *swarm.Trust // this peer's own ledger; kept across Close
	gate    *gossip.Gate
	swarm   *swarm.Service
	disc    *discovery
	api     *apiListener
	cancel  context.CancelFunc
	private bool
	psk     []byte        // the swarm key (nil: an open swarm)
	restart chan struct{} // closed by Join: see RestartRequested
	lock    *dirLock
	health  health

	moaServer  *moa.Server
	ledger     *ledger.Exchange // this peer's give and take (ledger.go)
	ledgerDone chan struct{}    // closed when the ledger's saver stops
	originator *moa.Originator
	pipe       *pipelineState
	pipeOrig   *pipeline.Originator
	checks     *checkState

	// bmcDead, once a BMC table is in force, reports the peers it declares
	// dead; routing never uses them.
	bmcDead atomic.Pointer[func(peer.ID) bool]
	bmc     *bmcauth.Service // nil unless bmc_peers or bmc_serial is set
	// nat is nil before Start, and kept after Close: the API may read it.
	nat     *nat.Service
	power   powerState
	mem     memBudget
	metrics *metrics
	events  eventHub   // live events for the API's /v1/swarm/events
	tasks   taskList   // pulls, fetches and loads a user waits for
	runMu   sync.Mutex // one run-time change of roles or shards at a time
	loads   startLoads // Start's background loads of the configured roles and shards
	gpuMu   sync.Mutex
	gpu     engine.Backends // the GPU backends found at Start (gpu.go)
}

// APIAddrFile, in the data dir, holds the address the API listens on while
// the peer runs.
const APIAddrFile = "api.addr"

// ErrStarted is returned by a second Start.
var ErrStarted = errors.New("node: already started")

// Start brings the peer up: identity, host, gossip, DHT, discovery, the
// swarm view and the local API. The node runs until Close or until ctx ends.
func (n *Node) Start(ctx context.Context) (err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started || n.closed {
		return ErrStarted
	}
	n.started = true
	defer func() {
		if err != nil {
			n.teardownLocked()
		}
	}()
	n.log = n.Logger
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	n.start = time.Now()
	n.tasks.pub = n.events.publish
	if n.cfg, err = n.Config.withDefaults(); err != nil {
		return err
	}
	if err = prepareDataDir(n.cfg.DataDir); err != nil {
		return err
	}
	if n.cfg, err = withJoinedPeers(n.cfg); err != nil {
		return err
	}
	// Before anything else in the dir: a second peer on it must change
	// nothing, api.addr included.
	if n.lock, err = lockDataDir(n.cfg.DataDir); err != nil {
		return err
	}
	if n.key, err = loadOrCreateIdentity(n.cfg.DataDir); err != nil {
		return err
	}
	if msg := keyModeWarning(filepath.Join(n.cfg.DataDir, IdentityFile)); msg != "" {
		n.health.set("identity", msg)
		n.log.Warn(msg)
	}
	psk, err := n.loadPSK()
	if err != nil {
		return err
	}
	n.private, n.psk = psk != nil, psk
	// Claim the API port before starting libp2p, so "port in use" is found
	// before the peer announces itself.
	var apiLn net.Listener
	if n.cfg.API != "off" && n.API != nil {
		if apiLn, err = net.Listen("tcp", n.cfg.API); err != nil {
			return fmt.Errorf("api: listening on %s: %w", n.cfg.API, err)
		}
	}
	// The ledger before the gate: bans saved in the data dir hold from the
	// first connection.
	if err = n.loadLedger(); err != nil {
		if apiLn != nil {
			apiLn.Close()
		}
		return err
	}
	n.newGate()
	if n.nat, err = nat.New(n.cfg.NAT, n.log, nat.WithPrivateSwarm(n.private), nat.WithTrust(n.trust)); err != nil {
		if apiLn != nil {
			apiLn.Close()
		}
		return err
	}
	h, notes, err := newHost(n.cfg, n.key, psk, n.gate, n.nat.Options())
	if err != nil {
		if apiLn != nil {
			apiLn.Close()
		}
		return err
	}
	n.host = h
	for _, note := range notes {
		n.log.Warn(note)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	if err = n.nat.Start(runCtx, h); err != nil {
		if apiLn != nil {
			apiLn.Close()
		}
		return err
	}
	if msg := n.nat.Warning(); msg != "" {
		n.health.set("relay", msg)
		n.log.Warn(msg)
	}
	n.startPower()
	n.metrics = newMetrics(n)
	n.mem.init(n.cfg.MaxMemory)
	// The pipeline's store first: role models are registered in it too,
	// so peers can fetch their manifests and layers to check them.
	n.loads.begin(runCtx)
	// The ledger before the servers, whose ranks it gives.
	if err = n.startLedger(runCtx); err != nil {
		if apiLn != nil {
			apiLn.Close()
		}
		return err
	}
	n.initGPU()
	if err = n.startPipeline(ctx); err != nil {
		if apiLn != nil {
			apiLn.Close()
		}
		return err
	}
	if err = n.startMoA(); err != nil {
		if apiLn != nil {
			apiLn.Close()
		}
		return err
	}
	n.startChecks()
	gopts, err := n.gossipOptions()
	if err == nil {
		n.router, err = gossip.NewRouter(runCtx, h, n.key, n.log, gopts...)
	}
	if err != nil {
		if apiLn != nil {
			apiLn.Close()
		}
		return err
	}
	n.wireBans()
	if n.cfg.DHTMode != "off" {
		if n.dht, err = newDHT(runCtx, h, n.cfg); err != nil {
			if apiLn != nil {
				apiLn.Close()
			}
			return err
		}
	}
	live := swarm.Liveness{Heartbeat: time.Duration(n.cfg.Heartbeat), Misses: n.cfg.DeadAfterMisses,
		Refresh: time.Duration(n.cfg.RecordRefresh), ProbeRate: n.cfg.ProbeRate, MaxPeers: n.cfg.PeerTable.MaxPeers}
	n.swarm = swarm.New(h, n.router, n.dht, n.selfCapability, live, n.log, n.swarmOptions()...)
	n.nat.SetView(n.swarm.View())
	n.watchView(runCtx, n.swarm.View())
	if err = n.swarm.Start(runCtx); err != nil {
		if apiLn != nil {
			apiLn.Close()
		}
		return err
	}
	if err = n.startBMC(runCtx); err != nil {
		if apiLn != nil {
			apiLn.Close()
		}
		return err
	}
	n.originator = n.newOriginator()
	n.pipeOrig = n.newPipelineOriginator()
	n.startShardFetches(runCtx)
	n.wireChecks(runCtx)
	if n.disc, err = startDiscovery(runCtx, h, n.cfg, psk, n.log, &n.health, n.swarm.View().Isolated); err != nil {
		if apiLn != nil {
			apiLn.Close()
		}
		return err
	}
	if n.disc.mdns == nil {
		n.cfg.NoMDNS = true // status says mDNS is off when it could not start
	}
	if apiLn != nil {
		n.api = &apiListener{ln: apiLn, srv: n.API}
		go n.API.Serve(apiLn)
		// Tell local tools where the API is (it may be on an ephemeral port).
		if err = os.WriteFile(filepath.Join(n.cfg.DataDir, APIAddrFile), []byte(n.api.addr()+"\n"), 0o600); err != nil {
			return fmt.Errorf("data dir %s: %w", n.cfg.DataDir, err)
		}
	}
	n.log.Info("peer started", "peer", h.ID(), "addrs", h.Addrs(), "api", n.apiAddrLocked(),
		"data_dir", n.cfg.DataDir, "private", n.private, "swarm", SwarmID(psk), "mdns", !n.cfg.NoMDNS, "dht", n.cfg.DHTMode)
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				n.Close()
			case <-runCtx.Done():
			}
		}()
	}
	return nil
}

// loadPSK reads the swarm key; the data dir's own is created on first
// start. An open swarm has none.
func (n *Node) loadPSK() (psk []byte, err error) {
	if n.cfg.Open {
		if p := filepath.Join(n.cfg.DataDir, SwarmKeyFile); fileExists(p) {
			n.log.Warn("open swarm: the data dir's swarm key is not used", "file", p)
		}
		return nil, nil
	}
	if n.cfg.SwarmKey != filepath.Join(n.cfg.DataDir, SwarmKeyFile) {
		return loadSwarmKey(n.cfg.SwarmKey)
	}
	psk, created, err := loadOrCreateSwarmKey(n.cfg.SwarmKey)
	if created {
		n.log.Info("created a swarm key: this peer is a private swarm of its own; others join it with a token from swarmctl invite",
			"swarm", SwarmID(psk), "file", n.cfg.SwarmKey)
	}
	return psk, err
}

// Close stops the peer. It is idempotent.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	api := n.api
	n.api = nil
	n.mu.Unlock()
	// Stop the API first and without the lock: its handlers take it.
	var apiErr error
	if api != nil {
		apiErr = api.close()
		removeAPIAddr(n.cfg.DataDir, api.addr())
	}
	n.waitLoads()
	n.mu.Lock()
	defer n.mu.Unlock()
	return errors.Join(apiErr, n.teardownLocked())
}

// teardownLocked stops whatever Start built, in reverse order.
func (n *Node) teardownLocked() error {
	var errs []error
	if n.api != nil {
		errs = append(errs, n.api.close())
		removeAPIAddr(n.cfg.DataDir, n.api.addr())
		n.api = nil
	}
	n.waitLoads() // they take no lock of the node's: no deadlock here
	if n.originator != nil {
		n.originator.Close() // its background checks use the checker
	}
	if n.checks != nil {
		// First: its checks use the store, the view and the host.
		errs = append(errs, n.checks.close())
	}
	if n.pipe != nil {
		// First: its background fetches use the swarm view and the host.
		errs = append(errs, n.pipe.close())
		n.pipe.closed = true
	}
	if n.disc != nil {
		n.disc.close()
		n.disc = nil
	}
	n.stopBMC()
	if n.swarm != nil {
		errs = append(errs, n.swarm.Close())
		n.swarm = nil
	}
	if n.dht != nil {
		errs = append(errs, n.dht.Close())
		n.dht = nil
	}
	if n.router != nil {
		errs = append(errs, n.router.Close())
		n.router = nil
	}
	// moaServer and pipe stay set (closed): heartbeat and API code may still
	// read them, and a closed server answers politely.
	if n.moaServer != nil {
		errs = append(errs, n.moaServer.Close())
	}
	if n.cancel != nil {
		n.cancel()
	}
	errs = append(errs, n.stopLedger()) // after the servers: their last answers' receipts count
	if n.nat != nil {
		errs = append(errs, n.nat.Close())
	}
	if n.host != nil {
		errs = append(errs, n.host.Close())
		n.host = nil
	}
	n.lock.release()
	n.lock = nil
	return errors.Join(errs...)
}

// removeAPIAddr removes the data dir's api.addr if it still names addr:
// the file belongs to the peer that wrote it.
func removeAPIAddr(dir, addr string) {
	p := filepath.Join(dir, APIAddrFile)
	if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == addr {
		os.Remove(p)
	}
}

// Host is the libp2p host (nil before Start).
func (n *Node) Host() host.Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.host
}

// Swarm is the live view service (nil before Start).
func (n *Node) Swarm() *swarm.Service {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.swarm
}

// APIAddr is the address the local API listens on ("" when off).
func (n *Node) APIAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.apiAddrLocked()
}

// apiAddrLocked is APIAddr for callers holding n.mu.
func (n *Node) apiAddrLocked() string {
	if n.api == nil {
		return "off"
	}
	return n.api.addr()
}
