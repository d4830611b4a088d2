package swarm

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	mss "github.com/multiformats/go-multistream"
)

// maxConnPing bounds one connection's ping when the caller's context has
// no deadline.
const maxConnPing = 10 * time.Second

// Ping sends one libp2p ping to id and waits for the answer until ctx
// ends. With several connections open to id (a hole-punched one and the
// relayed one it came from, say) it pings over each: an answer on any
// proves the peer is there, and a connection that does not answer while
// another does is dead (a punched path a NAT forgot, a relay gone) and is
// closed, so streams opened next use one that works.
func Ping(ctx context.Context, h host.Host, id peer.ID) error {
	// Over a relayed (limited) connection too: an answer proves the peer
	// is there, however it is reached.
	ctx = network.WithAllowLimitedConn(ctx, "ping")
	conns := h.Network().ConnsToPeer(id)
	if len(conns) < 2 {
		return pingPeer(ctx, h, id)
	}
	cctx, cancel := context.WithTimeout(ctx, maxConnPing)
	defer cancel()
	type result struct {
		c   network.Conn
		err error
	}
	results := make(chan result, len(conns))
	for _, c := range conns {
		go func() { results <- result{c, pingConn(cctx, c)} }()
	}
	var first error
	var dead []network.Conn
	for range conns {
		r := <-results
		if r.err != nil {
			dead = append(dead, r.c)
			if first == nil {
				first = r.err
			}
		}
	}
	switch {
	case len(dead) == len(conns):
		if ctx.Err() != nil || first == nil {
			return ErrNoPong
		}
		return first
	case len(dead) > 0:
		// Silent for all the time the caller gave while another answered.
		for _, c := range dead {
			c.Close()
		}
	}
	return nil
}

// pingPeer pings id over the connection libp2p picks (dialing if none).
func pingPeer(ctx context.Context, h host.Host, id peer.ID) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	select {
	case r, ok := <-ping.Ping(pctx, h, id):
		if !ok {
			return ErrNoPong
		}
		if r.Error != nil {
			if ctx.Err() != nil {
				return ErrNoPong
			}
			return r.Error
		}
		return nil
	case <-ctx.Done():
		return ErrNoPong
	}
}

// pingConn runs the libp2p ping protocol once over c.
func pingConn(ctx context.Context, c network.Conn) error {
	s, err := c.NewStream(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	if err := s.SetProtocol(ping.ID); err != nil {
		return err
	}
	if err := mss.SelectProtoOrFail(ping.ID, s); err != nil {
		return fmt.Errorf("ping over %s: %w", c.RemoteMultiaddr(), err)
	}
	out := make([]byte, ping.PingSize)
	rand.Read(out)
	if _, err := s.Write(out); err != nil {
		return err
	}
	in := make([]byte, ping.PingSize)
	if _, err := io.ReadFull(s, in); err != nil {
		if ctx.Err() != nil {
			return ErrNoPong
		}
		return err
	}
	if !bytes.Equal(in, out) {
		return fmt.Errorf("ping over %s: the answer is not the ping", c.RemoteMultiaddr())
	}
	return nil
}
