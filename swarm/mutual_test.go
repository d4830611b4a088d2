package swarm

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/llmswarm/llmswarm/gossip"
)

// TestMutualSwap: a table full of 2 neighbours takes a peer that holds
// this one (it asked) in place of a neighbour that does not (its answer
// said so, and it asked nothing), never in place of one that holds this
// peer, and refuses a peer that does not hold it.
func TestMutualSwap(t *testing.T) {
	now := time.Now()
	v, asked, beat := boundView(t, 2, now)
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

// boundView is a table of at most bound neighbours, this peer in it,
// whose holders are the peers marked in asked; beat observes a peer's
// next record at now, as its answer would.
func boundView(t *testing.T, bound int, now time.Time, opts ...Option) (v *View, asked map[peer.ID]bool, beat func(peer.ID)) {
	self := testID(t)
	asked = map[peer.ID]bool{}
	opts = append([]Option{WithAdmission(Admission{UnprovenShare: 1, PerSubnet: -1, Neighbours: bound})}, opts...)
	v = NewView(self, Liveness{MaxPeers: 64}, opts...)
	v.holds = func(id peer.ID) bool { return asked[id] }
	seq := uint64(0)
	beat = func(id peer.ID) {
		seq++
		v.Observe(&gossip.Capability{PeerID: id.String(), Seq: seq}, now)
	}
	beat(self)
	return v, asked, beat
}

// TestRecordsV1Compatible: a peer answers a 1.0.0 asker without held (a
// field a 1.0.0 asker's strict decoding refuses), 1.1.0 askers with it,
// and asks a peer that speaks 1.0.0 only in 1.0.0.
func TestRecordsV1Compatible(t *testing.T) {
	a := newMember(t, fastLive, nil)
	b := newMember(t, fastLive, nil)
	link(t, a, b)
	waitFor(t, 10*time.Second, "b holds a", func() bool { return b.s.View().Alive(a.h.ID()) })
	self, err := a.s.sealedSelf()
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(recordsRequest{Self: self})
	if err != nil {
		t.Fatal(err)
	}
	askIn := func(proto protocol.ID) string {
		t.Helper()
		for range 5 {
			time.Sleep(serveGap) // b answers an asker once per serveGap
			st, err := a.h.NewStream(t.Context(), b.h.ID(), proto)
			if err != nil {
				t.Fatal(err)
			}
			if err := recordFrames.Write(st, 0, body); err != nil {
				t.Fatal(err)
			}
			_, raw, err := recordFrames.Read(st, maxAnswerBytes, nil)
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(raw), "asked again within") {
				return string(raw)
			}
		}
		t.Fatalf("b refused every question in %s", proto)
		return ""
	}
	// What a 1.0.0 peer decodes an answer into: no held.
	var v1 struct {
		Self   []byte   `json:"self,omitempty"`
		Sample [][]byte `json:"sample,omitempty"`
		Error  string   `json:"error,omitempty"`
	}
	if err := recordFrames.DecodeJSON([]byte(askIn(RecordsProtocolV1)), &v1); err != nil || v1.Self == nil {
		t.Fatalf("a 1.0.0 asker cannot read b's answer: %v (%+v)", err, v1)
	}
	var v11 recordsAnswer
	if err := recordFrames.DecodeJSON([]byte(askIn(RecordsProtocol)), &v11); err != nil || !v11.Held {
		t.Fatalf("a 1.1.0 asker's answer: %v, held %v: want held", err, v11.Held)
	}

	// A peer that speaks 1.0.0 only is asked in 1.0.0.
	old := newMember(t, fastLive, nil)
	old.h.RemoveStreamHandler(RecordsProtocol)
	link(t, old, a)
	for try := 1; ; try++ {
		time.Sleep(serveGap) // a's question on connecting may have been answered
		_, err := a.s.xchg.ask(t.Context(), old.h.ID(), recordsRequest{})
		var refused *refusal
		if err == nil {
			break
		}
		if !errors.As(err, &refused) || try == 5 {
			t.Fatalf("asking a 1.0.0 peer: %v", err)
		}
	}
}
