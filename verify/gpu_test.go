package verify

import (
	"errors"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/internal/gputest"
	"github.com/llmswarm/llmswarm/swarm"
)

// TestGPUPeerPassesChallenge: a peer whose layers run on the Vulkan backend
// (lavapipe in make test) answers challenges of every layer from a checker
// computing on the CPU within the bounds of another build (f32 1e-3,
// quantized 3e-2: tolerance.go), and the same GPU peer lying (its numbers
// scaled by 1.1, or random) fails its first challenge. The worst relative
// error is logged per family and weight type (docs/gpu.md's table).
func TestGPUPeerPassesChallenge(t *testing.T) {
	gputest.Device(t)
	const challenges = 3
	type peerModel struct {
		name, full, cid string
		m               *engine.Model
		bound           float64
	}
	// Every GPU model loads first and stays to the test's end: Mesa 22.3's
	// lavapipe corrupts its heap when a GPU model is freed and another then
	// runs (docs/gpu.md).
	var peers []peerModel
	for _, arch := range []string{"llama", "qwen3", "gemma3"} {
		for _, c := range []struct {
			size, typ string
			bound     float64
		}{{"tiny", "f32", floatTolerance}, {"small", "q8_0", quantTolerance}, {"small", "q4_k", quantTolerance}} {
			opts := testOpts
			opts.GPULayers = engine.GPULayersAll
			full, cid, m := synthLoaded(t, arch, c.size, c.typ, opts)
			if m.Memory().GPU.Device == nil {
				t.Fatalf("%s %s: not on the GPU", arch, c.typ)
			}
			peers = append(peers, peerModel{arch + "/" + c.typ, full, cid, m, c.bound})
		}
	}
	for _, p := range peers {
		t.Run(p.name, func(t *testing.T) {
			n := p.m.Info().Layers
			lr := &liar{h: newHost(t), m: p.m}
			lr.h.SetStreamHandler(ProtocolID, lr.handle)
			h := newHost(t)
			link(h, lr.h)
			ck := newChecker(h, newFileRef(t, p.cid).add(0, n, p.full))
			ck.CheckLayers = n
			ck.Arch = func(peer.ID) string { return engine.ComputeArch() + "+vulkan" }
			worst := &Report{WorstLayer: -1}
			for range challenges {
				rep, err := ck.Check(t.Context(), lr.h.ID(), swarm.Claim{Model: p.cid, Start: 0, End: n})
				if err != nil {
					t.Fatalf("an honest GPU peer: %v", err)
				}
				if rep.WorstRelErr > worst.WorstRelErr || worst.WorstLayer < 0 {
					worst = rep
				}
			}
			if tol := ck.tolerance(p.m, lr.h.ID()); tol != p.bound {
				t.Fatalf("the checker's tolerance %.0e, want %.0e", tol, p.bound)
			}
			t.Logf("%s on %s: %d layers x %d challenges, worst relative error %.3g at layer %d (tolerance %.0e)",
				p.name, p.m.Backend(), n, challenges, worst.WorstRelErr, worst.WorstLayer, p.bound)
			for _, lie := range []struct {
				name   string
				tamper func(req *Request, l int, out []float32) []float32
			}{
				{"scaled by 1.1", func(_ *Request, _ int, out []float32) []float32 {
					for i := range out {
						out[i] *= 1.1
					}
					return out
				}},
				{"zeros in the last layer", func(req *Request, l int, out []float32) []float32 {
					if l == req.End-1 {
						clear(out)
					}
					return out
				}},
			} {
				lr := &liar{h: newHost(t), m: p.m, tamper: lie.tamper}
				lr.h.SetStreamHandler(ProtocolID, lr.handle)
				link(h, lr.h)
				err := ck.Vet(t.Context(), lr.h.ID(), swarm.Claim{Model: p.cid, Start: 0, End: n})
				var fe *FailError
				if !errors.As(err, &fe) || !strings.Contains(fe.Fault, "off by") {
					t.Fatalf("a GPU peer %s: %v, want a failure", lie.name, err)
				}
				if banned, _ := ck.Trust.Banned(lr.h.ID()); !banned {
					t.Fatalf("a GPU peer %s is not banned", lie.name)
				}
			}
		})
	}
}
