package verify

import (
	"errors"
	"math"
	"testing"

	"github.com/llmswarm/llmswarm/swarm"
)

// TestToleranceFollowsTheWeights: a peer whose every layer output is 1%
// off (relative L2 error 1e-2: what an honest arm64 peer shows against
// amd64 with quantized weights) passes a check against q8_0 and q4_k
// weights, and fails one against f32 weights, where honest peers agree
// within 2.2e-4. A Tolerance set overrides both.
func TestToleranceFollowsTheWeights(t *testing.T) {
	for _, tc := range []struct {
		typ  string
		tol  float64
		pass bool
	}{
		{"f32", 0, false},
		{"q8_0", 0, true},
		{"q4_k", 0, true},
		{"q8_0", 1e-3, false},
		{"f32", 2e-2, true},
	} {
		full, cid := modelOf(t, "tiny", tc.typ, 1)
		lr := newLiar(t, full)
		lr.tamper = func(_ *Request, _ int, out []float32) []float32 {
			for i := range out {
				out[i] *= 1.01
			}
			return out
		}
		h := newHost(t)
		link(h, lr.h)
		c := newChecker(h, newFileRef(t, cid).add(0, 4, full))
		c.Tolerance = tc.tol
		rep, err := c.Check(t.Context(), lr.h.ID(), swarm.Claim{Model: cid, Start: 0, End: 4})
		var fe *FailError
		switch {
		case tc.pass && err != nil:
			t.Fatalf("%s, tolerance %g: %v, want a pass", tc.typ, tc.tol, err)
		case !tc.pass && !errors.As(err, &fe):
			t.Fatalf("%s, tolerance %g: %v, want a failure", tc.typ, tc.tol, err)
		case tc.pass && math.Abs(rep.WorstRelErr-1e-2) > 1e-4:
			t.Fatalf("%s: worst relative error %g, want 1e-2", tc.typ, rep.WorstRelErr)
		}
	}
}
