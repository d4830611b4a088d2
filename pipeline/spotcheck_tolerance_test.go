package pipeline

import "testing"

// TestToleranceByWeights: float weights keep the configured bound;
// quantized ones allow quantTolerance, whatever the peers (other CPUs,
// builds and batches compute them apart); a configured bound above the
// floor wins.
func TestToleranceByWeights(t *testing.T) {
	g := &generation{o: &Originator{}}
	g.ref.Float = true
	if got := g.tolerance(); got != defaultTolerance {
		t.Errorf("float weights: tolerance %g, want %g", got, defaultTolerance)
	}
	g.ref.Float = false
	if got := g.tolerance(); got != quantTolerance {
		t.Errorf("quantized weights: tolerance %g, want %g", got, quantTolerance)
	}
	g.o.SpotCheck.Tolerance = 0.2
	if got := g.tolerance(); got != 0.2 {
		t.Errorf("configured 0.2: got %g", got)
	}
}
