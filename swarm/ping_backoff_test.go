package swarm

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	lpswarm "github.com/libp2p/go-libp2p/p2p/net/swarm"
	manet "github.com/multiformats/go-multiaddr/net"
)

// TestPingBackoffIsTyped: a ping that libp2p's dial backoff refuses says
// so by type through every wrapping (the probe dials past it on errors.Is,
// not on the text).
func TestPingBackoffIsTyped(t *testing.T) {
	a, b := newHost(t), newHost(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed, err := manet.FromNetAddr(ln.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	a.Peerstore().AddAddr(b.ID(), closed, time.Hour) // b's only known address: nobody listens there
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := Ping(ctx, a, b.ID()); err == nil {
		t.Fatal("a ping to a closed port answered")
	}
	err = Ping(ctx, a, b.ID())
	if !errors.Is(err, lpswarm.ErrDialBackoff) {
		t.Fatalf("second ping: %v, want libp2p's dial backoff", err)
	}
}
