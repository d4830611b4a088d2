package swarm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
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
// proves the peer is there, and a connection that stays silent until the
// deadline while another answers is dead (a punched path a NAT forgot, a
// relay gone) and is closed, so streams opened next use one that works.
// A connection that refuses the ping stream (a resource limit, a reset)
// is not judged. Concurrent pings of one peer share one round: the calls
// watched at once on one peer (many questions to one role peer) probe it
// with one stream, not one each, which its stream limits would refuse.
func Ping(ctx context.Context, h host.Host, id peer.ID) error {
	// Over a relayed (limited) connection too: an answer proves the peer
	// is there, however it is reached.
	ctx = network.WithAllowLimitedConn(ctx, "ping")
	k := pingKey{h.ID(), id}
	pings.mu.Lock()
	c, ok := pings.m[k]
	if !ok {
		c = &pingCall{done: make(chan struct{})}
		pings.m[k] = c
		// The round is its own: a caller that gives up (its question
		// ended) must not end it for the others, who would read its end
		// as silence. It lasts until the first caller's deadline.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxConnPing)
		if dl, ok := ctx.Deadline(); ok {
			cancel()
			rctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl)
		}
		c.deadline, _ = rctx.Deadline()
		go func() {
			defer cancel()
			if len(h.Network().ConnsToPeer(id)) < 2 {
				c.err = pingPeer(rctx, h, id)
			} else {
				c.err = pingConns(rctx, h, id)
			}
			pings.mu.Lock()
			delete(pings.m, k)
			pings.mu.Unlock()
			close(c.done)
		}()
	}
	pings.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		if dl, ok := ctx.Deadline(); ok && !c.deadline.After(dl) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The round ends at this same deadline: its verdict (an answer
			// on one connection, the others silent) is this caller's.
			<-c.done
			return c.err
		}
		return ErrNoPong
	}
}

type pingKey struct{ self, peer peer.ID }

type pingCall struct {
	done     chan struct{}
	deadline time.Time // when the round gives up
	err      error
}

// pings are the pings in flight.
var pings = struct {
	mu sync.Mutex
	m  map[pingKey]*pingCall
}{m: map[pingKey]*pingCall{}}

// pingConns pings id over each open connection (see Ping).
func pingConns(ctx context.Context, h host.Host, id peer.ID) error {
	conns := h.Network().ConnsToPeer(id)
	cctx, cancel := context.WithTimeout(ctx, maxConnPing)
	defer cancel()
	type result struct {
		c   network.Conn
		rtt time.Duration
		err error
	}
	results := make(chan result, len(conns))
	for _, c := range conns {
		go func() {
			rtt, err := pingConn(cctx, c)
			results <- result{c, rtt, err}
		}()
	}
	var first error
	var silent []network.Conn
	answered, best := 0, time.Duration(0)
	for range conns {
		r := <-results
		switch {
		case r.err == nil:
			answered++
			if best == 0 || r.rtt < best {
				best = r.rtt
			}
		case errors.Is(r.err, ErrNoPong):
			silent = append(silent, r.c)
		}
		if r.err != nil && first == nil {
			first = r.err
		}
	}
	if answered == 0 {
		if ctx.Err() != nil || first == nil {
			return ErrNoPong
		}
		return first
	}
	h.Peerstore().RecordLatency(id, best)
	for _, c := range silent {
		c.Close()
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

// pingConn runs the libp2p ping protocol once over c; ErrNoPong means no
// answer came before ctx ended.
func pingConn(ctx context.Context, c network.Conn) (time.Duration, error) {
	s, err := c.NewStream(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ErrNoPong
		}
		return 0, err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	silent := func(err error) error {
		var ne net.Error
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			return ErrNoPong
		}
		return err
	}
	if err := s.SetProtocol(ping.ID); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := mss.SelectProtoOrFail(ping.ID, s); err != nil {
		return 0, silent(fmt.Errorf("ping over %s: %w", c.RemoteMultiaddr(), err))
	}
	out := make([]byte, ping.PingSize)
	rand.Read(out)
	if _, err := s.Write(out); err != nil {
		return 0, silent(err)
	}
	in := make([]byte, ping.PingSize)
	if _, err := io.ReadFull(s, in); err != nil {
		return 0, silent(err)
	}
	if !bytes.Equal(in, out) {
		return 0, fmt.Errorf("ping over %s: the answer is not the ping", c.RemoteMultiaddr())
	}
	return time.Since(start), nil
}
