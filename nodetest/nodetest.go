// Package nodetest starts real peers on loopback for tests: each in its own
// temp data dir, with the API on an ephemeral port, mDNS off (multicast
// would leave the machine) and bootstrap links between them.
//
// It wires node and api together, so it sits above both (internal/tiers
// lists it): tests of node, api and mobile import it; product code must
// not.
package nodetest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

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

// Config returns a config for a loopback test peer in dir.
func Config(dir string) node.Config {
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

// Cluster starts n peers; every peer after the first bootstraps to the first.
func Cluster(t testing.TB, n int, edit func(i int, c *node.Config)) []*Peer {
	t.Helper()
	var peers []*Peer
	for i := 0; i < n; i++ {
		cfg := Config(t.TempDir())
		if i > 0 {
			cfg.Bootstrap = []string{peers[0].Addr(t)}
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
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SeesAlive reports whether p's view holds every id as alive.
func SeesAlive(p *Peer, ids ...peer.ID) bool {
	v := p.Swarm().View()
	for _, id := range ids {
		if !v.Alive(id) {
			return false
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
			return false
		}
	}
	return true
}
