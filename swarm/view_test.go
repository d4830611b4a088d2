package swarm

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

func testID(t testing.TB) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// table drives a view with a clock of its own.
type table struct {
	t   testing.TB
	v   *View
	now time.Time
	seq uint64
}

func (tb *table) beat(id peer.ID, addr string) {
	tb.seq++
	var a netip.Addr
	if addr != "" {
		a = netip.MustParseAddr(addr)
	}
	tb.v.ObserveFrom(&gossip.Capability{PeerID: id.String(), Seq: tb.seq}, tb.now, a)
}

func (tb *table) has(id peer.ID) bool { _, ok := tb.v.Get(id); return ok }

func (tb *table) counts() (unproven int, perNet map[netip.Prefix]int) {
	perNet = map[netip.Prefix]int{}
	for _, p := range tb.v.Peers() {
		if p.Self || tb.v.proven(p.ID) {
			continue
		}
		unproven++
		perNet[subnet(p.Addr)]++
	}
	return unproven, perNet
}

// TestSybilsDoNotCrowdOutNewcomers: 24 sybils on three subnets beat
// into a 16-row table holding one proven peer; an honest newcomer from
// another subnet gets in and stays while they keep beating, the proven
// peer is never evicted, unproven peers hold at most half the table and
// one subnet at most PerSubnet rows.
func TestSybilsDoNotCrowdOutNewcomers(t *testing.T) {
	trust := NewTrust()
	self := testID(t)
	tb := &table{t: t, now: time.Now(), v: NewView(self, Liveness{MaxPeers: 16}, WithTrust(trust),
		WithAdmission(Admission{UnprovenShare: 0.5, PerSubnet: 4}))}
	tb.beat(self, "")
	proven := testID(t)
	trust.Pass(proven, Claim{Model: "m", Start: 0, End: 4})
	tb.beat(proven, "192.0.2.10")
	var sybils []peer.ID
	for i := range 24 {
		sybils = append(sybils, testID(t))
		_ = i
	}
	round := func() {
		for i, s := range sybils {
			tb.beat(s, fmt.Sprintf("10.0.%d.%d", i%3, 1+i))
		}
		tb.now = tb.now.Add(500 * time.Millisecond)
	}
	for range 5 {
		round()
	}
	check := func(when string) {
		t.Helper()
		unproven, perNet := tb.counts()
		if unproven > 8 {
			t.Fatalf("%s: %d unproven rows, at most 8 allowed", when, unproven)
		}
		for n, c := range perNet {
			if c > 4 {
				t.Fatalf("%s: %d unproven rows on %s, at most 4", when, c, n)
			}
		}
		if !tb.has(proven) || !tb.has(self) {
			t.Fatalf("%s: the proven peer or this one was evicted", when)
		}
	}
	check("sybils only")
	newcomer := testID(t)
	tb.beat(newcomer, "198.51.100.7")
	if !tb.has(newcomer) {
		t.Fatal("the honest newcomer was refused")
	}
	for range 20 {
		round()
		tb.beat(newcomer, "198.51.100.7")
		tb.beat(proven, "192.0.2.10")
		check("sybils and newcomer")
		if !tb.v.Alive(newcomer) {
			t.Fatal("the sybils churned the honest newcomer out")
		}
	}
}

// TestAdmissionEvictionOrder: a full table evicts a dead peer before any
// live one; a proven newcomer displaces an unproven peer; protected peers
// stay; a newcomer whose subnet is as crowded as any is refused rather
// than churning its equals.
func TestAdmissionEvictionOrder(t *testing.T) {
	trust := NewTrust()
	self := testID(t)
	var protected peer.ID
	tb := &table{t: t, now: time.Now(), v: NewView(self, Liveness{MaxPeers: 5}, WithTrust(trust),
		WithAdmission(Admission{UnprovenShare: 1, PerSubnet: -1}),
		WithProtect(func(id peer.ID) bool { return id == protected }))}
	tb.beat(self, "")
	protected = testID(t)
	tb.beat(protected, "10.0.0.1")
	a, b, c := testID(t), testID(t), testID(t)
	tb.beat(a, "10.0.0.2")
	tb.beat(b, "10.0.0.3")
	tb.beat(c, "10.0.0.4")
	// Full (5). b goes silent and dies; a newcomer takes its row.
	tb.now = tb.now.Add(time.Minute)
	for _, id := range []peer.ID{protected, a, c} {
		tb.beat(id, "")
	}
	tb.v.Sweep(tb.now.Add(time.Second))
	d := testID(t)
	tb.beat(d, "10.0.0.5")
	if tb.has(b) || !tb.has(d) {
		t.Fatal("the dead peer was not evicted for the newcomer")
	}
	// A newcomer from the same, most crowded subnet: it would only churn
	// its equals, so it is refused.
	e := testID(t)
	tb.beat(e, "10.0.0.6")
	if tb.has(e) {
		t.Fatal("a newcomer evicted a live peer of its own subnet")
	}
	// A proven newcomer displaces an unproven peer, never the protected one.
	f := testID(t)
	trust.Pass(f, Claim{Model: "m", End: 1})
	tb.beat(f, "10.0.0.7")
	if !tb.has(f) || !tb.has(protected) {
		t.Fatalf("proven newcomer admitted %v, protected kept %v", tb.has(f), tb.has(protected))
	}
	if n := len(tb.v.Peers()); n != 5 {
		t.Fatalf("%d rows, want 5", n)
	}
}

// TestUnprovenShareWithoutAddresses: callers that know no
// address (tests, a relayed connection) are admitted until the unproven
// share is used up.
func TestUnprovenShareWithoutAddresses(t *testing.T) {
	tb := &table{t: t, now: time.Now(), v: NewView(testID(t), Liveness{MaxPeers: 8})}
	var ids []peer.ID
	for range 6 {
		id := testID(t)
		ids = append(ids, id)
		tb.beat(id, "")
	}
	for i, id := range ids {
		if got := tb.has(id); got != (i < 4) {
			t.Fatalf("peer %d in table: %v", i, got)
		}
	}
}
