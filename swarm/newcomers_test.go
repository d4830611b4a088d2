package swarm

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
)

// TestSampleGivesNewcomers: a contact whose table is full (bounded to 2
// neighbours, 3 peers linked, each of which asked it for a sample) gives
// a newcomer that asks for a sample the newcomers that asked before it:
// all 3 linked peers, though its table holds 2, and to the next newcomer
// the one before it too.
func TestSampleGivesNewcomers(t *testing.T) {
	hub := newMember(t, fastLive, nil, WithAdmission(Admission{Neighbours: 2}))
	for range 3 {
		link(t, newMember(t, fastLive, nil), hub)
	}
	waitFor(t, 20*time.Second, "the hub's table is full", hub.s.View().Full)
	first, second := newMember(t, fastLive, nil), newMember(t, fastLive, nil)
	signers := func(m *member) map[peer.ID]bool {
		t.Helper()
		link(t, m, hub)
		self, err := m.s.sealedSelf()
		if err != nil {
			t.Fatal(err)
		}
		var ans *recordsAnswer
		waitFor(t, 10*time.Second, "the hub answers a question with a sample", func() bool {
			// The question of the connection itself may be answered
			// first; a second within serveGap is refused.
			ans, err = m.s.xchg.ask(t.Context(), hub.h.ID(), recordsRequest{Sample: MaxSample, Self: self})
			return err == nil
		})
		out := map[peer.ID]bool{}
		for _, b := range ans.Sample {
			_, id, err := gossip.OpenCapability(b)
			if err != nil {
				t.Fatal(err)
			}
			out[id] = true
		}
		return out
	}
	if got := signers(first); len(got) != 3 {
		t.Fatalf("the first newcomer's sample: %v, want the 3 peers that asked the hub before it", got)
	}
	got := signers(second)
	if !got[first.h.ID()] {
		t.Fatalf("the second newcomer's sample %v lacks the first newcomer %s", got, first.h.ID())
	}
	if got[second.h.ID()] {
		t.Fatalf("the second newcomer's sample holds its own record")
	}
}

// TestNewcomersBounded: the contact remembers at most newcomersPerSubnet
// newcomers of one network (the oldest make room) and maxNewcomers in all,
// each once.
func TestNewcomersBounded(t *testing.T) {
	e := newExchange(nil)
	now := time.Now()
	one := netip.MustParseAddr("192.0.2.7")
	for i := range 3 * newcomersPerSubnet {
		e.noteNewcomer(peer.ID(fmt.Sprintf("same-%d", i)), []byte("r"), one, now)
	}
	e.noteNewcomer(peer.ID("same-47"), []byte("r"), one, now) // again: once
	if n := len(e.newcomers); n != newcomersPerSubnet {
		t.Fatalf("%d newcomers of one /24 kept, want %d", n, newcomersPerSubnet)
	}
	if e.newcomers[len(e.newcomers)-1].id != "same-47" || e.newcomers[0].id != peer.ID(fmt.Sprintf("same-%d", 3*newcomersPerSubnet-newcomersPerSubnet)) {
		t.Fatalf("kept %s..%s, want the newest of the network", e.newcomers[0].id, e.newcomers[len(e.newcomers)-1].id)
	}
	for i := range 2 * maxNewcomers {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1})
		e.noteNewcomer(peer.ID(fmt.Sprintf("n-%d", i)), []byte("r"), a, now)
	}
	if n := len(e.newcomers); n != maxNewcomers {
		t.Fatalf("%d newcomers kept, want %d", n, maxNewcomers)
	}
	e.noteNewcomer(peer.ID("late"), []byte("r"), one, now.Add(heldFor))
	if n := len(e.newcomers); n != 1 {
		t.Fatalf("%d newcomers kept past heldFor, want only the last", n)
	}
}
