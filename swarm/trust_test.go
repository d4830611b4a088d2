package swarm

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/test"
)

func TestTrustPassFailBan(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tr := NewTrust()
	tr.SetClockForTest(func() time.Time { return now })
	id, err := test.RandPeerID()
	if err != nil {
		t.Fatal(err)
	}
	c := Claim{Model: "m", Start: 0, End: 8}
	if tr.Verified(id, c) || tr.Proven(id) {
		t.Fatal("a peer never checked counts as verified")
	}
	tr.Pass(id, c)
	if !tr.Verified(id, Claim{Model: "m", Start: 2, End: 4}) || !tr.Proven(id) {
		t.Fatal("a passed check of [0,8) does not cover [2,4)")
	}
	if tr.Verified(id, Claim{Model: "m", Start: 2, End: 9}) || tr.Verified(id, Claim{Model: "x", Start: 0, End: 1}) {
		t.Fatal("verified beyond what was checked")
	}
	var banned []peer.ID
	tr.OnBan(func(p peer.ID) { banned = append(banned, p) })
	if d := tr.Fail(id, "wrong hidden state"); d != 10*time.Minute {
		t.Fatalf("first ban %v, want 10m", d)
	}
	if b, why := tr.Banned(id); !b || why != "wrong hidden state" || len(banned) != 1 {
		t.Fatalf("banned=%v why=%q subs=%d", b, why, len(banned))
	}
	if tr.Verified(id, c) || tr.Proven(id) {
		t.Fatal("a failure must forget what was verified")
	}
	now = now.Add(11 * time.Minute)
	if b, _ := tr.Banned(id); b {
		t.Fatal("ban did not expire")
	}
	if d := tr.Fail(id, "again"); d != 20*time.Minute {
		t.Fatalf("second ban %v, want 20m", d)
	}
	for range 20 {
		tr.Fail(id, "again")
	}
	if d := tr.Fail(id, "again"); d != 24*time.Hour {
		t.Fatalf("ban grows past the cap: %v", d)
	}
}

func TestTrustSpeedsAndRestore(t *testing.T) {
	tr := NewTrust()
	id, _ := test.RandPeerID()
	tr.Measure(id, "ms_per_layer:m", 10)
	tr.Measure(id, "ms_per_layer:m", 20)
	if v, ok := tr.Speed(id, "ms_per_layer:m"); !ok || v != 13 {
		t.Fatalf("running average %v %v, want 13", v, ok)
	}
	for _, bad := range []float64{0, -1, 1e13} {
		tr.Measure(id, "x", bad)
	}
	if _, ok := tr.Speed(id, "x"); ok {
		t.Fatal("absurd measurements kept")
	}
	tr.Fail(id, "lied")
	b, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back := NewTrust()
	if err := back.Restore(b); err != nil {
		t.Fatal(err)
	}
	if banned, why := back.Banned(id); !banned || why != "lied" {
		t.Fatalf("restored ban lost: %v %q", banned, why)
	}
	if err := back.Restore([]byte(`{"not":"a list"}`)); err == nil {
		t.Fatal("a corrupt ledger restored")
	}
	if err := back.Restore([]byte(`[{"peer":"nonsense","passed":3}]`)); err != nil || len(back.Snapshot()) != 1 {
		t.Fatalf("bad entries must be skipped: %v %d", err, len(back.Snapshot()))
	}
}

// TestTrustChecked: the checked answers a peer served are counted, kept
// over a save and restore, and forgotten by a failure (its probation
// starts again).
func TestTrustChecked(t *testing.T) {
	tr := NewTrust()
	id, err := test.RandPeerID()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		tr.Agreed(id)
	}
	b, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back := NewTrust()
	if err := back.Restore(b); err != nil {
		t.Fatal(err)
	}
	if n := back.Checked(id); n != 3 {
		t.Fatalf("%d checked answers after a restore, want 3", n)
	}
	back.Fail(id, "lied")
	if n := back.Checked(id); n != 0 {
		t.Fatalf("%d checked answers after a failure, want 0", n)
	}
	if err := back.Restore([]byte(`[{"peer":"` + id.String() + `","checked":-1}]`)); err != nil || back.Checked(id) != 0 {
		t.Fatalf("a negative count restored: %v", err)
	}
}
