package node

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestBootstrapRedialledWhileIsolated: a peer redials a bootstrap peer
// it lost only while its table is isolated (swarm/bootstrap.go); past
// that the bootstrap peer stays unconnected, and once isolated again it
// is dialled within a round of the loop.
func TestBootstrapRedialledWhileIsolated(t *testing.T) {
	seed, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var isolated atomic.Bool
	isolated.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	d := &discovery{h: h, isolated: isolated.Load, log: slog.New(slog.NewTextHandler(io.Discard, nil)), health: &health{}, cancel: cancel}
	d.wg.Add(1)
	go d.keepBootstrapped(ctx, []peer.AddrInfo{{ID: seed.ID(), Addrs: seed.Addrs()}})
	defer d.close()
	connected := func() bool { return h.Network().Connectedness(seed.ID()) == network.Connected }
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 15 s", what)
			}
		}
	}
	waitUntil("connected to the bootstrap peer at start", connected)

	isolated.Store(false)
	if err := h.Network().ClosePeer(seed.ID()); err != nil {
		t.Fatal(err)
	}
	// The loop looks every 2 s while its bootstrap peers are connected.
	time.Sleep(5 * time.Second)
	if connected() {
		t.Fatal("a peer that is not isolated redialled its bootstrap peer")
	}

	isolated.Store(true)
	waitUntil("redialled once isolated again", connected)
}
