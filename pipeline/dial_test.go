package pipeline

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"
)

// TestStageDialsOnlyKnownPeers: a requester names as the next hop a peer
// the stage does not know, with an address of the test's own in the route:
// the stage refuses without dialling anything. A known next hop that
// cannot be reached fails without the dial error's details (which would
// tell a requester which ports are open where).
func TestStageDialsOnlyKnownPeers(t *testing.T) {
	const arch = "qwen3"
	_, cid := model(t, arch)
	requester, st := newStagePeer(t), newStagePeer(t)
	st.serve(t, arch, 0, 2)
	requester.h.Peerstore().AddAddrs(st.h.ID(), st.h.Addrs(), time.Hour)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dialled atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	stranger := newStagePeer(t) // a real peer ID the stage has never heard of
	o := &Originator{Host: requester.h}
	open := Open{Session: 9, Model: cid, Layers: 4, Hidden: 64, DType: DTypeF32, Route: []RouteHop{
		{Peer: st.h.ID().String(), Start: 0, End: 2},
		{Peer: stranger.h.ID().String(), Addrs: []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port)}, Start: 2, End: 4},
	}}
	_, err = o.openChain(t.Context(), open)
	var se *StageError
	if !errors.As(err, &se) || se.Code != CodeDownstream || se.Peer != stranger.h.ID().String() ||
		!strings.Contains(se.Err.Error(), "not a peer this stage knows") {
		t.Fatalf("open through an unknown next hop: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := dialled.Load(); n != 0 {
		t.Fatalf("the stage dialled the address a requester gave it (%d connections)", n)
	}

	// Known, but nothing listens where it is said to be.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	gone := newStagePeer(t)
	st.h.Peerstore().AddAddr(gone.h.ID(), ma.StringCast(fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", closedPort)), time.Hour)
	open.Session, open.Route[1].Peer, open.Route[1].Addrs = 10, gone.h.ID().String(), nil
	_, err = o.openChain(t.Context(), open)
	if !errors.As(err, &se) || se.Code != CodeDownstream || se.Peer != gone.h.ID().String() {
		t.Fatalf("open through an unreachable next hop: %v", err)
	}
	if msg := se.Err.Error(); strings.Contains(msg, fmt.Sprint(closedPort)) || strings.Contains(msg, "refused") || strings.Contains(msg, "127.0.0.1") {
		t.Fatalf("the stage's error tells the requester how the dial failed: %q", msg)
	}
}
