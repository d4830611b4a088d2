package pipeline

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// A verify step of a sampling session may carry the distribution each
// draft token was drawn from (Step.Drafts), so that the last hop can decide
// it by the speculative sampling rule. They follow the step's hidden
// states in the frame: u32 m (0, or one per draft token: positions - 1),
// then m x (u16 c, c x (i32 id, f32 p)).

// maxDraftBytes bounds the distributions of one verify step.
const maxDraftBytes = 4 + engine.MaxSpecK*(2+8*engine.MaxDistCands)

// appendDrafts encodes ds after a verify step's body.
func appendDrafts(b []byte, ds []engine.Dist) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ds)))
	for _, d := range ds {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(d.IDs)))
		for i, id := range d.IDs {
			b = binary.LittleEndian.AppendUint32(b, uint32(id))
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(d.P[i]))
		}
	}
	return b
}

// decodeDrafts parses the distributions after a verify step of n
// positions; their values are checked where the vocabulary is known
// (checkDrafts).
func decodeDrafts(b []byte, n int) ([]engine.Dist, error) {
	if len(b) == 0 {
		return nil, nil // a greedy verify step: no distributions
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes after a verify step", ErrBadFrame, len(b))
	}
	m := int(binary.LittleEndian.Uint32(b))
	if m > engine.MaxSpecK || (m != 0 && m != n-1) {
		return nil, fmt.Errorf("%w: %d draft distributions for a verify step of %d positions", ErrBadFrame, m, n)
	}
	b = b[4:]
	var ds []engine.Dist
	for i := range m {
		if len(b) < 2 {
			return nil, fmt.Errorf("%w: draft distribution %d truncated", ErrBadFrame, i)
		}
		c := int(binary.LittleEndian.Uint16(b))
		b = b[2:]
		if c == 0 || c > engine.MaxDistCands || len(b) < 8*c {
			return nil, fmt.Errorf("%w: draft distribution %d of %d candidates in %d bytes (1..%d)", ErrBadFrame, i, c, len(b), engine.MaxDistCands)
		}
		d := engine.Dist{IDs: make([]int32, c), P: make([]float32, c)}
		for j := range c {
			d.IDs[j] = int32(binary.LittleEndian.Uint32(b[8*j:]))
			d.P[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[8*j+4:]))
		}
		ds = append(ds, d)
		b = b[8*c:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after a verify step's draft distributions", ErrBadFrame, len(b))
	}
	return ds, nil
}

// checkDrafts checks a verify step's distributions against the session:
// only a sampling session's carry them, each over the vocabulary and
// holding the token drawn from it.
func checkDrafts(st *Step, open *Open, vocab int) error {
	if len(st.Drafts) == 0 {
		return nil
	}
	if open.Sampling.Temperature <= 0 {
		return fmt.Errorf("draft distributions on a greedy session")
	}
	for i, d := range st.Drafts {
		if err := d.Check(vocab, st.Tokens[i+1]); err != nil {
			return fmt.Errorf("draft token %d: %w", i, err)
		}
	}
	return nil
}
