package pipeline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
)

// defaultIdle closes a session that completed no step for this long.
const defaultIdle = 2 * time.Minute

// openQueueWait is how long an open waits for a free session slot (the
// originator waits 60 s for the whole chain to open).
const openQueueWait = 45 * time.Second

// StageServer serves this peer's shards on ProtocolID.
type StageServer struct {
	host host.Host
	log  *slog.Logger
	// IdleTimeout closes a session that completed no step for this long
	// (default 2 min): frames that are refused do not keep it open. Set
	// before serving.
	IdleTimeout time.Duration
	// BorrowedIdle closes sooner (default 15 s) a session a peer holds
	// beyond its share of a shard, borrowed while the shard had a free
	// slot (see stagecap.go). Set before serving.
	BorrowedIdle time.Duration
	// Known reports whether this stage may open a session on a peer as the
	// next hop of a route: one it knows from its own peer table. A route
	// names peers, never addresses: a requester cannot make a stage dial
	// where it likes. nil: a peer the host already has addresses for.
	// Set before serving.
	Known func(peer.ID) bool
	// PeerSessions is how many sessions one remote peer may hold on each
	// shard, open or waiting for a slot (default: a quarter of the shard's
	// slots, at least 2, at most all); PeerQueue is how many more of its opens may wait
	// for one of those to close (default: a quarter of the engine's queue,
	// at least 1; negative: none). Beyond, an open is refused as busy. Set
	// before serving.
	PeerSessions, PeerQueue int
	// Refuse, when set, says why this peer takes no new session from
	// another peer now ("": it takes them), such as a battery running low;
	// an open is then refused as busy with that reason. Sessions already
	// open go on. Set before serving.
	Refuse func() string
	// Rank, when set, ranks a remote peer's opens for a slot of a busy
	// shard, in [-1, 1] (engine.WithPriority): the standing in this
	// peer's ledger of give and take of the peer that opens (the
	// originator at the first hop, the hop before at the others). nil:
	// every peer alike. Set before serving.
	Rank func(peer.ID) float64

	gate   peerGate
	mu     sync.RWMutex
	shards []*Shard
	active int
	closed bool
}

// NewStageServer registers the stream handler on h.
func NewStageServer(h host.Host, log *slog.Logger) *StageServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &StageServer{host: h, log: log}
	h.SetStreamHandler(ProtocolID, s.handle)
	return s
}

// Add serves a loaded shard.
func (s *StageServer) Add(sh *Shard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shards = append(s.shards, sh)
}

// Remove stops serving layers [a,b) of model: no new session opens on
// them; the sessions open finish (each ends with its generation, or when
// idle too long), then the shard's model is closed and freed is closed.
// served is false when no such shard is served.
func (s *StageServer) Remove(model string, a, b int) (served bool, freed <-chan struct{}) {
	s.mu.Lock()
	var sh *Shard
	for i, x := range s.shards {
		if x.ModelCID == model && x.Start == a && x.End == b {
			sh = x
			s.shards = append(s.shards[:i:i], s.shards[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	if sh == nil {
		return false, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Sessions end with their generation, or idle after IdleTimeout;
		// the engine's own TTL bounds a stuck one.
		wait := sh.Model.Options().TTL
		if wait <= 0 {
			wait = 10 * time.Minute
		}
		for end := time.Now().Add(wait); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if open, _ := sh.Model.Sessions(); open == 0 {
				break
			}
		}
		sh.Model.Close()
	}()
	return true, done
}

// Shards is what to announce.
func (s *StageServer) Shards() []gossip.Shard {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]gossip.Shard, 0, len(s.shards))
	for _, sh := range s.shards {
		if !sh.private {
			out = append(out, sh.Capability())
		}
	}
	return out
}

// Local returns the loaded shards.
func (s *StageServer) Local() []*Shard {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*Shard(nil), s.shards...)
}

// Load is the sessions open and how many fit.
func (s *StageServer) Load() (active, capacity int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sh := range s.shards {
		_, slots := sh.Model.Sessions()
		capacity += slots
	}
	return s.active, capacity
}

