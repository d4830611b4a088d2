package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model/input"
)

// forward runs one graph: layers [a,b) over n positions starting at s.pos.
// It mirrors the models' own Forward (see arch.go): embedding, the layer loop
// with the last layer pruned to the rows whose logits are wanted, output norm
// and head.
func (s *Session) forward(a, b int, tokens []int32, hidden []float32, n int) (out []float32, err error) {
	m := s.m
	computeMu.Lock()
	defer computeMu.Unlock()
	if m.dead.Load() {
		return nil, ErrClosed
	}
	started := false
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: running layers [%d,%d): %v", ErrInternal, a, b, r)
		}
		if err != nil && started {
			// Drop whatever this batch put in the cache so the session stays
			// consistent with s.pos.
			func() {
				defer func() { _ = recover() }()
				_ = s.cache.Remove(0, s.pos, math.MaxInt32)
			}()
		}
	}()

	N, H := m.info.Layers, m.info.Hidden
	t0 := time.Now()
	ctx := m.m.Backend().NewContext()
	defer ctx.Close()

	pos := make([]int32, n)
	for i := range pos {
		pos[i] = s.pos + int32(i)
	}
	batch := input.Batch{Positions: pos, Sequences: make([]int, n)}
	last := b == N
	if last {
		batch.Outputs = ctx.Input().FromInts([]int32{int32(n - 1)}, 1)
	}
	started = true
	if err := s.cache.StartForward(ctx, batch, false); err != nil {
		return nil, fmt.Errorf("engine: KV cache: %w", err)
	}
	positions := ctx.Input().FromInts(pos, n)
	var h ml.Tensor
	if a == 0 {
		h = m.a.embed(ctx, ctx.Input().FromInts(tokens, n))
	} else {
		h = ctx.Input().FromFloats(hidden, H, n)
	}
	for i := a; i < b; i++ {
		s.cache.SetLayer(i)
		var outputs ml.Tensor
		if i == N-1 {
			outputs = batch.Outputs
		}
		h = m.a.layer(ctx, i, h, positions, outputs, s.cache)
	}
	if last {
		h = m.a.head(ctx, h)
	}
	ctx.Forward(h)
	t1 := time.Now()
	ctx.Compute(h)
	out = h.Floats()
	m.statBuild.Add(int64(t1.Sub(t0)))
	m.statCompute.Add(int64(time.Since(t1)))
	want := n * H
	if last {
		want = m.info.VocabSize
	}
	if len(out) != want {
		return nil, fmt.Errorf("%w: layers [%d,%d) gave %d floats, want %d", ErrInternal, a, b, len(out), want)
	}
	s.pos += int32(n)
	return out, nil
}
