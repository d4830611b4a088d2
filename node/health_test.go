package node_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/llmswarm/llmswarm/api"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestDataDirLock: a second peer on a data dir in use is refused with an
// error naming the holder's PID, and its exit leaves the first one's
// api.addr alone; once the first stops, the dir is free again.
func TestDataDirLock(t *testing.T) {
	dir := t.TempDir()
	first := nodetest.Start(t, nodetest.Config(dir))
	addrFile := filepath.Join(dir, node.APIAddrFile)
	want, id := first.APIAddr()+"\n", first.ID()

	second := &node.Node{Config: nodetest.Config(dir)}
	second.API = api.New(second, nil)
	err := second.Start(t.Context())
	second.Close()
	if !errors.Is(err, node.ErrDataDirInUse) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second peer on %s: %v; want ErrDataDirInUse naming pid %d", dir, err, os.Getpid())
	}
	if b, err := os.ReadFile(addrFile); err != nil || string(b) != want {
		t.Fatalf("after the refused peer exited, api.addr = %q, %v; want %q", b, err, want)
	}
	if _, err := client.New(first.APIAddr(), "").Status(t.Context()); err != nil {
		t.Fatalf("first peer's API after the refusal: %v", err)
	}

	first.Close()
	if _, err := os.Stat(addrFile); !os.IsNotExist(err) {
		t.Fatalf("api.addr survives its peer: %v", err)
	}
	// A lock file left by a dead process (no flock held) does not block.
	if err := os.WriteFile(filepath.Join(dir, node.LockFile), []byte("999999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	again := nodetest.Start(t, nodetest.Config(dir))
	if again.ID() != id {
		t.Fatal("identity changed")
	}
}

// logBuffer collects log records for counting.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), substr)
}

func hasWarning(ws []string, substr string) bool {
	for _, w := range ws {
		if strings.Contains(w, substr) {
			return true
		}
	}
	return false
}

func writeSwarmKey(t *testing.T, dir, hex string) string {
	t.Helper()
	p := filepath.Join(dir, "swarm.key")
	if err := os.WriteFile(p, []byte("/key/swarm/psk/1.0.0/\n/base16/\n"+hex+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBootstrapWarnings: a bootstrap peer that cannot be joined is warned
// about once (not on every retry), with the cause in words, and shows in
// the status warnings until it connects.
func TestBootstrapWarnings(t *testing.T) {
	target := nodetest.Start(t, nodetest.Config(t.TempDir()))
	keyA, keyB := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	privCfg := nodetest.Config(t.TempDir())
	privCfg.SwarmKey = writeSwarmKey(t, privCfg.DataDir, keyA)
	private := nodetest.Start(t, privCfg)

	sk, _, _ := crypto.GenerateEd25519Key(nil)
	otherID, _ := peer.IDFromPrivateKey(sk)
	// A port nothing listens on: the target's, once it is gone.
	gone := nodetest.Start(t, nodetest.Config(t.TempDir()))
	goneAddr := gone.Addr(t)
	gone.Close()
	tcp := func(p *nodetest.Peer) ma.Multiaddr { return p.Host().Addrs()[0] }

	cases := []struct {
		name string
		boot string
		key  string // swarm key of the dialing peer ("": the test swarm's; "open": none)
		bad  peer.ID
		want string
	}{
		{"unreachable", goneAddr, "", "", "is unreachable"},
		{"wrong peer ID", fmt.Sprintf("%s/p2p/%s", tcp(target), otherID), "", otherID, "answers with another peer ID"},
		{"swarm key mismatch", private.Addr(t), keyB, private.ID(), "different swarm key"},
		{"open peer dials a private swarm", private.Addr(t), "open", private.ID(), "private swarm"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := nodetest.Config(t.TempDir())
			cfg.Bootstrap = []string{c.boot}
			switch c.key {
			case "":
			case "open":
				cfg.Open = true
			default:
				cfg.SwarmKey = writeSwarmKey(t, cfg.DataDir, c.key)
			}
			logs := &logBuffer{}
			n := &node.Node{Config: cfg, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			n.API = api.New(n, nil)
			if err := n.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			nodetest.Eventually(t, 10*time.Second, "a warning in status", func() bool {
				st, err := client.New(n.APIAddr(), "").Status(t.Context())
				return err == nil && hasWarning(st.Warnings, c.want)
			})
			// More attempts (backoff 0.5, 1, 2 s) warn no more.
			nodetest.Eventually(t, 15*time.Second, "two more attempts", func() bool {
				return logs.count("bootstrap peer still not reachable") >= 2
			})
			if w := logs.count("level=WARN msg=\"bootstrap peer"); w != 1 {
				t.Fatalf("%d warnings for one bootstrap peer, want 1:\n%s", w, logs.b.String())
			}
		})
	}

	// The warning goes once the peer is reachable: restart "gone" on its
	// old port with its old identity.
	t.Run("cleared on connect", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		first := nodetest.Start(t, nodetest.Config(dir))
		addr, id := tcp(first), first.ID()
		first.Close()
		cfg := nodetest.Config(t.TempDir())
		cfg.Bootstrap = []string{fmt.Sprintf("%s/p2p/%s", addr, id)}
		n := nodetest.Start(t, cfg)
		nodetest.Eventually(t, 10*time.Second, "unreachable warning", func() bool { return hasWarning(n.Warnings(), "is unreachable") })
		back := nodetest.Config(dir)
		back.Listen = []string{addr.String()}
		nodetest.Start(t, back)
		nodetest.Eventually(t, 20*time.Second, "warning cleared", func() bool { return len(n.Warnings()) == 0 })
	})
}

// TestIdentityKeyModeWarning: a key file others can read is warned about,
// naming the file and its mode.
func TestIdentityKeyModeWarning(t *testing.T) {
	dir := t.TempDir()
	p := nodetest.Start(t, nodetest.Config(dir))
	if ws := p.Warnings(); len(ws) != 0 {
		t.Fatalf("fresh peer has warnings: %q", ws)
	}
	p.Close()
	key := filepath.Join(dir, node.IdentityFile)
	for _, mode := range []os.FileMode{0o644, 0o640, 0o602} {
		if err := os.Chmod(key, mode); err != nil {
			t.Fatal(err)
		}
		p := nodetest.Start(t, nodetest.Config(dir))
		want := fmt.Sprintf("identity key %s has mode %04o", key, mode)
		st, err := client.New(p.APIAddr(), "").Status(t.Context())
		if err != nil || !hasWarning(st.Warnings, want) {
			t.Errorf("mode %04o: status warnings %q, %v; want %q", mode, st.Warnings, err, want)
		}
		p.Close()
	}
}
