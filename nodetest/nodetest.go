// Package nodetest starts real peers on loopback for tests: each in its own
// temp data dir, with the API on an ephemeral port, mDNS off (multicast
// would leave the machine), one swarm key per test binary (SwarmKey) and
// bootstrap links between them.
//
// It wires node and api together, so it sits above both (internal/tiers
// lists it): tests of node, api and mobile import it; product code must
// not.
package nodetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"

	"github.com/llmswarm/llmswarm/api"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/nat"
	"github.com/llmswarm/llmswarm/node"
)

// Peer is a running test peer.
type Peer struct {
	*node.Node
	Dir string
}

// Addr returns the peer's first loopback TCP multiaddr with its ID, for
// use as another peer's bootstrap address.
func (p *Peer) Addr(t testing.TB) string {
	t.Helper()
	h := p.Host()
	for _, a := range h.Addrs() {
		return fmt.Sprintf("%s/p2p/%s", a, h.ID())
	}
	t.Fatalf("peer %s has no address", h.ID())
	return ""
}

// ID is the peer's ID.
func (p *Peer) ID() peer.ID { return p.Host().ID() }

// Config returns a config for a loopback test peer in dir, a member of
// this test binary's swarm: ShareKey writes its key into dir.
func Config(dir string) node.Config {
	if err := ShareKey(dir); err != nil {
		panic(err) // test harness: a temp dir that cannot be written
	}
	return FreshConfig(dir)
}

// FreshConfig is Config for a peer that has no key yet: it creates one of
// its own at start, as a newly installed peer does.
func FreshConfig(dir string) node.Config {
	return node.Config{
		DataDir: dir,
		Listen:  []string{"/ip4/127.0.0.1/tcp/0"},
		API:     "127.0.0.1:0",
		NoMDNS:  true,
		// No router on loopback: no UPnP search (its multicast reads
		// outlive the host by seconds).
		NAT: nat.Config{PortMapping: "off"},
	}
}

var (
	keyOnce sync.Once
	key     pnet.PSK
)

// SwarmKey is the key of this test binary's swarm, random per process:
// the test peers of two packages running at once never meet, and an
// adversary host of a test joins with libp2p.PrivateNetwork(SwarmKey()).
func SwarmKey() pnet.PSK {
	keyOnce.Do(func() {
		key = make(pnet.PSK, 32)
		if _, err := rand.Read(key); err != nil {
			panic(err)
		}
	})
	return key
}

// Member is the libp2p options an adversary host of a test needs to get
// into the test swarm: its key, and TCP (QUIC takes no key).
func Member() libp2p.Option {
	return libp2p.ChainOptions(libp2p.PrivateNetwork(SwarmKey()), libp2p.Transport(tcp.NewTCPTransport))
}

// ShareKey writes SwarmKey into dir's swarm.key (creating dir), unless dir
// has a key already.
func ShareKey(dir string) error {
	p := filepath.Join(dir, node.SwarmKeyFile)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(p, []byte("/key/swarm/psk/1.0.0/\n/base16/\n"+hex.EncodeToString(SwarmKey())+"\n"), 0o600)
}

// Start starts a peer with cfg (DataDir defaults to a new temp dir) and
// closes it at the end of the test.
func Start(t testing.TB, cfg node.Config) *Peer {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	n := &node.Node{Config: cfg, Logger: Logger(t)}
	n.API = api.New(n, n.Logger)
	if err := n.Start(context.Background()); err != nil {
		t.Fatalf("starting peer in %s: %v", cfg.DataDir, err)
	}
	t.Cleanup(func() { n.Close() })
	return &Peer{Node: n, Dir: cfg.DataDir}
}

// Cluster starts n peers; every peer after the first joins the first's
// swarm by its invitation (node.JoinDataDir), as a user does with swarmd
// --join, and so bootstraps to it.
func Cluster(t testing.TB, n int, edit func(i int, c *node.Config)) []*Peer {
	t.Helper()
	var peers []*Peer
	var token string
	for i := 0; i < n; i++ {
		if i == 1 {
			inv, err := peers[0].Invite()
			if err != nil {
				t.Fatalf("invitation of the first peer: %v", err)
			}
			token = inv.Token
		}
		var cfg node.Config
		if i == 0 {
			cfg = Config(t.TempDir())
		} else {
			cfg = FreshConfig(t.TempDir())
			if _, err := node.JoinDataDir(cfg, token); err != nil {
				t.Fatalf("joining the first peer's swarm: %v", err)
			}
		}
		if edit != nil {
			edit(i, &cfg)
		}
		peers = append(peers, Start(t, cfg))
	}
	return peers
}

// Logger logs to the test log when SWARM_TEST_LOG is set, else discards.
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("SWARM_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}

// Eventually polls cond every 50 ms until it holds or the deadline passes,
// and returns how long it took.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		missed.Store(nil)
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > within {
			why := ""
			if m := missed.Load(); m != nil {
				why = " (last: " + *m + ")"
			}
			t.Fatalf("%s: not within %s%s", what, within, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// missed is what a SeesAlive or SeesShards in Eventually's last try of
// its condition found missing, for its failure.
var missed atomic.Pointer[string]

func miss(p *Peer, format string, args ...any) bool {
	m := fmt.Sprintf("%s ", p.ID()) + fmt.Sprintf(format, args...)
	missed.Store(&m)
	return false
}

// SeesAlive reports whether p's view holds every id as alive.
func SeesAlive(p *Peer, ids ...peer.ID) bool {
	v := p.Swarm().View()
	for _, id := range ids {
		if q, ok := v.Get(id); !ok || !q.Alive {
			return miss(p, "holds %s: in its table %v, alive %v", id, ok, q.Alive)
		}
	}
	return true
}

var (
	modelsMu sync.Mutex
	models   = map[string]string{} // weight type -> the tiny model's file
)

// TinyModel is the tiny synthetic qwen3 in typ (f32, q8_0, q4_k...),
// written once per machine: test binaries of several packages share the
// file, so it is written to a private name and renamed into place.
func TinyModel(t testing.TB, typ string) string {
	t.Helper()
	modelsMu.Lock()
	defer modelsMu.Unlock()
	if p, ok := models[typ]; ok {
		return p
	}
	p := filepath.Join(os.TempDir(), "node-test-tiny-qwen3-"+typ+".gguf")
	tmp := fmt.Sprintf("%s.%d.tmp", p, os.Getpid())
	if err := engine.Synth(context.Background(), tmp, engine.SynthSpec{Arch: "qwen3", Size: "tiny", Type: typ, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	models[typ] = p
	return p
}

// SeesShards reports whether p sees every peer of ids alive and announcing
// a shard: shard files load in the background, after the peer is alive.
func SeesShards(p *Peer, ids ...peer.ID) bool {
	v := p.Swarm().View()
	for _, id := range ids {
		q, ok := v.Get(id)
		if !ok || !q.Alive || len(q.Cap.Shards) == 0 {
			return miss(p, "holds %s: in its table %v, alive %v, record %d with %d shards", id, ok, q.Alive, q.Cap.Seq, len(q.Cap.Shards))
		}
	}
	return true
}
