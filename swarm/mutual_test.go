package swarm

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// TestMutualSwap: a table full of 2 neighbours takes a peer that holds
// this one (it asked) in place of a neighbour that does not (its answer
// said so, and it asked nothing), never in place of one that holds this
// peer, and refuses a peer that does not hold it.
func TestMutualSwap(t *testing.T) {
	self := testID(t)
	asked := map[peer.ID]bool{}
	v := NewView(self, Liveness{MaxPeers: 64}, WithAdmission(Admission{UnprovenShare: 1, PerSubnet: -1, Neighbours: 2}))
	v.holds = func(id peer.ID) bool { return asked[id] }
	now := time.Now()
	seq := uint64(0)
	beat := func(id peer.ID) {
		seq++
		v.Observe(&gossip.Capability{PeerID: id.String(), Seq: seq}, now)
	}
	beat(self)
	a, b := testID(t), testID(t)
	beat(a)
	beat(b)
	v.holdsUs(a, true) // a's answer: its table holds this peer
	stranger, holder, second := testID(t), testID(t), testID(t)
	if v.Room(stranger, nil, now) {
		t.Fatal("Room: a full table would take a peer that does not hold it")
	}
	beat(stranger)
	if v.Alive(stranger) {
		t.Fatal("a peer that does not hold this one got into a full table")
	}
	asked[holder] = true
	if !v.Room(holder, nil, now) {
		t.Fatal("Room: a full table has no room for a peer that holds it, with a neighbour that does not")
	}
	beat(holder)
	if !v.Alive(holder) || v.Alive(b) || !v.Alive(a) {
		t.Fatalf("holder alive %v, b (does not hold) %v, a (holds) %v: want true, false, true", v.Alive(holder), v.Alive(b), v.Alive(a))
	}
	// Now a holds (its answer) and holder asked: no neighbour to give up.
	asked[second] = true
	if v.Room(second, nil, now) {
		t.Fatal("Room: a table of peers that hold it would give one up")
	}
	beat(second)
	if v.Alive(second) {
		t.Fatal("a peer took the place of a neighbour that holds this one")
	}
}
