package ledger

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestVouching: a peer that served C presents C's receipt to R, which
// trusts C and has dealt with it: R credits half its work, and the peer
// is no stranger there. The same voucher again, one signed by a sybil R
// does not trust or one R never dealt with, one for another peer's work
// and one older than a week count nothing; the credit stops at the
// allowance; the vouchers survive a restart.
func TestVouching(t *testing.T) {
	ck := &clock{t: time.Unix(1_800_000_000, 0)}
	_, p := newKey(t)
	cKey, c := newKey(t)
	sybilKey, sybil := newKey(t)
	strangerKey, stranger := newKey(t)
	_, q := newKey(t)
	_, r := newKey(t)
	pl, rl := ledgerAt(p, ck, Options{}), ledgerAt(r, ck, Options{Allowance: 100})
	served := func(key interface {
		Sign([]byte) ([]byte, error)
	}, client peer.ID, server peer.ID, tokens int64, at time.Time) *Signed {
		rc := Receipt{Server: server.String(), Client: client.String(), At: at.UnixMilli(), Nonce: uint64(at.UnixNano()) + uint64(tokens),
			Items: []Item{{Kind: KindMoA, Role: "writer", Tokens: tokens}}}
		sig, _ := key.Sign(rc.Encode())
		return &Signed{Receipt: rc, Sig: sig}
	}
	// p served c, sybil and stranger; each signed for it.
	for _, v := range []*Signed{served(cKey, c, p, 120, ck.t), served(sybilKey, sybil, p, 5000, ck.t), served(strangerKey, stranger, p, 80, ck.t)} {
		if err := pl.Accept(v); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(pl.Vouchers()); got != 3 {
		t.Fatalf("p keeps %d vouchers, want 3", got)
	}
	// r dealt with c and with stranger; r trusts c and sybil, not stranger.
	if err := rl.Take(c, Item{Kind: KindMoA, Tokens: 10}); err != nil {
		t.Fatal(err)
	}
	if err := rl.Take(stranger, Item{Kind: KindMoA, Tokens: 10}); err != nil {
		t.Fatal(err)
	}
	trusted := func(id peer.ID) bool { return id == c || id == sybil }
	other := served(cKey, c, q, 100, ck.t)                    // q's work, presented by p
	old := served(cKey, c, p, 100, ck.t.Add(-8*24*time.Hour)) // a week and a day old
	credit, refused := rl.Vouched(p, append(pl.Vouchers(), other, old), trusted)
	if credit != 60 {
		t.Fatalf("credited %g, want 60 (half of c's 120): refused %v", credit, refused)
	}
	for _, want := range []string{"never gave to or took from", "does not trust", "presented by", "ago (at most"} {
		found := false
		for _, why := range refused {
			found = found || strings.Contains(why, want)
		}
		if !found {
			t.Errorf("no voucher refused for %q: %v", want, refused)
		}
	}
	if s := rl.Standing(p); s <= 0 {
		t.Fatalf("p's standing at r after c's voucher: %g, want above a stranger's 0", s)
	}
	if credit, _ := rl.Vouched(p, pl.Vouchers(), trusted); credit != 0 {
		t.Fatalf("the same vouchers again credited %g", credit)
	}
	big := served(cKey, c, p, 1000, ck.t.Add(time.Minute))
	if credit, _ := rl.Vouched(p, []*Signed{big}, trusted); credit != 40 {
		t.Fatalf("a voucher past the bound credited %g, want the 40 left of the allowance of 100", credit)
	}
	path := filepath.Join(t.TempDir(), "ledger.json")
	if err := pl.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := Load(path, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	back.now = ck.now
	if got := len(back.Vouchers()); got != 3 {
		t.Fatalf("after a restart p keeps %d vouchers, want 3", got)
	}
}

// TestVouchOnTheWire: a peer introduces itself to another over the vouch
// protocol, once a day; the receiver credits what it trusts.
func TestVouchOnTheWire(t *testing.T) {
	p, c, r := newHost(t), newHost(t), newHost(t)
	connect(t, p, c)
	connect(t, p, r)
	connect(t, c, r)
	ex := map[string]*Exchange{}
	for name, h := range map[string]host.Host{"p": p, "c": c, "r": r} {
		e, err := NewExchange(h, New(h.ID(), Options{}), nil)
		if err != nil {
			t.Fatal(err)
		}
		e.Delay = 10 * time.Millisecond
		t.Cleanup(e.Close)
		ex[name] = e
	}
	ex["r"].Trusted = func(id peer.ID) bool { return id == c.ID() }
	ex["c"].Ack(p.ID(), Item{Kind: KindMoA, Tokens: 300}) // p served c
	ex["r"].Ack(c.ID(), Item{Kind: KindMoA, Tokens: 50})  // c served r
	for deadline := time.Now().Add(10 * time.Second); len(ex["p"].Ledger.Vouchers()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("p holds no voucher")
		}
	}
	credit, err := ex["p"].Vouch(t.Context(), r.ID())
	if err != nil || credit < 149 || credit > 150 {
		t.Fatalf("vouched: %g, %v; want 150", credit, err)
	}
	var vouched float64
	for _, a := range ex["r"].Ledger.Snapshot() {
		if a.Peer == p.ID().String() {
			vouched = a.Vouched
		}
	}
	if vouched < 149 {
		t.Fatalf("r's account of p: vouched %g", vouched)
	}
	if credit, err := ex["p"].Vouch(t.Context(), r.ID()); credit != 0 || err == nil || !strings.Contains(err.Error(), "presented before") {
		t.Fatalf("the same vouchers again: %g, %v", credit, err)
	}
}
