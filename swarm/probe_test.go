package swarm

import (
	"log/slog"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/gossip"
)

// TestProbeNewAddressesAtOnce: a candidate that failed its probe waits out
// its backoff while its records repeat themselves, but a record with new
// addresses (a relay slot it just got) makes it due at once.
func TestProbeNewAddressesAtOnce(t *testing.T) {
	h := newHost(t)
	p := newProber(h, NewView(h.ID(), Liveness{}), slog.New(slog.DiscardHandler))
	id := newHost(t).ID()
	t0 := time.Now()
	rec := gossip.Capability{PeerID: id.String(), Seq: 1, Addrs: []string{"/ip4/192.0.2.10/tcp/4001"}}
	p.heard(id, &rec, nil, t0)
	cd := p.cands[id]
	cd.tries, cd.next = 1, t0.Add(time.Second) // its first probe failed
	rec.Seq = 2
	p.heard(id, &rec, nil, t0.Add(100*time.Millisecond))
	if !cd.next.Equal(t0.Add(time.Second)) {
		t.Fatalf("the same addresses again moved the next probe to %v", cd.next.Sub(t0))
	}
	rec.Seq = 3
	rec.Addrs = append(rec.Addrs, "/ip4/198.51.100.10/tcp/4001/p2p/"+h.ID().String()+"/p2p-circuit")
	at := t0.Add(200 * time.Millisecond)
	p.heard(id, &rec, nil, at)
	if !cd.next.Equal(at) {
		t.Fatalf("new addresses: next probe in %v, want now", cd.next.Sub(at))
	}
}
