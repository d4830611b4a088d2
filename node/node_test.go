package node_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/goleak"

	"github.com/llmswarm/llmswarm/api"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/nettest"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, nettest.Libp2pWorkers()...) }

func ids(ps []*nodetest.Peer) []peer.ID {
	var out []peer.ID
	for _, p := range ps {
		out = append(out, p.ID())
	}
	return out
}

func TestBootstrapDiscovery(t *testing.T) {
	peers := nodetest.Cluster(t, 3, nil)
	// A peer is in its own table as soon as it has started, before its
	// first heartbeat comes back through the mesh.
	if ps, err := peers[2].Peers(); err != nil || len(ps.Peers) == 0 || !ps.Peers[0].Self || !ps.Peers[0].Alive {
		t.Fatalf("a peer just started lists %+v (%v), not itself", ps.Peers, err)
	}
	took := nodetest.Eventually(t, 10*time.Second, "every peer sees every peer alive", func() bool {
		for _, p := range peers {
			if !nodetest.SeesAlive(p, ids(peers)...) {
				return false
			}
		}
		return true
	})
	t.Logf("3 peers discovered each other through bootstrap in %s", took)

	// The API shows the same table.
	c := client.New(peers[2].APIAddr(), "")
	got, err := c.Peers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Peers) != 3 || !got.Peers[0].Self || got.Peers[0].PeerID != peers[2].ID().String() {
		t.Fatalf("peers from API: %+v", got.Peers)
	}
	for _, p := range got.Peers {
		if !p.Alive || p.Platform.Cores == 0 || p.Platform.OS == "" {
			t.Fatalf("peer row incomplete: %+v", p)
		}
	}
}

func TestDeadAndBackAlive(t *testing.T) {
	peers := nodetest.Cluster(t, 3, nil)
	nodetest.Eventually(t, 10*time.Second, "cluster formed", func() bool {
		return nodetest.SeesAlive(peers[0], ids(peers)...)
	})
	victim := peers[2]
	dir, id := victim.Dir, victim.ID()
	victim.Close()
	killed := time.Now()
	took := nodetest.Eventually(t, 15*time.Second, "killed peer marked dead", func() bool {
		p, ok := peers[0].Swarm().View().Get(id)
		return ok && !p.Alive
	})
	t.Logf("killed peer marked dead after %s", took)

	// Restart on the same data dir: same identity, live again.
	cfg := nodetest.Config(dir)
	cfg.Bootstrap = []string{peers[0].Addr(t)}
	back := nodetest.Start(t, cfg)
	if back.ID() != id {
		t.Fatalf("restarted peer has ID %s, want %s (identity not reused)", back.ID(), id)
	}
	took = nodetest.Eventually(t, 10*time.Second, "restarted peer alive again", func() bool {
		return nodetest.SeesAlive(peers[0], id) && nodetest.SeesAlive(peers[1], id)
	})
	t.Logf("restarted peer alive again after %s (down %s)", took, time.Since(killed))
}