// Queue is the slot queues of the shards served, summed.
func (s *StageServer) Queue() engine.QueueStats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var q engine.QueueStats
	for _, sh := range s.shards {
		q = q.Add(sh.Model.Queue())
	}
	return q
}

func (s *StageServer) find(model string, a, b int) *Shard {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil
	}
	for _, sh := range s.shards {
		if sh.holds(model, a, b) {
			return sh
		}
	}
	return nil
}

// Close stops serving and unloads the shards. It is idempotent.
func (s *StageServer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.host.RemoveStreamHandler(ProtocolID)
	var errs []error
	for _, sh := range s.shards {
		errs = append(errs, sh.Model.Close())
	}
	return errors.Join(errs...)
}

// stream is what a stage session reads from and writes to: a libp2p
// stream, or an in-process pipe when the originator is itself the first
// stage.
type stream interface {
	io.ReadWriter
	Close() error
	Reset() error
	SetReadDeadline(time.Time) error
}

// pipeStream adapts a net.Conn (net.Pipe) to stream.
type pipeStream struct{ net.Conn }

func (p pipeStream) Reset() error { return p.Conn.Close() }

// ServeLocal serves a session arriving on an in-process connection (the
// originator runs the first stage itself).
func (s *StageServer) ServeLocal(c net.Conn) { s.serve(pipeStream{c}, "self") }

// stageSession is one open session on this stage.
type stageSession struct {
	open    Open
	hop     RouteHop
	up      RouteHop // the hop before this one; zero on the first hop (the requester)
	last    bool     // the route ends here
	head    bool     // this hop runs the model's last layer: it returns logits or a token
	vocab   int
	sess    *engine.Session
	sampler *engine.Sampler
	history []int32
	ran     bool // the current step ran on this stage (a failure after it leaves the session behind the next hop's)
	// dropping: a part was refused here and answered with an error frame;
	// the frames of the rest of that prompt are read and dropped.
	dropping bool
	st       stream
	upR      *bufio.Reader
	down     network.Stream
	downR    *bufio.Reader
	next     RouteHop
}

func (s *StageServer) handle(st network.Stream) { s.serve(st, st.Conn().RemotePeer().String()) }

