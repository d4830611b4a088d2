package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
)

// slot is one sequence's KV, reused by successive sessions: a sequence of
// the model's shared cache, or with Options.Isolated a cache of its own
// (created when the slot is first used).
type slot struct {
	cache kvcache.Cache // Isolated only
	sess  *Session
}

// Session is one sequence on a Model: a KV cache slot and the next position.
// Its methods are safe for concurrent use but calls on one session are
// serialized. A session expires after Options.TTL without calls.
type Session struct {
	m     *Model
	id    uint64
	slot  int           // its slot
	cache kvcache.Cache // m.cache, or its slot's own (Isolated)
	seq   int           // its sequence in cache

	mu  sync.Mutex // serializes calls; guards pos
	pos int32

	// guarded by m.mu
	closed   bool
	busy     bool
	lastUsed time.Time
}

// NewSession takes a free slot, expiring idle sessions first. It returns
// ErrCapacity when every slot is in use.
func (m *Model) NewSession() (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	m.expireLocked()
	for i, sl := range m.slots {
		if sl != nil && sl.sess != nil {
			continue
		}
		if sl == nil {
			sl = &slot{}
		}
		cache, seq := m.cache, i
		switch {
		case m.opts.Isolated && sl.cache == nil:
			c, err := m.newCache(1)
			if err != nil {
				return nil, err
			}
			sl.cache = c
			fallthrough
		case m.opts.Isolated:
			cache, seq = sl.cache, 0
		case m.cache == nil:
			// One sequence per slot, each of Context cells, allocated per
			// layer at its first use.
			c, err := m.newCache(len(m.slots))
			if err != nil {
				return nil, err
			}
			m.cache, cache = c, c
		}
		m.slots[i] = sl
		m.nextID++
		s := &Session{m: m, id: m.nextID, slot: i, cache: cache, seq: seq, lastUsed: m.now()}
		sl.sess = s
		m.log.Debug("session opened", "model", m.path, "session", s.id, "slot", i)
		return s, nil
	}
	return nil, fmt.Errorf("%w (%d slots)", ErrCapacity, len(m.slots))
}

// newCache makes a KV cache of seqs sequences of Context cells each: a
// causal cache, or the architecture's own (ownCache); a sliding-window one
// keeps PrefillChunk positions behind each window, so that a session can
// be truncated by up to that many (Truncate).
func (m *Model) newCache(seqs int) (c kvcache.Cache, err error) {
	c = kvcache.NewCausalCache(nil)
	if w, ok := m.a.(ownCache); ok {
		c = w.newCache(int32(m.opts.PrefillChunk))
	}
	defer recoverErr(&err, "initialising KV cache")
	c.Init(m.b, ml.DTypeF16, seqs, m.opts.Context, m.opts.Batch)
	return c, nil
}

// expireLocked closes sessions idle longer than Options.TTL (NewSession
// does this before reporting ErrCapacity); m.mu must be held.
func (m *Model) expireLocked() {
	if m.opts.TTL < 0 {
		return
	}
	now := m.now()
	for _, sl := range m.slots {
		if sl == nil || sl.sess == nil || sl.sess.busy {
			continue
		}
		if now.Sub(sl.sess.lastUsed) > m.opts.TTL {
			m.log.Debug("session expired", "model", m.path, "session", sl.sess.id)
			m.releaseLocked(sl.sess)
		}
	}
}

// CachedSlots is how many slots' KV the model holds: none until the first
// session, then every slot's (the shared cache of all sequences is
// allocated, per layer, at its first use, and kept until Close); with
// Options.Isolated, the slots used so far (each keeps its cache for reuse).
// CachedSlots x Memory().KVPerSession bounds the KV memory held now.
func (m *Model) CachedSlots() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.opts.Isolated {
		if m.cache == nil {
			return 0
		}
		return len(m.slots)
	}
	n := 0
	for _, sl := range m.slots {
		if sl != nil && sl.cache != nil {
			n++
		}
	}
	return n
}

