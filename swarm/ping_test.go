package swarm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	ma "github.com/multiformats/go-multiaddr"
)

// TestPingClosesDeadConnection: a reaches b over two connections, one
// through a proxy that then freezes (a punched path a NAT forgot). A ping
// is answered over the other; the frozen connection is closed so the next
// streams use the live one. With every connection frozen, no answer.
func TestPingClosesDeadConnection(t *testing.T) {
	a, b := newHost(t), newHost(t)
	ctx := context.Background()
	// First through a relay, as peers behind NATs meet...
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
	circuit := ma.StringCast(r.Addrs()[0].String() + "/p2p/" + r.ID().String() + "/p2p-circuit")
	if err := a.Connect(network.WithAllowLimitedConn(ctx, "test"), peer.AddrInfo{ID: b.ID(), Addrs: []ma.Multiaddr{circuit}}); err != nil {
		t.Fatal(err)
	}
	// ...then directly, through a proxy that will freeze.
	a.Peerstore().ClearAddrs(b.ID())
	px := proxied(t, a, b)
	if err := a.Connect(network.WithForceDirectDial(ctx, "test"), peer.AddrInfo{ID: b.ID()}); err != nil {
		t.Fatal(err)
	}
	if n := len(a.Network().ConnsToPeer(b.ID())); n != 2 {
		t.Fatalf("%d connections from a to b, want 2", n)
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := Ping(pctx, a, b.ID()); err != nil {
		t.Fatalf("ping over two live connections: %v", err)
	}
	if n := len(a.Network().ConnsToPeer(b.ID())); n != 2 {
		t.Fatalf("a live connection was closed: %d left", n)
	}

	px.Freeze()
	pctx, cancel = context.WithTimeout(ctx, time.Second)
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
	px.Thaw()
}

// TestPingAllConnectionsDead: the only connection frozen: no answer.
func TestPingAllConnectionsDead(t *testing.T) {
	a, b := newHost(t), newHost(t)
	px := proxied(t, a, b)
	ctx := context.Background()
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID()}); err != nil {
		t.Fatal(err)
	}
	px.Freeze()
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := Ping(pctx, a, b.ID()); !errors.Is(err, ErrNoPong) {
		t.Fatalf("ping of a frozen peer: %v, want ErrNoPong", err)
	}
	px.Thaw()
}
