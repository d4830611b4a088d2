package verify

import (
	"context"
	"fmt"
	"math"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// runLayers runs layers [a,b) one layer at a time over the same
// positions, each layer in session s truncated back to position 0, and
// hands emit every layer's output: the hidden states of every position,
// or, after the model's last layer, the logits of the last position (the
// engine prunes that layer to the positions whose logits are wanted).
// Running [a,b) in one call gives the same numbers as the last output of
// this: the layers are the same graph pieces in the same batch shape.
//
// A model m whose architecture runs whole only (engine.WholeOnly: gemma3n,
// whose layers hand on more than a hidden state) is challenged whole:
// [a,b) must be all its layers, run in one call, and emit sees the logits
// after the last layer only.
func runLayers(ctx context.Context, m *engine.Model, s *engine.Session, a, b int, tokens []int32, hidden []float32, emit func(l int, out []float32) error) error {
	if info := m.Info(); engine.WholeOnly(info.Arch) != "" {
		if a != 0 || b != info.Layers {
			return fmt.Errorf("layers [%d,%d): %w: a %s model is challenged whole", a, b, engine.ErrBadRange, info.Arch)
		}
		out, err := s.RunRange(ctx, 0, b, tokens, nil)
		if err != nil {
			return err
		}
		return emit(b-1, out)
	}
	in := hidden
	for l := a; l < b; l++ {
		if err := s.Truncate(0); err != nil {
			return err
		}
		var out []float32
		var err error
		if l == 0 {
			out, err = s.RunRange(ctx, 0, 1, tokens, nil)
		} else {
			out, err = s.RunRange(ctx, l, l+1, nil, in)
		}
		if err != nil {
			return fmt.Errorf("layer %d: %w", l, err)
		}
		if err := emit(l, out); err != nil {
			return err
		}
		in = out
	}
	return nil
}

// relL2 is ‖got − want‖ / ‖want‖ (the plain ‖got − want‖ when want is
// zero), in float64.
func relL2(got, want []float32) float64 {
	var d, w float64
	for i := range want {
		x := float64(got[i]) - float64(want[i])
		d += x * x
		w += float64(want[i]) * float64(want[i])
	}
	if w == 0 {
		return math.Sqrt(d)
	}
	return math.Sqrt(d / w)
}

// firstNonFinite is the index of the first NaN or Inf in v, or -1.
func firstNonFinite(v []float32) int {
	for i, f := range v {
		if !finite(f) {
			return i
		}
	}
	return -1
}