// Sessions reports how many sessions are open and the slot count.
func (m *Model) Sessions() (open, slots int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, sl := range m.slots {
		if sl != nil && sl.sess != nil {
			open++
		}
	}
	return open, len(m.slots)
}

func (m *Model) releaseLocked(s *Session) {
	if s.closed {
		return
	}
	s.closed = true
	sl := m.slots[s.slot]
	if sl.sess == s {
		sl.sess = nil
		if m.opts.Isolated {
			// Its own cache, which no round uses now: whole-sequence
			// removal only edits metadata.
			_ = sl.cache.Remove(0, 0, math.MaxInt32)
		} else {
			// The cache is shared: the next round drops the sequence's
			// cells, before any step of a session that takes the slot.
			m.cmu.Lock()
			if !slices.Contains(m.released, s.seq) {
				m.released = append(m.released, s.seq)
			}
			m.cmu.Unlock()
		}
		m.wakeLocked()
	}
}

// ID identifies the session within its model (for logs).
func (s *Session) ID() uint64 { return s.id }

// Pos is the number of positions the session holds (the next position).
func (s *Session) Pos() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.pos)
}

// Close frees the session's slot, after any call in progress returns. It is
// idempotent.
func (s *Session) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if !s.m.closed {
		s.m.releaseLocked(s)
	}
}

// acquire marks the session busy (so it does not expire mid-call).
func (s *Session) acquire() error {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if s.m.closed {
		return ErrClosed
	}
	if s.closed {
		return ErrSessionClosed
	}
	s.busy = true
	s.lastUsed = s.m.now()
	return nil
}

func (s *Session) release() {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	s.busy = false
	s.lastUsed = s.m.now()
}

// Truncate keeps the first n positions of the session and drops the rest, so
// that the next call continues at position n (replay after a failover).
func (s *Session) Truncate(n int) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.release()
	if n < 0 || n > int(s.pos) {
		return fmt.Errorf("%w: truncate to %d, session holds %d", ErrBadInput, n, s.pos)
	}
	if n == int(s.pos) {
		return nil
	}
	defer recoverErr(&err, "truncating KV cache")
	computeMu.Lock()
	defer computeMu.Unlock()
	if s.m.dead.Load() {
		return ErrClosed
	}
	// A sliding-window cache drops what falls behind its window (the next
	// position must still see the whole window it attends to); a recurrent
	// state can only go back to a checkpoint of itself.
	if n > 0 && !s.cache.CanResume(s.seq, int32(n)) {
		return fmt.Errorf("%w: truncate to %d: the KV cache cannot go back there (sliding-window positions dropped, or no checkpoint of the recurrent state; session at %d)", ErrBadInput, n, s.pos)
	}
	if err := s.cache.Remove(s.seq, int32(n), math.MaxInt32); err != nil {
		return fmt.Errorf("engine: truncating session: %w", err)
	}
	s.pos = int32(n)
	return nil
}

// RunRange runs layers [a,b) for the next len(tokens) (a == 0) or
// len(hidden)/Hidden (a > 0) positions of the session. Hidden states are
// token-major float32, Hidden per token. It returns the hidden states of every
// input position when b < Layers, or the logits (VocabSize floats) of the last
// input position when b == Layers. Inputs longer than Options.PrefillChunk
// are run in chunks. Each chunk is a step of the model's batching (batch.go):
// concurrent sessions' steps over the same layers run in one graph. ctx is
// checked between chunks.
func (s *Session) RunRange(ctx context.Context, a, b int, tokens []int32, hidden []float32) ([]float32, error) {
	return s.runRange(ctx, a, b, tokens, hidden, false)
}

// RunRangeAll is RunRange returning, when b == Layers, the logits of every
// input position (len(tokens) or len(hidden)/Hidden rows of VocabSize
// floats, position-major): what a speculative step verifies its draft
// with. Below the last layer it is RunRange.
func (s *Session) RunRangeAll(ctx context.Context, a, b int, tokens []int32, hidden []float32) ([]float32, error) {
	return s.runRange(ctx, a, b, tokens, hidden, true)
}

