package swarm

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// TestNeighboursBound: a table bounded to 3 neighbours takes 3 peers it
// does not need and refuses the fourth (Room says so before it asks);
// it takes past the bound a holder of the model it serves, a holder of a
// model it wanted (EnsureHolders), a proven peer and a protected one; a
// dead neighbour's place goes to the next peer; once a wanted model is
// no longer wanted its holders count as neighbours again.
func TestNeighboursBound(t *testing.T) {
	trust := NewTrust()
	self := testID(t)
	var protected peer.ID
	v := NewView(self, Liveness{MaxPeers: 64}, WithTrust(trust),
		WithAdmission(Admission{UnprovenShare: 1, PerSubnet: -1, Neighbours: 3}),
		WithProtect(func(id peer.ID) bool { return id == protected }))
	now := time.Now()
	seq := uint64(0)
	held := map[peer.ID][]gossip.Shard{}
	beat := func(id peer.ID, shards ...gossip.Shard) {
		seq++
		if shards != nil {
			held[id] = shards
		}
		v.Observe(&gossip.Capability{PeerID: id.String(), Seq: seq, Shards: held[id]}, now)
	}
	own := gossip.Shard{ModelCID: "served", Start: 0, End: 4, Layers: 8}
	beat(self, own)
	var ns []peer.ID
	for range 3 {
		id := testID(t)
		ns = append(ns, id)
		beat(id)
	}
	extra := testID(t)
	if v.Room(extra, nil, now) {
		t.Fatal("Room: a full table would take a fourth neighbour")
	}
	beat(extra)
	if v.Alive(extra) {
		t.Fatal("a fourth neighbour got into a table bounded to 3")
	}
	if !v.Room(ns[0], nil, now) {
		t.Fatal("Room: a peer the table holds has no room")
	}

	// Needed peers get in past the bound.
	partner := testID(t)
	if !v.Room(partner, &gossip.Capability{PeerID: partner.String(), Shards: []gossip.Shard{{ModelCID: "served", Start: 4, End: 8, Layers: 8}}}, now) {
		t.Fatal("Room: no room for a holder of the model this peer serves")
	}
	beat(partner, gossip.Shard{ModelCID: "served", Start: 4, End: 8, Layers: 8})
	wantedHolder := testID(t)
	other := gossip.Shard{ModelCID: "cid-other", ModelName: "other", Start: 0, End: 8, Layers: 8}
	beat(wantedHolder, other)
	if v.Alive(wantedHolder) {
		t.Fatal("a holder of a model nobody asked for got in past the bound")
	}
	v.Want("other", now) // by name, as a request names it
	beat(wantedHolder, other)
	proven := testID(t)
	trust.Pass(proven, Claim{Model: "m", End: 1})
	beat(proven)
	protected = testID(t)
	beat(protected)
	for name, id := range map[string]peer.ID{"the served model's holder": partner, "the wanted model's holder": wantedHolder, "a proven peer": proven, "a protected peer": protected} {
		if !v.Alive(id) {
			t.Errorf("%s was refused by the bound of neighbours", name)
		}
	}

	// A neighbour dies: its place is free.
	now = now.Add(time.Minute)
	for _, id := range append(ns[1:], partner, wantedHolder, proven, protected) {
		beat(id)
	}
	if died := v.Sweep(now.Add(time.Millisecond)); len(died) != 1 || died[0] != ns[0] {
		t.Fatalf("sweep: %v died, want only %s", died, ns[0])
	}
	beat(extra)
	if !v.Alive(extra) {
		t.Fatal("a dead neighbour's place was not given to the next peer")
	}

	// The wanted model lapses: its holder is a neighbour like any other,
	// so the table is over its bound and takes none.
	now = now.Add(wantFor + time.Second)
	late := testID(t)
	beat(late)
	if v.Alive(late) {
		t.Fatal("a neighbour got in while the lapsed model's holder filled the bound")
	}

	// No bound: anyone.
	u := NewView(self, Liveness{}, WithAdmission(Admission{Neighbours: -1}))
	for range 100 {
		id := testID(t)
		seq++
		u.Observe(&gossip.Capability{PeerID: id.String(), Seq: seq}, now)
		if !u.Alive(id) {
			t.Fatal("a table with no bound of neighbours refused a peer")
		}
	}
}

