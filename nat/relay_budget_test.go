package nat

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

// TestRelayUnprovenBudget: a relay freeloader (ten stranger identities
// that merely register the swarm's protocol IDs) gets no more than the
// relay's budget for peers that have not proven work: four slots, and
// circuits only while fewer than four are open. A peer that has proven
// work still gets a slot and a circuit, over the real circuit relay v2
// protocol. A private swarm's relay has no such budget.
func TestRelayUnprovenBudget(t *testing.T) {
	const budget = 4
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := relayTestHost(t)
	ledger := swarm.NewTrust()
	c := newCounters(log)
	acl := &relayACL{log: log, wait: 2 * time.Second}
	acl.budget.limit, acl.budget.open = budget, c.circuitsOpen.Load
	acl.h.Store(&r)
	proven := ledger.Proven
	acl.proven.Store(&proven)
	rel, err := relay.New(r, relay.WithACL(acl), relay.WithMetricsTracer(c))
	if err != nil {
		t.Fatal(err)
	}
	defer rel.Close()
	relayInfo := peer.AddrInfo{ID: r.ID(), Addrs: r.Addrs()}
	circuit := ma.StringCast(r.Addrs()[0].String() + "/p2p/" + r.ID().String() + "/p2p-circuit")

	// A member as the relay sees one: it speaks the swarm's protocols.
	member := func() host.Host {
		h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		h.SetStreamHandler(shards.TransferProtocol, func(s network.Stream) { s.Reset() })
		if err := h.Connect(ctx, relayInfo); err != nil {
			t.Fatal(err)
		}
		return h
	}
	reserve := func(h host.Host) error {
		_, err := client.Reserve(ctx, h, relayInfo)
		return err
	}
	viaRelay := func(src, dst host.Host) error {
		return src.Connect(ctx, peer.AddrInfo{ID: dst.ID(), Addrs: []ma.Multiaddr{circuit}})
	}

	var slotted, refused []host.Host
	for range 10 {
		h := member()
		if reserve(h) == nil {
			slotted = append(slotted, h)
		} else {
			refused = append(refused, h)
		}
	}
	t.Logf("figures: %d of 10 stranger identities got a relay slot (budget %d); the budget counts %d holders", len(slotted), budget, acl.budget.holders())
	if len(slotted) != budget {
		t.Fatalf("%d strangers hold relay slots, want %d", len(slotted), budget)
	}

	good := member()
	ledger.Pass(good.ID(), swarm.Claim{Model: "m", Start: 0, End: 1})
	if err := reserve(good); err != nil {
		t.Fatalf("a proven peer was refused a slot with the freeloaders' slots taken: %v", err)
	}

	// Circuits: strangers without a slot reach a stranger with one.
	dst := slotted[0]
	opened := 0
	for _, src := range refused {
		if viaRelay(src, dst) == nil {
			opened++
		}
	}
	t.Logf("figures: %d of %d stranger circuits opened (budget %d); %d open", opened, len(refused), budget, c.circuitsOpen.Load())
	if opened != budget {
		t.Fatalf("%d stranger circuits opened, want %d", opened, budget)
	}
	if err := viaRelay(good, slotted[1]); err != nil {
		t.Fatalf("a proven peer was refused a circuit with the freeloaders' circuits open: %v", err)
	}

	// A private swarm's relay has no budget: every peer holds the key.
	private := &relayACL{log: log, private: true, wait: acl.wait}
	private.budget.limit = -1
	private.h.Store(&r)
	if !private.AllowReserve(refused[0].ID(), nil) || !private.AllowConnect(refused[0].ID(), nil, dst.ID()) {
		t.Fatal("a private swarm's relay applied the budget")
	}
}