// serve serves one session: Open, then Steps until the stream ends.
func (s *StageServer) serve(st stream, remote string) {
	defer st.Close()
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	ss := &stageSession{st: st, upR: bufio.NewReaderSize(st, 64<<10)}
	typ, body, err := readFrame(ss.upR, limitJSON)
	if err != nil || typ != frameOpen {
		s.refuse(st, remote, CodeBadFrame, fmt.Sprintf("expected an open frame: %v", err), RouteHop{})
		return
	}
	if err := decodeJSON(body, &ss.open); err != nil {
		s.refuse(st, remote, CodeBadFrame, err.Error(), RouteHop{})
		return
	}
	if err := ss.open.validate(); err != nil {
		s.refuse(st, remote, CodeBadFrame, err.Error(), RouteHop{})
		return
	}
	ss.hop = ss.open.Route[ss.open.Index]
	if ss.open.Index > 0 {
		ss.up = ss.open.Route[ss.open.Index-1]
	}
	ss.last = ss.hop.End == ss.open.end()
	ss.head = ss.hop.End == ss.open.Layers
	self := RouteHop{Peer: s.host.ID().String(), Start: ss.hop.Start, End: ss.hop.End}
	sh := s.find(ss.open.Model, ss.hop.Start, ss.hop.End)
	if sh == nil {
		s.refuse(st, remote, CodeNoShard, fmt.Sprintf("layers [%d,%d) of %s are not held here", ss.hop.Start, ss.hop.End, ss.open.Model), self)
		return
	}
	if sh.Hidden != ss.open.Hidden || sh.Layers != ss.open.Layers {
		s.refuse(st, remote, CodeBadFrame, fmt.Sprintf("model shape: %d layers of %d hidden here, open says %d of %d",
			sh.Layers, sh.Hidden, ss.open.Layers, ss.open.Hidden), self)
		return
	}
	if why := engine.NoRewind(sh.Model.Info().Arch); ss.open.Verify && why != "" {
		// A verify step's rejected positions are rolled back (a
		// truncation) before the next: refused as a hop that predates
		// verify steps is, the route is opened again plain.
		s.refuse(st, remote, CodeBadFrame, "verify steps roll sessions back, and "+why, self)
		return
	}
	ss.vocab = sh.Model.Info().VocabSize
	// A full stage queues the session (bounded) rather than refusing it:
	// the originator's progress watch sees this peer alive meanwhile. One
	// remote peer gets its share of the slots and queue, no more.
	actx, cancel := context.WithTimeout(context.Background(), openQueueWait)
	defer cancel()
	borrowed := false
	if remote != "self" {
		if s.Refuse != nil {
			if why := s.Refuse(); why != "" {
				s.refuse(st, remote, CodeBusy, "not taking new work: "+why, self)
				return
			}
		}
		share, queue := s.peerShare(sh)
		spare := func(tickets int) bool {
			// Tickets count peers let through and not yet in a slot: a
			// slot one of them is about to take is not spare.
			open, slots := sh.Model.Sessions()
			return open < slots && tickets < slots && sh.Model.Queue().Waiting == 0
		}
		release, over, err := s.gate.acquire(actx, peerKey{remote, sh}, share, queue, spare)
		if err != nil {
			s.refuse(st, remote, CodeBusy, err.Error(), self)
			return
		}
		defer release()
		borrowed = over
	}
	if s.Rank != nil && remote != "self" {
		if id, err := peer.Decode(remote); err == nil {
			actx = engine.WithPriority(actx, s.Rank(id))
		}
	}
	ss.sess, err = sh.Model.AcquireSession(actx)
	cancel()
	if err != nil {
		code := CodeInternal
		if errors.Is(err, engine.ErrCapacity) {
			code = CodeBusy
		}
		s.refuse(st, remote, code, err.Error(), self)
		return
	}
	defer ss.sess.Close()
	s.mu.Lock()
	s.active++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.active--
		s.mu.Unlock()
	}()
	sm := ss.open.Sampling
	ss.sampler = engine.NewSampler(sm.Options())
	if !ss.last {
		if werr := s.openDownstream(ss); werr != nil {
			writeJSON(st, frameError, werr)
			return
		}
		defer ss.down.Close()
	}
	if err := writeJSON(st, frameOpened, &Opened{Session: ss.open.Session, Vocab: sh.Model.Info().VocabSize}); err != nil {
		return
	}
	idle := s.IdleTimeout
	if idle <= 0 {
		idle = defaultIdle
	}
	// Only a completed step keeps the session: a peer sending refused
	// frames, or nothing, loses its slot when the deadline passes. A
	// borrowed session waits the full idle time for its first step (the
	// prompt may take long on the hops before it), then must keep working.
	deadline := time.Now().Add(idle)
	if borrowed {
		b := s.BorrowedIdle
		if b <= 0 {
			b = defaultBorrowedIdle
		}
		idle = min(idle, b)
	}
	for {
		st.SetReadDeadline(deadline)
		typ, body, err := readFrame(ss.upR, limitStep(ss.open.Hidden, sh.Model.Options().Context))
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.log.Debug("stage: upstream gone", "session", ss.open.Session, "err", err)
				if ss.down != nil {
					ss.down.Reset()
				}
			}
			return
		}
		if typ != frameStep && typ != frameReplay && typ != frameVerify && typ != framePart {
			s.refuse(st, remote, CodeBadFrame, fmt.Sprintf("expected a step frame, got type %d", typ), self)
			return
		}
		if ss.dropping {
			// A part of this prompt was refused and answered at once: the
			// rest of the prompt is dropped, its last step too (that error
			// frame is its answer).
			ss.dropping = typ == framePart
			continue
		}
		res, werr := s.step(ss, typ, body, self)
		if werr != nil {
			writeJSON(st, frameError, werr)
			if !ss.ran && (werr.Code == CodeBadFrame || werr.Code == CodeBadInput || werr.Code == CodeContextFull) {
				// Refused before it ran: the session is intact (or rolled
				// back to the step's position, as the sender asked), and
				// the sender may go on (or stop) correctly.
				ss.dropping = typ == framePart
				continue
			}
			return
		}
		if res != nil {
			if err := writeFrame(st, frameResult, encodeResult(res)); err != nil {
				return
			}
		}
		deadline = time.Now().Add(idle)
	}
}

