package verify

import (
	"errors"
	"math"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

// TestToleranceFollowsTheWeights: a peer whose every layer output is 1%
// off (relative L2 error 1e-2: what an honest arm64 peer shows against
// amd64 with quantized weights) passes a check against q8_0 and q4_k
// weights, and fails one against f32 weights, where honest peers agree
// within 2.2e-4. Off by 2%, a quantized peer passes when its record names
// another CPU architecture (or none), and fails when it names this peer's
// own, whose builds agree within 2.7e-3. A Tolerance set overrides both.
func TestToleranceFollowsTheWeights(t *testing.T) {
	for _, tc := range []struct {
		typ   string
		tol   float64
		scale float32
		arch  string // what the peer's record names
		pass  bool
	}{
		{"f32", 0, 1.01, "", false},
		{"q8_0", 0, 1.01, "", true},
		{"q4_k", 0, 1.01, "", true},
		{"q8_0", 1e-3, 1.01, "", false},
		{"f32", 2e-2, 1.01, "", true},
		{"q8_0", 0, 1.02, "other", true},
		{"q8_0", 0, 1.02, engine.ComputeArch(), false},
		{"q8_0", 0, 1.005, engine.ComputeArch(), true},
	} {
		full, cid := modelOf(t, "tiny", tc.typ, 1)
		lr := newLiar(t, full)
		lr.tamper = func(_ *Request, _ int, out []float32) []float32 {
			for i := range out {
				out[i] *= tc.scale
			}
			return out
		}
		h := newHost(t)
		link(h, lr.h)
		c := newChecker(h, newFileRef(t, cid).add(0, 4, full))
		c.Tolerance = tc.tol
		c.Arch = func(peer.ID) string { return tc.arch }
		rep, err := c.Check(t.Context(), lr.h.ID(), swarm.Claim{Model: cid, Start: 0, End: 4})
		var fe *FailError
		switch {
		case tc.pass && err != nil:
			t.Fatalf("%s, tolerance %g, off by %g, arch %q: %v, want a pass", tc.typ, tc.tol, tc.scale-1, tc.arch, err)
		case !tc.pass && !errors.As(err, &fe):
			t.Fatalf("%s, tolerance %g, off by %g, arch %q: %v, want a failure", tc.typ, tc.tol, tc.scale-1, tc.arch, err)
		case tc.pass && math.Abs(rep.WorstRelErr-float64(tc.scale-1)) > 1e-4:
			t.Fatalf("%s: worst relative error %g, want %g", tc.typ, rep.WorstRelErr, tc.scale-1)
		}
	}
}

// TestQuantizedFromTensors: whether a file's weights are quantized is read
// from its tensors (norms stay F32 in every file), for the file and for
// the manifest built from it alike.
func TestQuantizedFromTensors(t *testing.T) {
	for typ, want := range map[string]bool{"f32": false, "f16": false, "q8_0": true, "q4_k": true} {
		size := "tiny"
		if typ == "q4_k" {
			size = "small" // tiny rows are too short for k-quants
		}
		p, _ := modelOf(t, size, typ, 1)
		g, err := shards.ReadGGUFFile(p)
		if err != nil {
			t.Fatal(err)
		}
		m, _, _, err := shards.BuildManifest(p)
		if err != nil {
			t.Fatal(err)
		}
		if g.Quantized() != want || m.Quantized() != want {
			t.Errorf("%s: file says quantized %v, manifest %v; want %v", typ, g.Quantized(), m.Quantized(), want)
		}
	}
}