// TestNeighboursKeepEnough: past the bound of neighbours, the table takes
// holders of the model it serves until it holds holdersKept of them, and
// after that only a holder of layers none of them holds (not one whose
// claim lies past the model's layers or names another count); peers serving a
// role until it holds rolesKept of that role, of at most maxRolesKept
// role names.
func TestNeighboursKeepEnough(t *testing.T) {
	self := testID(t)
	v := NewView(self, Liveness{MaxPeers: 1024}, WithAdmission(Admission{UnprovenShare: 1, PerSubnet: -1, Neighbours: 1}))
	now := time.Now()
	seq := uint64(0)
	beat := func(c gossip.Capability) peer.ID {
		id := testID(t)
		seq++
		c.PeerID, c.Seq = id.String(), seq
		v.Observe(&c, now)
		return id
	}
	shard := func(start, end int) []gossip.Shard {
		return []gossip.Shard{{ModelCID: "served", Start: start, End: end, Layers: 32}}
	}
	v.Observe(&gossip.Capability{PeerID: self.String(), Seq: 1, Shards: shard(0, 8)}, now)
	beat(gossip.Capability{}) // the one neighbour
	for i := range holdersKept {
		if id := beat(gossip.Capability{Shards: shard(8, 16)}); !v.Alive(id) {
			t.Fatalf("holder %d of the served model refused", i)
		}
	}
	if id := beat(gossip.Capability{Shards: shard(8, 16)}); v.Alive(id) {
		t.Fatalf("a holder past the %d kept, of layers they hold, got in", holdersKept)
	}
	for _, lie := range []gossip.Shard{
		{ModelCID: "served", Start: 40, End: 48, Layers: 48}, // another layer count
		{ModelCID: "served", Start: 40, End: 48, Layers: 32}, // past the model's layers
		{ModelCID: "served", Start: 20, End: 20, Layers: 32}, // no layers at all
	} {
		if id := beat(gossip.Capability{Shards: []gossip.Shard{lie}}); v.Alive(id) {
			t.Fatalf("a holder claiming layers [%d,%d) of %d got in past the bound", lie.Start, lie.End, lie.Layers)
		}
	}
	if id := beat(gossip.Capability{Shards: shard(16, 32)}); !v.Alive(id) {
		t.Fatal("a holder of layers no holder in the table holds was refused")
	}
	role := func(name string) gossip.Capability {
		return gossip.Capability{Roles: []gossip.Role{{Role: name, ModelCID: "r"}}}
	}
	for i := range rolesKept {
		if id := beat(role("critic")); !v.Alive(id) {
			t.Fatalf("role peer %d refused", i)
		}
	}
	if id := beat(role("critic")); v.Alive(id) {
		t.Fatalf("a peer of a role the table holds %d of got in", rolesKept)
	}
	names := 1
	for i := 0; names < maxRolesKept; i++ {
		if id := beat(role(fmt.Sprintf("made-up-%d", i))); !v.Alive(id) {
			t.Fatalf("role name %d refused", names)
		}
		names++
	}
	if id := beat(role("one-too-many")); v.Alive(id) {
		t.Fatalf("a role name past the %d kept got in", maxRolesKept)
	}
}

