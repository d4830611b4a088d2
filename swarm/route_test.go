package swarm

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// TestRoutable: a peer is routable only while it is alive in the view,
// not banned in the ledger and not declared dead by the authority outside
// the view; each condition alone keeps it off routes, as does any mix.
func TestRoutable(t *testing.T) {
	cases := []struct {
		name                     string
		known, dead, banned, bmc bool
		ledger                   bool // the view has a ledger at all
		want                     bool
	}{
		{name: "alive", known: true, ledger: true, want: true},
		{name: "alive, no ledger, no authority", known: true, want: true},
		{name: "unknown", ledger: true},
		{name: "dead in the view", known: true, dead: true, ledger: true},
		{name: "banned", known: true, banned: true, ledger: true},
		{name: "bmc-dead", known: true, bmc: true, ledger: true},
		{name: "bmc-dead, no ledger", known: true, bmc: true},
		{name: "dead and banned", known: true, dead: true, banned: true, ledger: true},
		{name: "dead and bmc-dead", known: true, dead: true, bmc: true, ledger: true},
		{name: "banned and bmc-dead", known: true, banned: true, bmc: true, ledger: true},
		{name: "dead, banned and bmc-dead", known: true, dead: true, banned: true, bmc: true, ledger: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			self, id := testID(t), testID(t)
			now := time.Now()
			live := Liveness{Heartbeat: time.Second, Misses: 3}
			var opts []Option
			var tr *Trust
			if c.ledger {
				tr = NewTrust()
				opts = append(opts, WithTrust(tr))
			}
			var asked []peer.ID
			opts = append(opts, WithDead(func(p peer.ID) bool {
				asked = append(asked, p)
				return c.bmc && p == id
			}))
			v := NewView(self, live, opts...)
			if v.Trust() != tr {
				t.Fatalf("Trust() = %p, want the view's ledger %p", v.Trust(), tr)
			}
			if c.known {
				v.Observe(&gossip.Capability{PeerID: id.String(), Seq: 1}, now)
			}
			if c.dead {
				v.Sweep(now.Add(live.DeadAfter() + time.Second))
			}
			if c.banned {
				tr.Fail(id, "test: wrong numbers")
			}
			if got := v.Routable(id); got != c.want {
				t.Fatalf("Routable = %v, want %v", got, c.want)
			}
			if c.known && !c.dead && !c.banned && len(asked) != 1 {
				t.Fatalf("the authority was asked %d times, want once", len(asked))
			}
		})
	}
}

// TestRoutableWithoutAuthority: a view built without WithDead and
// without WithTrust routes through every live peer; a nil view has no
// ledger.
func TestRoutableWithoutAuthority(t *testing.T) {
	self, id := testID(t), testID(t)
	v := NewView(self, Liveness{})
	if v.Routable(id) {
		t.Fatal("an unknown peer is routable")
	}
	v.Observe(&gossip.Capability{PeerID: id.String(), Seq: 1}, time.Now())
	if !v.Routable(id) {
		t.Fatal("a live peer is not routable")
	}
	if (*View)(nil).Trust() != nil || v.Trust() != nil {
		t.Fatal("a view without a ledger returned one")
	}
}

// TestRoutableBanEnds: a banned peer is routable again once its ban ends.
func TestRoutableBanEnds(t *testing.T) {
	self, id := testID(t), testID(t)
	now := time.Now()
	tr := NewTrust()
	tr.SetClockForTest(func() time.Time { return now })
	v := NewView(self, Liveness{}, WithTrust(tr))
	v.Observe(&gossip.Capability{PeerID: id.String(), Seq: 1}, now)
	d := tr.Fail(id, "test: wrong numbers")
	if v.Routable(id) {
		t.Fatal("a banned peer is routable")
	}
	now = now.Add(d + time.Second)
	if !v.Routable(id) {
		t.Fatal("a peer is not routable after its ban ended")
	}
}
