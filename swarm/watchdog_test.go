package swarm

import (
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/llmswarm/llmswarm/internal/nettest"
)

func newHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// proxied makes a freezable proxy the only way a reaches b.
func proxied(t *testing.T, a, b host.Host) *nettest.Proxy {
	t.Helper()
	na, err := manet.ToNetAddr(b.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	px := nettest.NewProxy(t, na.String())
	pa, err := manet.FromNetAddr(px.Addr())
	if err != nil {
		t.Fatal(err)
	}
	a.Peerstore().AddAddr(b.ID(), pa, time.Hour)
	return px
}

// connected connects a to b at the addresses a knows, before a watch: the
// peers of a call are connected already, and a first dial under load could
// outlast a short probe timeout.
func connected(t *testing.T, a, b host.Host) {
	t.Helper()
	if err := a.Connect(t.Context(), peer.AddrInfo{ID: b.ID()}); err != nil {
		t.Fatal(err)
	}
}

func TestWatchFindsFrozenPeer(t *testing.T) {
	a, b := newHost(t), newHost(t)
	px := proxied(t, a, b)
	connected(t, a, b)
	p := Progress{Floor: 100 * time.Millisecond, ProbeTimeout: 300 * time.Millisecond}
	hungCh := make(chan peer.ID, 1)
	w := p.Watch(a, 0, []peer.ID{a.ID(), b.ID()}, func(id peer.ID, err error) { hungCh <- id })
	// Alive: several probe rounds pass without a verdict.
	select {
	case id := <-hungCh:
		t.Fatalf("live peer %s found hung", id)
	case <-time.After(700 * time.Millisecond):
	}
	px.Freeze()
	start := time.Now()
	select {
	case id := <-hungCh:
		if id != b.ID() {
			t.Fatalf("hung: %s, want %s", id, b.ID())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a frozen peer was never found hung")
	}
	hung, cause, detect := w.Stop()
	if hung != b.ID() || !errors.Is(cause, ErrNoPong) || detect <= 0 {
		t.Fatalf("Stop: %s, %v, %s", hung, cause, detect)
	}
	t.Logf("frozen peer found hung %s after the freeze", time.Since(start).Round(time.Millisecond))
	px.Thaw()
}

// TestWatchLatePongIsNoHang: a peer silent for longer than one probe's
// timeout, but not for a second probe's twice as long (a machine
// overloaded for a moment), is not called hung; one that stays silent is.
func TestWatchLatePongIsNoHang(t *testing.T) {
	a, b := newHost(t), newHost(t)
	px := proxied(t, a, b)
	connected(t, a, b)
	p := Progress{Floor: 100 * time.Millisecond, ProbeTimeout: 400 * time.Millisecond}
	hungCh := make(chan peer.ID, 1)
	w := p.Watch(a, 0, []peer.ID{b.ID()}, func(id peer.ID, err error) { hungCh <- id })
	defer w.Stop()
	// A probe is due within 100 ms: silent for its 400 ms; the second,
	// 800 ms long, is answered when the peer thaws.
	px.Freeze()
	time.Sleep(700 * time.Millisecond)
	px.Thaw()
	select {
	case id := <-hungCh:
		t.Fatalf("%s called hung for a pong 0.7 s late", id)
	case <-time.After(1500 * time.Millisecond):
	}
	px.Freeze()
	start := time.Now()
	select {
	case <-hungCh:
		t.Logf("frozen for good: found hung %s after the freeze", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("a frozen peer was never found hung")
	}
	px.Thaw()
}

func TestWatchProgressDefersProbes(t *testing.T) {
	a, b := newHost(t), newHost(t)
	px := proxied(t, a, b)
	px.Freeze() // b would fail any probe
	p := Progress{Floor: 200 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond}
	w := p.Watch(a, 0, []peer.ID{b.ID()}, func(peer.ID, error) {})
	for range 10 { // progress every 50 ms: no probe is ever due
		time.Sleep(50 * time.Millisecond)
		w.Progress(0)
	}
	if hung, _, _ := w.Stop(); hung != "" {
		t.Fatalf("a call making progress was judged hung (%s)", hung)
	}
}

func TestWatchStalledLivePeer(t *testing.T) {
	a, b := newHost(t), newHost(t)
	a.Peerstore().AddAddrs(b.ID(), b.Addrs(), time.Hour)
	connected(t, a, b)
	p := Progress{Floor: 50 * time.Millisecond, ProbeTimeout: time.Second, MaxStall: 300 * time.Millisecond}
	done := make(chan struct{})
	w := p.Watch(a, 0, []peer.ID{b.ID()}, func(peer.ID, error) { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("no verdict on a call stalled past max_stall")
	}
	if hung, cause, _ := w.Stop(); hung != b.ID() || !errors.Is(cause, ErrStalled) {
		t.Fatalf("Stop: %s, %v; want %s stalled", hung, cause, b.ID())
	}
}

func TestWatchWithNoRemotePeers(t *testing.T) {
	a := newHost(t)
	w := Progress{Floor: time.Millisecond}.Watch(a, 0, []peer.ID{a.ID()}, func(peer.ID, error) { t.Error("self probed") })
	time.Sleep(20 * time.Millisecond)
	if hung, _, _ := w.Stop(); hung != "" {
		t.Fatal(hung)
	}
}