// TestNeighboursOnTheWire: a peer bounded to 2 neighbours, to which six
// peers connect and ask for its record (giving theirs), holds 2 of them
// alive and the one that holds layers of the model it serves, however
// long they stay, and tags exactly its live peers' connections for the
// connection manager.
func TestNeighboursOnTheWire(t *testing.T) {
	served := func() gossip.Capability {
		return gossip.Capability{Shards: []gossip.Shard{{ModelCID: "m", Start: 0, End: 4, Layers: 8}}}
	}
	hub := newMember(t, fastLive, served, WithAdmission(Admission{Neighbours: 2}))
	var spokes []*member
	for range 5 {
		spokes = append(spokes, newMember(t, fastLive, nil))
	}
	partner := newMember(t, fastLive, func() gossip.Capability {
		return gossip.Capability{Shards: []gossip.Shard{{ModelCID: "m", Start: 4, End: 8, Layers: 8}}}
	})
	for _, s := range append(spokes, partner) {
		link(t, s, hub)
	}
	alive := func() (n int) {
		for _, s := range spokes {
			if hub.s.View().Alive(s.h.ID()) {
				n++
			}
		}
		return n
	}
	waitFor(t, 20*time.Second, "the hub holds its partner and 2 others", func() bool {
		return hub.s.View().Alive(partner.h.ID()) && alive() == 2
	})
	cm := hub.h.ConnManager()
	waitFor(t, 3*tagEvery, "the hub tags its table's peers", func() bool {
		for _, s := range append(spokes, partner) {
			tagged := cm.GetTagInfo(s.h.ID()) != nil && cm.GetTagInfo(s.h.ID()).Tags[tableTag] == tableValue
			if tagged != hub.s.View().Alive(s.h.ID()) {
				return false
			}
		}
		return true
	})
	for range 10 {
		time.Sleep(fastLive.Heartbeat)
		if n := alive(); n > 2 {
			t.Fatalf("the hub holds %d neighbours alive, bounded to 2", n)
		}
		if !hub.s.View().Alive(partner.h.ID()) {
			t.Fatal("the hub dropped the holder of the model it serves")
		}
	}
	if n := hub.s.PendingProbes(); n > 0 {
		t.Fatalf("the hub has %d leads to probe past its bound", n)
	}
}

// TestChangesPushedPastTheBound: a peer whose table is full (bounded to 2
// neighbours, 4 peers holding it) does not publish its changed record to
// the whole swarm: it pushes it to the 4 peers that asked it for its
// record, which hold the change at once (their own checks of it would
// come 30 s or more later), while its count of published records stands
// still.
func TestChangesPushedPastTheBound(t *testing.T) {
	var mu sync.Mutex
	role := "critic"
	hub := newMember(t, fastLive, func() gossip.Capability {
		mu.Lock()
		defer mu.Unlock()
		return gossip.Capability{Roles: []gossip.Role{{Role: role, ModelCID: "r"}}}
	}, WithAdmission(Admission{Neighbours: 2}))
	var spokes []*member
	for range 4 {
		s := newMember(t, fastLive, nil)
		link(t, s, hub)
		spokes = append(spokes, s)
	}
	holds := func(s *member, r string) bool {
		p, ok := s.s.View().Get(hub.h.ID())
		return ok && p.Alive && len(p.Cap.Roles) == 1 && p.Cap.Roles[0].Role == r
	}
	waitFor(t, 20*time.Second, "every spoke holds the hub, the hub's table full", func() bool {
		for _, s := range spokes {
			if !holds(s, "critic") {
				return false
			}
		}
		return hub.s.View().Full()
	})
	// Its first record (when its first topic peer appeared) may still be
	// waiting for a gossip mesh peer, which would hold up the next.
	time.Sleep(publishWait + fastLive.Heartbeat)
	published := hub.s.Published()
	mu.Lock()
	role = "writer"
	mu.Unlock()
	hub.s.Changed()
	took := waitFor(t, 10*time.Second, "every spoke holds the hub's change", func() bool {
		for _, s := range spokes {
			if !holds(s, "writer") {
				return false
			}
		}
		return true
	})
	if n := hub.s.Published(); n != published {
		t.Fatalf("the hub published %d records to the swarm past its bound, want none", n-published)
	}
	t.Logf("every spoke held the change %s after it", took)
}
