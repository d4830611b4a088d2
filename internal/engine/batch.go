package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model/input"
)

// Continuous batching. Every session of a model is one sequence of the
// model's KV cache (of its architecture's kind, one sequence per slot). A RunRange
// step is queued; a leader goroutine, started by the first step to find
// none running, runs rounds until the queue is empty: each round takes the
// queued steps over one layer range (decode steps first, then prompt
// chunks in arrival order, up to Options.Batch positions) and runs them as
// one graph, so concurrent sessions share each weight read. A prompt is
// cut into chunks of Options.PrefillChunk positions, so a long prompt
// holds up the sessions decoding beside it for one chunk at a time.
//
// A step's results depend, by rounding, on what runs beside it: ggml
// multiplies one row with other kernels than several, and a sequence's
// attention reads its cells among others'. Tokens are those of a session
// run alone except where two logits are within that rounding
// (TestBatchedSameTokens). With Options.Isolated each session keeps a
// cache of its own and every round is one step: no batching, and results
// bit-identical to a session alone, whatever else runs.

// step is one queued RunRange chunk.
type step struct {
	s      *Session
	a, b   int
	pos    int32 // the session's position before the step
	tokens []int32
	hidden []float32
	n      int
	all    bool // on the last layer: logits of every position, not the last only

	out  []float32
	err  error
	done chan struct{}
}

// run queues st and returns when a round has run it.
func (m *Model) run(st *step) {
	st.done = make(chan struct{})
	m.bmu.Lock()
	m.pending = append(m.pending, st)
	m.queued.Add(1)
	select {
	case m.arrived <- struct{}{}:
	default:
	}
	if !m.leading {
		m.leading = true
		go m.lead()
	}
	m.bmu.Unlock()
	<-st.done
}

// lead runs rounds until the queue is empty. It runs on a goroutine of its
// own, not a caller's: a caller whose step is done goes on with its
// session at once, whatever others still queue.
func (m *Model) lead() {
	for {
		m.gather()
		m.bmu.Lock()
		round := m.takeRoundLocked()
		if len(round) == 0 {
			m.leading = false
			m.bmu.Unlock()
			return
		}
		m.bmu.Unlock()
		t0 := time.Now()
		m.forward(round)
		m.lastRound, m.lastTook = len(round), time.Since(t0)
		for _, r := range round {
			close(r.done)
		}
	}
}

// gather gives the sessions of the last round a moment to queue their
// next steps (they sample and send their token first) before the leader
// takes a round: up to a fifth of the last round's time, at most 5 ms, or
// until as many steps wait as the last round ran. Without it the leader
// would take each step alone as soon as it is queued.
func (m *Model) gather() {
	if m.opts.Isolated || m.lastRound < 2 {
		return
	}
	timer := time.NewTimer(min(m.lastTook/5, 5*time.Millisecond))
	defer timer.Stop()
	for {
		m.bmu.Lock()
		n := len(m.pending)
		m.bmu.Unlock()
		if n >= m.lastRound {
			return
		}
		select {
		case <-m.arrived:
		case <-timer.C:
			return
		}
	}
}

// takeRoundLocked removes the next round from m.pending: the oldest step,
// then the decode steps (one position each) over its layer range, then
// longer steps in order, up to Options.Batch positions.
func (m *Model) takeRoundLocked() []*step {
	if len(m.pending) == 0 {
		return nil
	}
	a, b := m.pending[0].a, m.pending[0].b
	if m.opts.Isolated {
		round := m.pending[:1:1]
		m.pending = m.pending[1:]
		m.rounds.Add(1)
		m.batched.Add(1)
		return round
	}
	// The oldest step always runs (a prompt chunk is never passed over
	// for decode steps that keep coming); then decode steps, then the
	// other chunks in order.
	round := []*step{m.pending[0]}
	budget := m.opts.Batch - m.pending[0].n
	chosen := make([]bool, len(m.pending))
	chosen[0] = true
	for pass := range 2 {
		for i, st := range m.pending {
			if chosen[i] || st.a != a || st.b != b || (pass == 0) != (st.n == 1) {
				continue
			}
			if st.n > budget {
				continue
			}
			chosen[i] = true
			round = append(round, st)
			budget -= st.n
		}
	}
	rest := m.pending[:0:0]
	for i, st := range m.pending {
		if !chosen[i] {
			rest = append(rest, st)
		}
	}
	m.pending = rest
	m.rounds.Add(1)
	m.batched.Add(int64(len(round)))
	return round
}

