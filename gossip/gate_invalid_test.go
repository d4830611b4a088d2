package gossip_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/network"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/gossip/gossiptest"
)

// TestInvalidFloodInGrace: an adversary that opens its gossip stream but
// refuses the victim's (so pubsub never scores it) floods 5,000 invalid
// messages well inside the gate's grace period. They count as they would
// in the score: the adversary is quarantined for sending invalid gossip
// and disconnected long before its grace ends. A peer whose stream the
// victim has not opened yet, sending valid records and stale repeats
// (which the validator only ignores), and an honest router joining
// normally are never gated.
func TestInvalidFloodInGrace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A grace far longer than the test: only invalid messages can gate.
	gate := gossip.NewGate(nil, 10*time.Minute)
	victim := newPeer(t, ctx, "", gate)
	honest := newPeer(t, ctx, "", nil, gossip.WithHeartbeat(beatEvery))
	connect(t, ctx, honest.h, victim.h)
	var honestSeq atomic.Uint64
	beat(ctx, t, honest, &honestSeq)

	// An early peer: valid records, then the same ones again (stale).
	early := newPeer(t, ctx, "", nil)
	earlyRaw := gossiptest.NewRaw(early.h, false)
	defer earlyRaw.Close()
	connect(t, ctx, early.h, victim.h)
	if err := earlyRaw.Open(ctx, victim.h.ID(), gossip.CapsTopic); err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		for seq := uint64(1); seq <= 5; seq++ {
			// Each round signs anew (new gossip seqno): not a duplicate,
			// but a record seq the victim has seen: ignored, not invalid.
			m, err := gossiptest.Sign(early.key, gossip.CapsTopic, record(t, early, seq), uint64(round*10)+seq)
			if err != nil {
				t.Fatal(err)
			}
			if err := earlyRaw.Send(victim.h.ID(), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, 10*time.Second, "the early peer's records heard", func() bool { return victim.lastSeq(early.h.ID()) == 5 })

	adv := newPeer(t, ctx, "", nil)
	raw := gossiptest.NewRaw(adv.h, false)
	defer raw.Close()
	connect(t, ctx, adv.h, victim.h)
	if err := raw.Open(ctx, victim.h.ID(), gossip.CapsTopic); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sent := 0
	var writeErr error
	for batch := 0; batch < 100 && writeErr == nil; batch++ {
		msgs := make([]*pb.Message, 0, 50)
		for i := range 50 {
			seq := uint64(batch*50 + i + 1)
			m, err := gossiptest.Sign(adv.key, gossip.CapsTopic, []byte("not a capability record"), seq)
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, m)
		}
		if writeErr = raw.Send(victim.h.ID(), msgs...); writeErr == nil {
			sent += len(msgs)
		}
	}
	floodTook := time.Since(start)
	took := time.Duration(0)
	eventually(t, 20*time.Second, "the flooder gated for invalid gossip", func() bool {
		gated, why := gate.Gated(adv.h.ID())
		took = time.Since(start)
		return gated && why == gossip.GateInvalid
	})
	eventually(t, 10*time.Second, "the flooder disconnected", func() bool {
		return victim.h.Network().Connectedness(adv.h.ID()) != network.Connected
	})
	t.Logf("figures: %d of 5000 invalid messages written in %s (write error: %v); gated %s after the flood began, grace %s",
		sent, floodTook.Round(time.Millisecond), writeErr, took.Round(time.Millisecond), 10*time.Minute)
	if writeErr != nil && !errors.Is(writeErr, network.ErrReset) {
		t.Logf("the flood ended on: %v", writeErr)
	}
	if gate.Strikes(adv.h.ID()) != 1 {
		t.Fatalf("flooder strikes %d, want 1", gate.Strikes(adv.h.ID()))
	}
	for name, p := range map[string]*testPeer{"honest": honest, "early": early} {
		if gated, why := gate.Gated(p.h.ID()); gated || gate.Strikes(p.h.ID()) != 0 {
			t.Fatalf("the %s peer was gated (%s)", name, why)
		}
	}
	before := victim.heard(honest.h.ID())
	eventually(t, 10*time.Second, "the honest peer still heard", func() bool { return victim.heard(honest.h.ID()) >= before+2 })
}
