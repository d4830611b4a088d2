package swarm

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

func testID(t *testing.T) peer.ID {
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

// TestStaleRecordsNeverResurrect: a record whose signer time is older than
// the liveness window (plus the clock-skew allowance), or too far ahead,
// makes no peer alive, in a new view (a newcomer fed replayed records) or
// in one that saw the peer die.
func TestStaleRecordsNeverResurrect(t *testing.T) {
	now := time.Now()
	v := NewView(testID(t), Liveness{})
	window := v.Liveness().DeadAfter() + maxClockSkew
	id := testID(t)
	rec := func(seq uint64, signed time.Time) *gossip.Capability {
		return &gossip.Capability{PeerID: id.String(), Seq: seq, TimeMS: signed.UnixMilli(),
			Roles: []gossip.Role{{Role: "reasoner", ModelCID: "bafkreiold"}}}
	}
	for _, signed := range []time.Time{now.Add(-window - time.Second), now.Add(-time.Hour), time.UnixMilli(0), now.Add(maxClockSkew + time.Second)} {
		v.Observe(rec(1, signed), now)
		if _, ok := v.Get(id); ok || v.Alive(id) || len(v.ByRole("reasoner")) != 0 {
			t.Fatalf("a record signed %s from now made a peer known", signed.Sub(now).Round(time.Second))
		}
	}
	// Fresh (within the allowance either way): alive.
	v.Observe(rec(2, now.Add(-maxClockSkew/2)), now)
	if !v.Alive(id) {
		t.Fatal("a fresh record did not make its peer alive")
	}
	// It dies; a replay of an old record with a higher sequence number
	// (captured before the peer restarted its counter) does not bring it back.
	later := now.Add(v.Liveness().DeadAfter() + time.Second)
	v.Sweep(later)
	if v.Alive(id) {
		t.Fatal("a silent peer is still alive")
	}
	v.Observe(rec(99, now.Add(-window)), later)
	if v.Alive(id) {
		t.Fatal("a replayed old record made a dead peer alive")
	}
	v.Observe(rec(100, later), later)
	if !v.Alive(id) {
		t.Fatal("a fresh heartbeat did not make the peer alive again")
	}
}
