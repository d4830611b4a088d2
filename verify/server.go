package verify

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// Lookup finds the loaded model this peer serves layers [a,b) of model
// (a CID) with: a pipeline shard covering the range, or a role model
// (a whole model). nil: not held.
type Lookup func(model string, a, b int) *engine.Model

// Server answers challenges on ProtocolID for the models this peer
// serves. Set its fields before the first challenge arrives.
type Server struct {
	host   host.Host
	lookup Lookup
	log    *slog.Logger

	// Burst and Every rate-limit each remote peer: at most Burst
	// challenges at once, then one more every Every (defaults 8 and 10 s).
	// An originator checks a claim once and remembers it, so an honest
	// one never comes near this.
	Burst int
	Every time.Duration
	// MaxConcurrent is the most challenges computed at once (default 2);
	// beyond, a challenge is refused busy. A challenge's session comes
	// from the model's own bounded queue, shared with real traffic.
	MaxConcurrent int
	// QueueWait is how long a challenge waits for a session slot
	// (default 20 s).
	QueueWait time.Duration

	mu      sync.Mutex
	buckets map[peer.ID]*bucket
	running int
	closed  bool
}

// bucket is one remote peer's token bucket.
type bucket struct {
	tokens float64
	at     time.Time
}

// maxBuckets bounds the peers whose rate is tracked; beyond, full
// buckets (peers that have not challenged for a while) are dropped.
const maxBuckets = 4096

// NewServer registers the challenge handler on h. lookup must be safe for
// concurrent use.
func NewServer(h host.Host, lookup Lookup, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{host: h, lookup: lookup, log: log, buckets: map[peer.ID]*bucket{}}
	h.SetStreamHandler(ProtocolID, s.handle)
	return s
}

// Close stops answering challenges. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.host.RemoveStreamHandler(ProtocolID)
	}
	return nil
}

func (s *Server) limits() (burst float64, every time.Duration, conc int, wait time.Duration) {
	burst, every, conc, wait = float64(s.Burst), s.Every, s.MaxConcurrent, s.QueueWait
	if burst <= 0 {
		burst = 8
	}
	if every <= 0 {
		every = 10 * time.Second
	}
	if conc <= 0 {
		conc = 2
	}
	if wait <= 0 {
		wait = 20 * time.Second
	}
	return
}

// allow takes one token of id's bucket.
func (s *Server) allow(id peer.ID, now time.Time) bool {
	burst, every, _, _ := s.limits()
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buckets[id]
	if b == nil {
		if len(s.buckets) >= maxBuckets {
			for k, o := range s.buckets {
				if o.tokens+now.Sub(o.at).Seconds()/every.Seconds() >= burst {
					delete(s.buckets, k)
				}
			}
			if len(s.buckets) >= maxBuckets {
				return false // every tracked peer is busy challenging: a flood
			}
		}
		b = &bucket{tokens: burst, at: now}
		s.buckets[id] = b
	}
	b.tokens = min(burst, b.tokens+now.Sub(b.at).Seconds()/every.Seconds())
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (s *Server) enter() bool {
	_, _, conc, _ := s.limits()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.running >= conc {
		return false
	}
	s.running++
	return true
}

func (s *Server) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
}

func (s *Server) handle(st network.Stream) {
	defer st.Close()
	remote := st.Conn().RemotePeer()
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	refuse := func(code, msg string) {
		s.log.Debug("verify: challenge refused", "peer", remote, "code", code, "err", msg)
		st.SetWriteDeadline(time.Now().Add(10 * time.Second))
		WriteError(st, code, msg)
	}
	// The rate limit and the memory a request may take come before any of
	// it is read: a crowd of identities sending large requests is refused,
	// not buffered.
	if !s.allow(remote, time.Now()) {
		refuse(CodeRateLimited, "too many challenges from your peer; try again later")
		return
	}
	if err := st.Scope().ReserveMemory(limitRequest, network.ReservationPriorityLow); err != nil {
		refuse(CodeBusy, "no memory budget left for a challenge; try again later")
		return
	}
	defer st.Scope().ReleaseMemory(limitRequest)
	req, err := ReadRequest(bufio.NewReaderSize(st, 64<<10))
	if err != nil {
		refuse(CodeBadRequest, err.Error())
		return
	}
	m := s.lookup(req.Model, req.Start, req.End)
	if m == nil {
		refuse(CodeNotHeld, fmt.Sprintf("layers [%d,%d) of %s are not held here", req.Start, req.End, req.Model))
		return
	}
	info := m.Info()
	if err := fits(req, info); err != nil {
		refuse(CodeBadRequest, err.Error())
		return
	}
	if n := traceBytes(req.End-req.Start, req.Positions(), info.Hidden, info.VocabSize, req.End == info.Layers); n > MaxTraceBytes {
		refuse(CodeTooLarge, fmt.Sprintf("the trace of layers [%d,%d) would be %d bytes (at most %d)", req.Start, req.End, n, MaxTraceBytes))
		return
	}
	if !s.enter() {
		refuse(CodeBusy, "too many challenges at once")
		return
	}
	defer s.leave()
	_, _, _, wait := s.limits()
	ctx, cancel := context.WithTimeout(context.Background(), wait+2*time.Minute)
	defer cancel()
	actx, acancel := context.WithTimeout(ctx, wait)
	sess, err := m.AcquireSession(actx)
	acancel()
	if err != nil {
		refuse(CodeBusy, "no session free")
		return
	}
	defer sess.Close()
	w := bufio.NewWriterSize(st, 64<<10)
	start := time.Now()
	err = runLayers(ctx, m, sess, req.Start, req.End, req.Tokens, req.Hidden, func(l int, out []float32) error {
		st.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if err := WriteBoundary(w, l, out); err != nil {
			return err
		}
		return w.Flush()
	})
	if err != nil {
		code := CodeInternal
		if errors.Is(err, engine.ErrCapacity) || errors.Is(err, context.DeadlineExceeded) {
			code = CodeBusy
		}
		// The engine's error stays in this peer's log: it names local files.
		s.log.Warn("verify: answering a challenge failed", "peer", remote, "model", req.Model,
			"layers", fmt.Sprintf("[%d,%d)", req.Start, req.End), "err", err)
		refuse(code, "the challenge could not be computed")
		return
	}
	s.log.Debug("verify: challenge answered", "peer", remote, "model", req.Model,
		"layers", fmt.Sprintf("[%d,%d)", req.Start, req.End), "positions", req.Positions(), "took", time.Since(start))
}

// fits checks a request against the model that would answer it.
func fits(r *Request, info engine.Info) error {
	if r.End > info.Layers {
		return fmt.Errorf("layers [%d,%d) of a model of %d layers", r.Start, r.End, info.Layers)
	}
	if r.Start == 0 {
		for _, t := range r.Tokens {
			if t < 0 || int(t) >= info.VocabSize {
				return fmt.Errorf("token id %d outside the vocabulary of %d", t, info.VocabSize)
			}
		}
		return nil
	}
	if r.HiddenSize != info.Hidden {
		return fmt.Errorf("hidden states of %d per position; the model's hidden size is %d", r.HiddenSize, info.Hidden)
	}
	return nil
}

// traceBytes is the size of the floats of a trace of layers layers over
// n positions.
func traceBytes(layers, n, hidden, vocab int, toHead bool) int64 {
	per := int64(n) * int64(hidden) * 4
	if !toHead {
		return int64(layers) * per
	}
	return int64(layers-1)*per + int64(vocab)*4
}