// forward runs one round as one graph: layers [a,b) over every step's
// positions, each in its own sequence. It mirrors the models' own Forward
// (see arch.go): embedding, the layer loop with the last layer pruned to
// the rows whose logits are wanted, output norm and head.
func (m *Model) forward(round []*step) {
	computeMu.Lock()
	defer computeMu.Unlock()
	fail := func(err error) {
		for _, st := range round {
			st.err = err
		}
	}
	if m.dead.Load() {
		fail(ErrClosed)
		return
	}
	cache := round[0].s.cache
	a, b := round[0].a, round[0].b
	N, H := m.info.Layers, m.info.Hidden
	last := b == N
	total := 0
	for _, st := range round {
		total += st.n
	}
	started := false
	defer func() {
		if r := recover(); r != nil {
			fail(fmt.Errorf("%w: running layers [%d,%d): %v", ErrInternal, a, b, r))
		}
		if round[0].err != nil && started {
			// Drop whatever this round put in the cache, so that each
			// session stays consistent with its position.
			for _, st := range round {
				func() {
					defer func() { _ = recover() }()
					_ = cache.Remove(st.s.seq, st.pos, math.MaxInt32)
				}()
			}
		}
	}()
	m.clearReleased()

	t0 := time.Now()
	ctx := m.b.NewContext()
	defer ctx.Close()
	pos := make([]int32, 0, total)
	seqs := make([]int, 0, total)
	var tokens []int32
	var hidden []float32
	var outs []int32
	for _, st := range round {
		for i := range st.n {
			pos = append(pos, st.pos+int32(i))
			seqs = append(seqs, st.s.seq)
		}
		tokens = append(tokens, st.tokens...)
		hidden = append(hidden, st.hidden...)
		first := len(pos) - 1
		if st.all {
			first = len(pos) - st.n
		}
		for i := first; i < len(pos); i++ {
			outs = append(outs, int32(i))
		}
	}
	started = true
	if m.reserveOnce {
		// ollama's scheduler grows a device's compute buffer when a graph
		// needs more than the last, freeing the old one under work the
		// device may still reference (Mesa 22.3's lavapipe corrupts its
		// heap so): a model on a GPU reserves its largest graph first.
		m.reserveOnce = false
		if err := m.reserve(cache, round[0].s.seq); err != nil {
			fail(err)
			return
		}
	}
	h, err := m.graph(ctx, cache, a, b, pos, seqs, tokens, hidden, outs, false)
	if err != nil {
		fail(err)
		return
	}
	ctx.Forward(h)
	t1 := time.Now()
	useThreads(m.cpu, m.opts.Threads, m.opts.NoPool)
	ctx.Compute(h)
	out := h.Floats()
	m.statBuild.Add(int64(t1.Sub(t0)))
	m.statCompute.Add(int64(time.Since(t1)))
	want := total * H
	if last {
		want = len(outs) * m.info.VocabSize
	}
	if len(out) != want {
		fail(fmt.Errorf("%w: layers [%d,%d) gave %d floats, want %d", ErrInternal, a, b, len(out), want))
		return
	}
	off := 0
	for _, st := range round {
		rows, width := st.n, H
		if last {
			rows, width = 1, m.info.VocabSize
			if st.all {
				rows = st.n
			}
		}
		st.out = out[off*width : (off+rows)*width : (off+rows)*width]
		off += rows
	}
}

// clearReleased drops the cells of sessions closed since the last round.
// It runs under computeMu: the cache is shared by every session.
func (m *Model) clearReleased() {
	if m.cache == nil {
		return
	}
	m.cmu.Lock()
	seqs := m.released
	m.released = nil
	m.cmu.Unlock()
	for _, seq := range seqs {
		_ = m.cache.Remove(seq, 0, math.MaxInt32)
	}
}

// graph builds layers [a,b) over the positions pos of sequences seqs
// (tokens from the embedding, or hidden states), with the head's rows outs
// where b is the last layer, in ctx; reserve builds it over the whole of
// the cache (kvcache's reserve) without changing the cache.
func (m *Model) graph(ctx ml.Context, cache kvcache.Cache, a, b int, pos []int32, seqs []int, tokens []int32, hidden []float32,
	outs []int32, reserve bool) (ml.Tensor, error) {
	N, H, total := m.info.Layers, m.info.Hidden, len(pos)
	last := b == N
	batch := input.Batch{Positions: pos, Sequences: seqs}
	if last {
		batch.Outputs = ctx.Input().FromInts(outs, len(outs))
	}
	if err := cache.StartForward(ctx, batch, reserve); err != nil {
		return nil, fmt.Errorf("engine: KV cache: %w", err)
	}
	positions := ctx.Input().FromInts(pos, total)
	var h ml.Tensor
	layer := m.a.layer
	if p, ok := m.a.(positioned); ok {
		layer = p.withPositions(ctx, pos)
	}
	switch e, ok := m.a.(perLayerInputs); {
	case a == 0 && ok:
		h, layer = e.embedLayers(ctx, ctx.Input().FromInts(tokens, total))
	case a == 0:
		h = m.a.embed(ctx, ctx.Input().FromInts(tokens, total))
	default:
		h = ctx.Input().FromFloats(hidden, H, total)
	}
	for i := a; i < b; i++ {
		cache.SetLayer(i)
		var outputs ml.Tensor
		if i == N-1 {
			outputs = batch.Outputs
		}
		h = layer(ctx, i, h, positions, outputs, cache)
	}
	if last {
		h = m.a.head(ctx, h)
	}
	return h, nil
}

// reserve has ollama's scheduler allocate the compute buffers of the
// largest graph the model runs: Batch positions of sequence seq through
// every layer of the file, over the whole of the cache, with the head's
// logits for every position. It runs under computeMu, once.
func (m *Model) reserve(cache kvcache.Cache, seq int) (err error) {
	defer recoverErr(&err, "reserving the compute graph")
	n := m.opts.Batch
	pos, seqs, outs := make([]int32, n), make([]int, n), make([]int32, n)
	for i := range n {
		pos[i], seqs[i], outs[i] = int32(i), seq, int32(i)
	}
	var tokens []int32
	var hidden []float32
	a, b := m.info.LayerRange[0], m.info.LayerRange[1]
	if a == 0 {
		tokens = make([]int32, n)
	} else {
		hidden = make([]float32, n*m.info.Hidden)
	}
	ctx := m.b.NewContext()
	defer ctx.Close()
	h, err := m.graph(ctx, cache, a, b, pos, seqs, tokens, hidden, outs, true)
	if err != nil {
		return err
	}
	ctx.Forward(h)
	ctx.Reserve()
	return nil
}
