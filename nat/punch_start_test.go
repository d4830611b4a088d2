package nat

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// TestPunchSeesFirstConnection: a private peer's host dials its static
// relay as the host starts, before the plane's Start; what the relay
// observes of that connection is still a vote for this peer's public
// address. (It was missed: a peer whose only direct connection is to its
// relay never learned a public address, never served DCUtR, and every
// punch to it failed with "protocols not supported".)
func TestPunchSeesFirstConnection(t *testing.T) {
	const env = "NAT_TEST_LOOPBACK_PUBLIC"
	if os.Getenv(env) == "" {
		// Loopback counts as public in a child process only: the table
		// of unroutable ranges is process-wide.
		cmd := exec.Command(os.Args[0], "-test.run=^TestPunchSeesFirstConnection$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), env+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	// New first: it widens the public ranges, which hosts read.
	s, err := New(Config{Reachability: "private", PortMapping: "off", HolePunching: "on", PublicCIDRs: []string{"127.0.0.0/8"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	relayHost := relayTestHost(t)
	h, err := libp2p.New(append(s.Options(), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	t.Cleanup(func() { s.Close() })
	seen, err := h.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted))
	if err != nil {
		t.Fatal(err)
	}
	defer seen.Close()
	if err := h.Connect(context.Background(), peer.AddrInfo{ID: relayHost.ID(), Addrs: relayHost.Addrs()}); err != nil {
		t.Fatal(err)
	}
	var observed ma.Multiaddr
	select {
	case e := <-seen.Out():
		observed = e.(event.EvtPeerIdentificationCompleted).ObservedAddr
		if observed == nil {
			t.Fatal("the relay observed no address")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the relay's identify did not complete in 10s")
	}
	if err := s.Start(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	p := s.punch.Load()
	deadline := time.Now().Add(10 * time.Second)
	for len(p.obs.best(time.Now())) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the puncher holds no observed address; the relay saw the connection made before Start as %s", observed)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
