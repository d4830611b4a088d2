package pipeline

import (
	"runtime"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
)

// TestToleranceByWeightsAndArch: float weights keep the configured bound;
// quantized ones allow quantSameArch between peers whose records name one
// CPU architecture (this peer's own is its build's), and quantCrossArch
// across architectures or for a peer that names none.
func TestToleranceByWeightsAndArch(t *testing.T) {
	self := newStagePeer(t)
	v := swarm.NewView(self.h.ID(), swarm.Liveness{Heartbeat: time.Second, Misses: 3})
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	id := func(arch string) string {
		k, _, _ := crypto.GenerateEd25519Key(nil)
		p, _ := peer.IDFromPrivateKey(k)
		v.Observe(&gossip.Capability{PeerID: p.String(), Seq: 1, Platform: gossip.Platform{Arch: arch}}, time.Now())
		return p.String()
	}
	// A build of this architecture whose kernels differ (a peer with or
	// without the repacked Q4 kernels where this one has the other) is
	// compared like another architecture.
	flavour := runtime.GOARCH
	if flavour == engine.ComputeArch() {
		flavour += "+repack"
	}
	same, cross, unnamed, kernels := id(engine.ComputeArch()), id(other), id(""), id(flavour)
	me := self.h.ID().String()
	g := &generation{o: &Originator{Host: self.h, View: v}}
	for _, c := range []struct {
		float bool
		peers []string
		want  float64
	}{
		{true, []string{same, cross}, defaultTolerance},
		{false, []string{same, me}, quantSameArch},
		{false, []string{same, same}, quantSameArch},
		{false, []string{same, cross}, quantCrossArch},
		{false, []string{me, cross}, quantCrossArch},
		{false, []string{same, unnamed}, quantCrossArch},
		{false, []string{me, kernels}, quantCrossArch},
		{false, []string{same, "not a peer id"}, quantCrossArch},
	} {
		g.ref.Float = c.float
		if got := g.tolerance(c.peers...); got != c.want {
			t.Errorf("float %v, peers %v: tolerance %g, want %g", c.float, c.peers, got, c.want)
		}
	}
	// This peer's stages batch (pipeline.batch): its own hops count as
	// another architecture.
	g.o.Arch = engine.ComputeArch() + "+batch"
	if got := g.tolerance(same, me); got != quantCrossArch {
		t.Errorf("this peer batching: tolerance %g, want %g", got, quantCrossArch)
	}
	g.o.Arch = ""
	g.o.SpotCheck.Tolerance = 0.2 // a configured bound above the floors wins
	if got := g.tolerance(same, cross); got != 0.2 {
		t.Errorf("configured 0.2: got %g", got)
	}
}
