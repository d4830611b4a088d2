package swarm

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestBootstrapLetGo: a bootstrap peer is kept while the table is
// isolated (fewer live neighbours than half the bound), a neighbour like
// any other past that, and let go by a full table unless it holds this
// peer; an isolated table takes it back.
func TestBootstrapLetGo(t *testing.T) {
	seed := testID(t)
	now := time.Now()
	v, asked, beat := boundView(t, 4, now, WithBootstrap(func(id peer.ID) bool { return id == seed }))
	beat(seed)
	ns := []peer.ID{testID(t), testID(t), testID(t), testID(t)}
	for _, id := range ns[:3] {
		beat(id)
	}
	v.LetGoBootstrap(now)
	if v.Isolated() || !v.Alive(seed) {
		t.Fatalf("3 neighbours of 4: isolated %v, bootstrap peer held %v; want false, true", v.Isolated(), v.Alive(seed))
	}
	beat(ns[3]) // the seed counts as a neighbour now: 4 with it
	if v.Alive(ns[3]) {
		t.Fatal("a full table took a fourth neighbour beside the bootstrap peer")
	}
	v.LetGoBootstrap(now)
	if v.Alive(seed) {
		t.Fatal("full, not needed, not held: the bootstrap peer was not let go")
	}
	beat(ns[3])
	if !v.Alive(ns[3]) {
		t.Fatal("the bootstrap peer let go, the table took no fourth neighbour in its place")
	}

	// One that holds this peer stays, as any neighbour that does.
	asked[seed] = true
	beat(seed) // takes the place of a neighbour that does not hold this one
	v.LetGoBootstrap(now)
	if !v.Alive(seed) {
		t.Fatal("a bootstrap peer that holds this one was let go")
	}
	asked[seed] = false

	// Cut off from most neighbours, the table keeps it again.
	for _, id := range ns {
		v.markDead(id, now)
	}
	v.LetGoBootstrap(now)
	if !v.Isolated() {
		t.Fatal("no live neighbour left, the table is not isolated")
	}
	v.LetGoBootstrap(now)
	if !v.Alive(seed) {
		t.Fatal("an isolated table let go of its bootstrap peer")
	}
}
