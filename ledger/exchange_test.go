package ledger

import (
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
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

func connect(t *testing.T, a, b host.Host) {
	t.Helper()
	a.Peerstore().AddAddrs(b.ID(), b.Addrs(), time.Hour)
	b.Peerstore().AddAddrs(a.ID(), a.Addrs(), time.Hour)
}

// TestExchangeOnTheWire: work a client acknowledges reaches the server in
// one receipt per delay, over the receipt protocol, and counts there; the
// same receipt sent again, or sent by a third peer, is refused with its
// reason and counts nothing; Close sends what is pending.
func TestExchangeOnTheWire(t *testing.T) {
	server, client, third := newHost(t), newHost(t), newHost(t)
	connect(t, server, client)
	connect(t, third, server)
	ex := map[string]*Exchange{}
	for name, h := range map[string]host.Host{"server": server, "client": client, "third": third} {
		e, err := NewExchange(h, New(h.ID(), Options{}), nil)
		if err != nil {
			t.Fatal(err)
		}
		e.Delay = 200 * time.Millisecond
		t.Cleanup(e.Close)
		ex[name] = e
	}
	for range 4 {
		ex["client"].Ack(server.ID(), Item{Kind: KindStage, Model: "bafyroot", Start: 0, End: 7, Layers: 28, Tokens: 100})
	}
	ex["client"].mu.Lock()
	if p := ex["client"].due[server.ID()]; p == nil || len(p.items) != 1 || p.items[0].Tokens != 400 {
		t.Errorf("pending %+v: want the four pieces of the same work as one item of 400 positions", p)
	}
	ex["client"].mu.Unlock()
	if got := ex["client"].Ledger.Snapshot(); len(got) != 1 || !near(got[0].Taken, 100) {
		t.Fatalf("client's ledger %+v, want 100 taken at once", got)
	}
	if peers, given, taken := ex["client"].Ledger.Totals(); peers != 1 || given != 0 || !near(taken, 100) {
		t.Fatalf("client's totals: %d peers, %g given, %g taken", peers, given, taken)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(ex["server"].Ledger.Snapshot()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := ex["server"].Ledger.Snapshot()
	if len(got) != 1 || got[0].Peer != client.ID().String() || !near(got[0].Given, 100) {
		t.Fatalf("server's ledger %+v, want 100 given to the client", got)
	}
	it := []Item{{Kind: KindMoA, Tokens: 9}}
	s, err := ex["client"].Ledger.Issue(server.ID(), it, ex["client"].key)
	if err != nil {
		t.Fatal(err)
	}
	if err := ex["client"].Send(t.Context(), server.ID(), s); err != nil {
		t.Fatal(err)
	}
	if err := ex["client"].Send(t.Context(), server.ID(), s); err == nil || !strings.Contains(err.Error(), "already counted") {
		t.Fatalf("the same receipt again: %v", err)
	}
	s2, _ := ex["client"].Ledger.Issue(server.ID(), it, ex["client"].key)
	if err := ex["third"].Send(t.Context(), server.ID(), s2); err == nil || !strings.Contains(err.Error(), "only the client sends") {
		t.Fatalf("another peer's receipt: %v", err)
	}
	if got := ex["server"].Ledger.Snapshot(); !near(got[0].Given, 109) {
		t.Fatalf("server's ledger %+v, want 109 given: the refused receipts count nothing", got)
	}
	ex["client"].Delay = time.Hour
	ex["client"].Ack(server.ID(), Item{Kind: KindMoA, Tokens: 11})
	ex["client"].Close()
	if got := ex["server"].Ledger.Snapshot(); !near(got[0].Given, 120) {
		t.Fatalf("server's ledger %+v, want 120 given: Close sent what was pending", got)
	}
}

// near: equal but for the decay of the test's own seconds.
func near(x, want float64) bool { return x > want-0.01 && x <= want }