func (s *StageServer) refuse(st stream, remote, code, msg string, hop RouteHop) {
	s.log.Debug("stage: refused", "peer", remote, "code", code, "err", msg)
	writeJSON(st, frameError, &WireError{Code: code, Message: msg, Peer: hop.Peer, Start: hop.Start, End: hop.End})
}

// openDownstream opens the session on the next hop and waits until the rest
// of the chain is ready. A failure names the hop that failed.
func (s *StageServer) openDownstream(ss *stageSession) *WireError {
	ss.next = ss.open.Route[ss.open.Index+1]
	// What went wrong stays in this peer's log: the requester learns that
	// the next hop failed, never how (a dial error would tell it which
	// ports are open where).
	fail := func(err error) *WireError {
		s.log.Debug("stage: next hop failed", "peer", ss.next.Peer, "err", err)
		return &WireError{Code: CodeDownstream, Message: "the next hop could not be reached", Peer: ss.next.Peer,
			Start: ss.next.Start, End: ss.next.End}
	}
	id, err := peer.Decode(ss.next.Peer)
	if err != nil {
		return &WireError{Code: CodeBadFrame, Message: "route hop peer: " + err.Error()}
	}
	if !s.known(id) {
		return &WireError{Code: CodeDownstream, Message: "the next hop is not a peer this stage knows", Peer: ss.next.Peer,
			Start: ss.next.Start, End: ss.next.End}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	down, err := s.host.NewStream(network.WithAllowLimitedConn(ctx, ProtocolID), id, ProtocolID)
	if err != nil {
		return fail(err)
	}
	next := ss.open
	next.Index++
	if err := writeJSON(down, frameOpen, &next); err != nil {
		down.Reset()
		return fail(err)
	}
	down.SetReadDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReaderSize(down, 64<<10)
	typ, body, err := readFrame(r, limitJSON)
	if err != nil {
		down.Reset()
		return fail(err)
	}
	switch typ {
	case frameOpened:
		ss.down, ss.downR = down, r
		return nil
	case frameError:
		var we WireError
		if decodeJSON(body, &we) != nil {
			we = WireError{Code: CodeDownstream, Message: "malformed error frame"}
		}
		if we.Peer == "" {
			we.Peer, we.Start, we.End = ss.next.Peer, ss.next.Start, ss.next.End
		}
		down.Reset()
		if !ss.open.mayName(ss.open.Index, &we) {
			return blameNext(ss, &we)
		}
		return &we
	}
	down.Reset()
	return fail(fmt.Errorf("unexpected frame type %d", typ))
}

// blameNext replaces an error frame from the next hop that names a peer
// it cannot know to have failed (a hop before it, or none on the route)
// with one naming the next hop: an honest hop does not pass such a lie on,
// so the originator knows that only the hops up to the one an error frame
// names can have written it.
func blameNext(ss *stageSession, we *WireError) *WireError {
	return &WireError{Code: CodeBadOutput, Message: fmt.Sprintf("the next hop sent an error frame naming %s (layers [%d,%d)), which it cannot know to have failed",
		short(we.Peer), we.Start, we.End), Peer: ss.next.Peer, Start: ss.next.Start, End: ss.next.End}
}

func (s *StageServer) known(id peer.ID) bool {
	if s.Known != nil {
		return s.Known(id)
	}
	return len(s.host.Peerstore().Addrs(id)) > 0
}
