package swarm

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/llmswarm/llmswarm/internal/nettest"
)

// twoPaths connects a to b twice, as peers behind NATs end up: through a
// relay (a reaches the relay through relayPx) and directly (through
// directPx). Either proxy can freeze.
func twoPaths(t *testing.T) (a, b host.Host, directPx, relayPx *nettest.Proxy) {
	t.Helper()
	a, b = newHost(t), newHost(t)
	ctx := context.Background()
	r, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.EnableRelayService(), libp2p.ForceReachabilityPublic())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ri := peer.AddrInfo{ID: r.ID(), Addrs: r.Addrs()}
	if err := b.Connect(ctx, ri); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Reserve(ctx, b, ri); err != nil {
		t.Fatal(err)
	}
	relayPx = proxied(t, a, r)
	if err := a.Connect(ctx, peer.AddrInfo{ID: r.ID()}); err != nil {
		t.Fatal(err)
	}
	circuit := ma.StringCast("/p2p/" + r.ID().String() + "/p2p-circuit")
	if err := a.Connect(network.WithAllowLimitedConn(ctx, "test"), peer.AddrInfo{ID: b.ID(), Addrs: []ma.Multiaddr{circuit}}); err != nil {
		t.Fatal(err)
	}
	a.Peerstore().ClearAddrs(b.ID())
	directPx = proxied(t, a, b)
	if err := a.Connect(network.WithForceDirectDial(ctx, "test"), peer.AddrInfo{ID: b.ID()}); err != nil {
		t.Fatal(err)
	}
	if n := len(a.Network().ConnsToPeer(b.ID())); n != 2 {
		t.Fatalf("%d connections from a to b, want 2", n)
	}
	return a, b, directPx, relayPx
}

// TestPingClosesDeadConnection: a reaches b over a relay and directly.
// Concurrent pings over both live connections all succeed and close
// nothing. Then the direct path freezes (a punched path a NAT forgot): a
// ping is answered over the relay, and the silent connection is closed so
// the next streams use the live one.
func TestPingClosesDeadConnection(t *testing.T) {
	a, b, directPx, _ := twoPaths(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, 8*time.Second)
			defer cancel()
			errs <- Ping(pctx, a, b.ID())
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent pings over two live connections: %v", err)
		}
	}
	if n := len(a.Network().ConnsToPeer(b.ID())); n != 2 {
		t.Fatalf("concurrent pings closed a live connection: %d left", n)
	}

	directPx.Freeze()
	// The silent connection is judged at the deadline; a generous one, so
	// a loaded machine's slow answer on the live one still comes first.
	pctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	if err := Ping(pctx, a, b.ID()); err != nil {
		t.Fatalf("ping with one live connection: %v", err)
	}
	conns := a.Network().ConnsToPeer(b.ID())
	if len(conns) != 1 || !conns[0].Stat().Limited {
		t.Fatalf("after the ping: %d connections, want only the relayed one", len(conns))
	}
	if err := Ping(ctx, a, b.ID()); err != nil {
		t.Fatalf("ping over the remaining connection: %v", err)
	}
	directPx.Thaw()
}

// TestPingAllConnectionsDead: both paths frozen: no answer, and nothing
// is closed on that alone.
func TestPingAllConnectionsDead(t *testing.T) {
	a, b, directPx, relayPx := twoPaths(t)
	directPx.Freeze()
	relayPx.Freeze()
	pctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := Ping(pctx, a, b.ID()); !errors.Is(err, ErrNoPong) {
		t.Fatalf("ping of a peer on two frozen paths: %v, want ErrNoPong", err)
	}
	if n := len(a.Network().ConnsToPeer(b.ID())); n != 2 {
		t.Fatalf("%d connections left, want both: none answered, none is judged", n)
	}
	directPx.Thaw()
	relayPx.Thaw()
}
