package node

import (
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestShardSourcesOrder: a source that sent a bad file is tried after
// every clean one (fewest faults first); among clean sources the least
// used goes first, and otherwise the caller's order stands.
func TestShardSourcesOrder(t *testing.T) {
	var s shardSources
	a, b, c, d, e := peer.ID("a"), peer.ID("b"), peer.ID("c"), peer.ID("d"), peer.ID("e")
	s.bad(a, 100)
	s.bad(a, 100)
	s.bad(b, 100)
	s.good(c, 1000)
	got := s.order([]peer.ID{a, b, c, d, e})
	if want := []peer.ID{d, e, c, b, a}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if st := s.stat(a); st.Faults != 2 || st.PoisonBytes != 200 {
		t.Fatalf("a: %+v", st)
	}
}