func TestSwarmKey(t *testing.T) {
	writeKey := func(dir, hex string) string {
		p := filepath.Join(dir, "swarm.key")
		if err := os.WriteFile(p, []byte("/key/swarm/psk/1.0.0/\n/base16/\n"+hex+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyA := strings.Repeat("ab", 32)
	keyB := strings.Repeat("cd", 32)
	peers := nodetest.Cluster(t, 2, func(i int, c *node.Config) {
		c.SwarmKey = writeKey(c.DataDir, keyA)
	})
	nodetest.Eventually(t, 10*time.Second, "private peers see each other", func() bool {
		return nodetest.SeesAlive(peers[1], ids(peers)...)
	})
	// A peer with another key dials the first one and must not get in.
	cfg := nodetest.Config(t.TempDir())
	cfg.SwarmKey = writeKey(cfg.DataDir, keyB)
	cfg.Bootstrap = []string{peers[0].Addr(t)}
	outsider := nodetest.Start(t, cfg)
	ai, _ := peer.AddrInfoFromString(peers[0].Addr(t))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if err := outsider.Host().Connect(ctx, *ai); err == nil {
		t.Fatal("peer with another swarm key connected")
	}
	// And a peer of the open swarm cannot either.
	openCfg := nodetest.FreshConfig(t.TempDir())
	openCfg.Open = true
	open := nodetest.Start(t, openCfg)
	ctx2, cancel2 := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel2()
	if err := open.Host().Connect(ctx2, *ai); err == nil {
		t.Fatal("peer without swarm key connected to a private swarm")
	}
	if _, ok := peers[0].Swarm().View().Get(outsider.ID()); ok {
		t.Fatal("outsider appears in the private peer table")
	}
}

func TestIdentityPersistsAndCorruptKeyIsRefused(t *testing.T) {
	dir := t.TempDir()
	p := nodetest.Start(t, nodetest.Config(dir))
	id := p.ID()
	p.Close()
	st, err := os.Stat(filepath.Join(dir, node.IdentityFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("identity key mode %v, want 0600", st.Mode().Perm())
	}
	if again := nodetest.Start(t, nodetest.Config(dir)); again.ID() != id {
		t.Fatalf("identity changed across restarts: %s then %s", id, again.ID())
	} else {
		again.Close()
	}

	keyFile := filepath.Join(dir, node.IdentityFile)
	if err := os.WriteFile(keyFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := &node.Node{Config: nodetest.Config(dir)}
	n.API = api.New(n, nil)
	err = n.Start(t.Context())
	n.Close()
	if err == nil || !strings.Contains(err.Error(), keyFile) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("corrupt key: err = %v, want an error naming %s", err, keyFile)
	}
	if b, _ := os.ReadFile(keyFile); string(b) != "garbage" {
		t.Fatal("corrupt identity key was overwritten")
	}
}

func TestStartErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	notDir := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notDir, nil, 0o600)
	cases := []struct {
		name string
		edit func(c *node.Config)
		want string
	}{
		{"api port in use", func(c *node.Config) { c.API = busy.Addr().String() }, busy.Addr().String()},
		{"libp2p port in use", func(c *node.Config) {
			c.Listen = []string{"/ip4/127.0.0.1/tcp/" + portOf(busy)}
		}, "listen"},
		{"bad bootstrap", func(c *node.Config) { c.Bootstrap = []string{"/ip4/1.2.3.4/tcp/1"} }, "/p2p/PEER_ID"},
		{"garbage bootstrap", func(c *node.Config) { c.Bootstrap = []string{"not-a-multiaddr"} }, "not-a-multiaddr"},
		{"bad listen", func(c *node.Config) { c.Listen = []string{"/ip4/999.1.1.1/tcp/1"} }, "listen address"},
		{"public api without token", func(c *node.Config) { c.API = "0.0.0.0:0" }, "api_token"},
		{"data dir is a file", func(c *node.Config) { c.DataDir = notDir }, notDir},
		{"missing swarm key", func(c *node.Config) { c.SwarmKey = "/nonexistent/swarm.key" }, "/nonexistent/swarm.key"},
		{"bad dht mode", func(c *node.Config) { c.DHTMode = "sometimes" }, "dht_mode"},
		{"open with a swarm key", func(c *node.Config) { c.Open, c.SwarmKey = true, "/some/swarm.key" }, "open and swarm_key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := nodetest.Config(t.TempDir())
			tc.edit(&cfg)
			n := &node.Node{Config: cfg}
			n.API = api.New(n, nil)
			err := n.Start(t.Context())
			n.Close()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func portOf(l net.Listener) string {
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

func TestAPIToken(t *testing.T) {
	cfg := nodetest.Config(t.TempDir())
	cfg.APIToken = "s3cret"
	p := nodetest.Start(t, cfg)
	if _, err := client.New(p.APIAddr(), "").ID(t.Context()); err == nil {
		t.Fatal("API answered without token")
	} else if apiErr := (*client.APIError)(nil); !errors.As(err, &apiErr) || apiErr.Status != 401 {
		t.Fatalf("no token: err = %v, want HTTP 401", err)
	}
	if _, err := client.New(p.APIAddr(), "s3cret").ID(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := client.New(p.APIAddr(), "").Healthy(t.Context()); err != nil {
		t.Fatalf("healthz needs no token: %v", err)
	}
}

func TestClientNotRunning(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	_, err := client.New(addr, "").Status(t.Context())
	if !errors.Is(err, client.ErrNotRunning) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err = %v, want ErrNotRunning naming %s", err, addr)
	}
}
