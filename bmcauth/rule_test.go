package bmcauth

import (
	"bytes"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/bmc"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/swarm"
)

var boardKey = bytes.Repeat([]byte{0x42}, bmc.KeySize)

// ids returns n fresh peer IDs in text order.
func ids(t *testing.T, n int) []peer.ID {
	t.Helper()
	var out []peer.ID
	for range n {
		_, pub, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		id, err := peer.IDFromPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// record is the validated record a bridge from would publish for a board
// table (boot, seq) declaring dead dead and live live.
func record(t *testing.T, from peer.ID, boot, seq uint32, live, dead []peer.ID) *gossip.BMCTable {
	t.Helper()
	tab := &bmc.Table{Boot: boot, Seq: seq, Uptime: time.Duration(seq) * time.Second, Period: 3 * time.Second, Misses: 2}
	for _, id := range live {
		tab.Nodes = append(tab.Nodes, bmc.Node{Handle: bmc.HandleFor([]byte(id)), Live: true, Age: time.Second})
	}
	for _, id := range dead {
		tab.Nodes = append(tab.Nodes, bmc.Node{Handle: bmc.HandleFor([]byte(id)), Age: 7 * time.Second})
	}
	nonce, err := bmc.NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := bmc.SignTable(boardKey, nonce, tab)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := bmc.ParseTable(raw)
	if err != nil {
		t.Fatal(err)
	}
	parsed.Nonce = nonce
	rec := gossip.NewBMCTable(from, NextSeq(), time.Now(), parsed, nil, nil)
	if err := rec.Validate(); err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestAcceptOrder(t *testing.T) {
	p := ids(t, 2)
	bridge, victim := p[0], p[1]
	s := New(nil, nil, Config{Allowed: []peer.ID{bridge}}, nil)
	now := time.Now()
	steps := []struct {
		boot, seq uint32
		dead      bool
		accepted  bool
		stale     uint64
	}{
		{2, 10, false, true, 0},
		{2, 5, true, false, 1},  // older
		{2, 10, true, false, 2}, // replayed
		{1, 99, true, false, 3}, // an earlier boot
		{3, 1, true, true, 3},   // the board rebooted
		{3, 2, false, true, 3},  // next table of the new boot
	}
	for i, st := range steps {
		live, dead := []peer.ID{victim}, []peer.ID(nil)
		if st.dead {
			live, dead = nil, live
		}
		if got := s.accept(record(t, bridge, st.boot, st.seq, live, dead), now); got != st.accepted {
			t.Fatalf("step %d (%d, %d): accepted %v, want %v", i, st.boot, st.seq, got, st.accepted)
		}
		snap := s.Snapshot(now)
		src := snap.Sources[bridge]
		if src.Stale != st.stale {
			t.Fatalf("step %d: %d stale, want %d", i, src.Stale, st.stale)
		}
		if st.accepted && src.Table.Dead(bmc.HandleFor([]byte(victim))) != st.dead {
			t.Fatalf("step %d: the accepted table's verdict on the victim is not in force", i)
		}
	}
	if snap := s.Snapshot(now); snap.Table.Table.Boot != 3 || snap.Table.Table.Seq != 2 {
		t.Fatalf("table in force (%d, %d), want (3, 2)", snap.Table.Table.Boot, snap.Table.Table.Seq)
	}
}

func TestAuthorityRule(t *testing.T) {
	p := ids(t, 3)
	first, second, victim := p[0], p[1], p[2]
	t0 := time.Now()
	tests := []struct {
		name           string
		firstAt        time.Time // zero: never heard
		secondAt       time.Time
		now            time.Time
		want           peer.ID
		wantVictimDead bool
	}{
		{"both fresh: the lowest ID", t0, t0, t0.Add(time.Second), first, true},
		{"the lowest silent: the next takes over", t0, t0.Add(3 * time.Second), t0.Add(Freshness + time.Second), second, false},
		{"at the edge of freshness the lowest holds", t0, t0, t0.Add(Freshness), first, true},
		{"only the second heard", time.Time{}, t0, t0, second, false},
		{"every BMC silent: none in force", t0, t0, t0.Add(Freshness + time.Millisecond), "", false},
		{"none heard", time.Time{}, time.Time{}, t0, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New(nil, nil, Config{Allowed: []peer.ID{second, first}}, nil)
			if !tc.firstAt.IsZero() && !s.accept(record(t, first, 1, 1, nil, []peer.ID{victim}), tc.firstAt) {
				t.Fatal("first's table refused")
			}
			if !tc.secondAt.IsZero() && !s.accept(record(t, second, 1, 1, []peer.ID{victim}, nil), tc.secondAt) {
				t.Fatal("second's table refused")
			}
			snap := s.Snapshot(tc.now)
			if snap.Authority != tc.want {
				t.Fatalf("authority %s, want %s", snap.Authority, tc.want)
			}
			if (snap.Table == nil) != (tc.want == "") {
				t.Fatalf("table in force %v with authority %q", snap.Table != nil, tc.want)
			}
			if snap.Table != nil && snap.Table.Table.Dead(bmc.HandleFor([]byte(victim))) != tc.wantVictimDead {
				t.Fatalf("victim dead %v, want %v", !tc.wantVictimDead, tc.wantVictimDead)
			}
			if got := []peer.ID{first, second}; fmt.Sprint(snap.Allowed) != fmt.Sprint(got) {
				t.Fatalf("allowed %v, want %v", snap.Allowed, got)
			}
		})
	}
}

func TestDead(t *testing.T) {
	p := ids(t, 4)
	bridge, dead, live, unknown := p[0], p[1], p[2], p[3]
	s := New(nil, nil, Config{Allowed: []peer.ID{bridge}}, nil)
	if s.Dead(dead) {
		t.Fatal("a peer is dead while no table is in force")
	}
	s.accept(record(t, bridge, 1, 1, []peer.ID{live}, []peer.ID{dead}), time.Now())
	for _, tc := range []struct {
		id   peer.ID
		want bool
	}{{dead, true}, {live, false}, {unknown, false}} {
		if got := s.Dead(tc.id); got != tc.want {
			t.Errorf("Dead(%s) = %v, want %v", tc.id, got, tc.want)
		}
	}
	s.mu.Lock()
	s.sources[bridge].At = time.Now().Add(-Freshness - time.Second)
	s.mu.Unlock()
	if s.Dead(dead) {
		t.Fatal("a silent BMC's verdict is still in force")
	}
}

// TestIgnoredBounded: tables of peers outside Allowed never count, and at
// most maxIgnored such publishers are remembered, the oldest forgotten.
func TestIgnoredBounded(t *testing.T) {
	p := ids(t, maxIgnored+2)
	bridge, strangers := p[0], p[1:]
	s := New(nil, nil, Config{Allowed: []peer.ID{bridge}}, nil)
	t0 := time.Now()
	for i, id := range strangers {
		if s.accept(record(t, id, 1, 1, nil, []peer.ID{bridge}), t0.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("stranger %d's table accepted", i)
		}
	}
	snap := s.Snapshot(t0)
	if len(snap.Ignored) != maxIgnored {
		t.Fatalf("%d ignored remembered, want %d", len(snap.Ignored), maxIgnored)
	}
	if _, ok := snap.Ignored[strangers[0]]; ok {
		t.Fatal("the publisher seen longest ago is still remembered")
	}
	if snap.Authority != "" || s.Dead(bridge) {
		t.Fatal("a stranger's table took effect")
	}
	// A bridge trusts its own tables.
	self := New(nil, nil, Config{Self: strangers[0], Serial: "/dev/null"}, nil)
	if !self.accept(record(t, strangers[0], 1, 1, nil, nil), t0) {
		t.Fatal("a bridge refused its own table")
	}
}

func TestTrackedPeers(t *testing.T) {
	p := ids(t, bmc.MaxNodes+3)
	var peers []swarm.Peer
	for i, id := range p {
		sp := swarm.Peer{ID: id, Alive: i != 0}
		if i%2 == 1 {
			sp.Cap.Shards = []gossip.Shard{{ModelCID: "m", Start: 0, End: 1}}
		}
		peers = append(peers, sp)
	}
	got := trackedPeers(peers)
	if len(got) != bmc.MaxNodes {
		t.Fatalf("%d tracked, want the board's %d", len(got), bmc.MaxNodes)
	}
	shards := true
	for _, sp := range got {
		if !sp.Alive {
			t.Fatalf("dead peer %s tracked", sp.ID)
		}
		if has := len(sp.Cap.Shards) > 0; has && !shards {
			t.Fatal("a peer with shards comes after one without")
		} else if !has {
			shards = false
		}
	}
}