func (s *Session) runRange(ctx context.Context, a, b int, tokens []int32, hidden []float32, all bool) ([]float32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.release()
	m := s.m
	N, H := m.info.Layers, m.info.Hidden
	if a < 0 || b > N || a >= b {
		return nil, fmt.Errorf("%w: [%d,%d) of %d layers", ErrBadRange, a, b, N)
	}
	if err := m.checkRange(a, b); err != nil {
		return nil, err
	}
	if why := wholeOnly[m.info.Arch]; why != "" && (a != 0 || b != N) {
		return nil, fmt.Errorf("%w: [%d,%d) of %d layers: %s", ErrBadRange, a, b, N, why)
	}
	var n int
	if a == 0 {
		if hidden != nil {
			return nil, fmt.Errorf("%w: layer 0 takes token ids, not hidden states", ErrBadInput)
		}
		n = len(tokens)
		for _, t := range tokens {
			if t < 0 || int(t) >= m.info.VocabSize {
				return nil, fmt.Errorf("%w: token id %d outside vocabulary of %d", ErrBadInput, t, m.info.VocabSize)
			}
			if l, ok := m.a.(tokenLimited); ok && int(t) >= l.maxToken() {
				return nil, fmt.Errorf("%w: token id %d past the per-layer embedding's %d rows", ErrBadInput, t, l.maxToken())
			}
		}
	} else {
		if tokens != nil {
			return nil, fmt.Errorf("%w: layer %d takes hidden states, not token ids", ErrBadInput, a)
		}
		if len(hidden)%H != 0 {
			return nil, fmt.Errorf("%w: %d hidden floats is not a multiple of %d", ErrBadInput, len(hidden), H)
		}
		n = len(hidden) / H
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: no input positions", ErrBadInput)
	}
	if int(s.pos)+n > m.opts.Context {
		return nil, fmt.Errorf("%w: %d + %d positions > %d", ErrContextFull, s.pos, n, m.opts.Context)
	}
	var out []float32
	switch {
	case b < N:
		out = make([]float32, 0, n*H)
	case all:
		out = make([]float32, 0, n*m.info.VocabSize)
	}
	for off := 0; off < n; off += m.opts.PrefillChunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		k := min(m.opts.PrefillChunk, n-off)
		st := &step{s: s, a: a, b: b, pos: s.pos, n: k, all: all && b == N}
		if a == 0 {
			st.tokens = tokens[off : off+k]
		} else {
			st.hidden = hidden[off*H : (off+k)*H]
		}
		m.run(st)
		if st.err != nil {
			return nil, st.err
		}
		s.pos += int32(k)
		if b < N || all {
			out = append(out, st.out...)
		} else {
			out = st.out
		}
	}
	return out, nil
}

// checkRange reports ErrMissingLayers naming the file when [a,b) needs
// tensors the file lacks.
func (m *Model) checkRange(a, b int) error {
	if a == 0 && !m.info.HasEmbedding {
		return &FileError{m.path, fmt.Errorf("%w: no token_embd (layers [%d,%d) present)", ErrMissingLayers, m.info.LayerRange[0], m.info.LayerRange[1])}
	}
	if b == m.info.Layers && !m.info.HasHead {
		return &FileError{m.path, fmt.Errorf("%w: no output head (layers [%d,%d) present)", ErrMissingLayers, m.info.LayerRange[0], m.info.LayerRange[1])}
	}
	if a < m.info.LayerRange[0] || b > m.info.LayerRange[1] {
		return &FileError{m.path, fmt.Errorf("%w: asked [%d,%d), file holds [%d,%d)", ErrMissingLayers, a, b, m.info.LayerRange[0], m.info.LayerRange[1])}
	}
	for i := a; i < b; i++ {
		if !m.a.hasLayer(i) {
			return &FileError{m.path, fmt.Errorf("%w: layer %d incomplete", ErrMissingLayers, i)}
		}
	}
	return nil
}
