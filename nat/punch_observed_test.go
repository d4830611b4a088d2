package nat

import (
	"net/netip"
	"strconv"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"
)

func addrs(ms []ma.Multiaddr) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.String())
	}
	return out
}

// TestObservedAddrsOneVoteEach: a connection counts once, an observer
// network has one vote, an address two networks agree on hides those seen
// by one, and votes age out.
func TestObservedAddrsOneVoteEach(t *testing.T) {
	o := newObservedAddrs()
	now := time.Now()
	real := ma.StringCast("/ip4/1.2.3.4/tcp/4001")
	ip := netip.MustParseAddr
	// One observer: its word is all there is.
	o.add("c1", ip("5.6.7.8"), real, now)
	if got := addrs(o.best(now)); len(got) != 1 || got[0] != real.String() {
		t.Fatalf("one observer: %v", got)
	}
	// A liar: identify pushes on the same connection, and new connections
	// from its network, each claiming another address.
	for i := range 40 {
		o.add("c1", ip("5.6.7.8"), ma.StringCast("/ip4/9.9.9.9/tcp/"+itoa(1000+i)), now)
	}
	liar := netip.AddrFrom4([4]byte{7, 7, 7, 1})
	for i := range 40 {
		o.add("liar"+itoa(i), liar.Next(), ma.StringCast("/ip4/9.9.9.9/tcp/"+itoa(2000+i)), now.Add(time.Duration(i)*time.Millisecond))
	}
	// Two more honest observers on other networks agree.
	o.add("c2", ip("11.0.0.1"), real, now)
	o.add("c3", ip("12.0.0.1"), real, now)
	got := addrs(o.best(now))
	if len(got) != 1 || got[0] != real.String() {
		t.Fatalf("with a liar and three honest observers: %v, want only %s", got, real)
	}
	// Votes age out.
	if got := o.best(now.Add(observedFor + time.Minute)); len(got) != 0 {
		t.Fatalf("after %v: %v, want nothing", observedFor, addrs(got))
	}
	// A forgotten connection may vote again (a new connection, say).
	o.forget("c1")
	other := ma.StringCast("/ip4/1.2.3.4/tcp/4002")
	o.add("c1", ip("5.6.7.8"), other, now)
	o.add("c4", ip("13.0.0.1"), other, now)
	o.add("c5", ip("14.0.0.1"), other, now)
	if got := addrs(o.best(now)); len(got) != 2 || got[0] != other.String() {
		t.Fatalf("after the port changed: %v, want %s first", got, other)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
