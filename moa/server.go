package moa

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/ledger"
)

// Server serves this peer's role models on ProtocolID.
type Server struct {
	host host.Host // nil: local calls only
	log  *slog.Logger
	// Status reports the device's thermal state and battery percent (0:
	// unknown) for the metrics of each reply. May be nil.
	Status func() (thermal string, battery int)
	// Refuse, when set, says why this peer takes no new request from
	// another peer now ("": it takes them), such as a battery running low;
	// a request is then answered busy with that reason. Requests already
	// running go on. May be nil.
	Refuse func() string
	// DraftTimeout bounds each round trip to a remote drafter (0:
	// DefaultDraftTimeout).
	DraftTimeout time.Duration
	// DraftMin and DraftMax bound the draft length of a drafted answer,
	// chosen each round by measured cost (engine.NewSpecCost; 0 and 8 by
	// default).
	DraftMin, DraftMax int
	// Rank, when set, ranks a remote peer's requests for a slot of a busy
	// model, in [-1, 1] (engine.WithPriority): its standing in this
	// peer's ledger of give and take. nil: every peer alike.
	Rank func(peer.ID) float64
	// Acknowledge, when set, is given a receipt item for the work a remote
	// drafter did for an answer of this peer's (ledger.Exchange.Ack).
	Acknowledge func(server peer.ID, it ledger.Item)

	mu       sync.RWMutex
	roles    map[string]*RoleModel
	closed   bool
	inflight perPeer // remote peers' requests in flight
}

// NewServer registers the stream handler on h (if not nil).
func NewServer(h host.Host, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{host: h, log: log, roles: map[string]*RoleModel{}}
	if h != nil {
		h.SetStreamHandler(ProtocolID, s.handle)
		h.SetStreamHandler(ReasoningProtocolID, s.handle)
		h.SetStreamHandler(DraftProtocolID, s.handleDraft)
	}
	return s
}

// Add serves a loaded role model (replacing one of the same role).
func (s *Server) Add(rm *RoleModel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.roles[rm.Role]
	s.roles[rm.Role] = rm
	if old != nil && old.Model != rm.Model && !s.usesLocked(old.Model) {
		old.Close()
	}
}

// Remove stops serving role: no new request reaches it, those running
// finish. When no other role shares its model, the model is closed once
// they have, and freed is closed then; freed is nil when the model stays
// (shared, or the role was not served).
func (s *Server) Remove(role string) (served bool, freed <-chan struct{}) {
	s.mu.Lock()
	rm := s.roles[role]
	delete(s.roles, role)
	shared := rm != nil && s.usesLocked(rm.Model)
	s.mu.Unlock()
	if rm == nil || shared {
		return rm != nil, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for rm.active.Load() > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		rm.Close()
	}()
	return true, done
}

// usesLocked reports whether some role is served by m (roles may share a model).
func (s *Server) usesLocked(m *engine.Model) bool {
	for _, rm := range s.roles {
		if rm.Model == m {
			return true
		}
	}
	return false
}

// Roles is what to announce.
func (s *Server) Roles() []gossip.Role {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []gossip.Role
	for _, r := range Roles {
		if rm := s.roles[r]; rm != nil {
			out = append(out, rm.Capability())
		}
	}
	return out
}

// Models lists the role models served, by role, in the order of Roles.
func (s *Server) Models() []*RoleModel {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*RoleModel
	for _, r := range Roles {
		if rm := s.roles[r]; rm != nil {
			out = append(out, rm)
		}
	}
	return out
}

// Load is the number of requests being served and how many fit at once.
func (s *Server) Load() (active, capacity int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	counted := map[*engine.Model]bool{}
	for _, rm := range s.roles {
		active += int(rm.active.Load())
		if !counted[rm.Model] { // roles sharing a model share its slots
			counted[rm.Model] = true
			_, slots := rm.Model.Sessions()
			capacity += slots
		}
	}
	return active, capacity
}

// Queue is the slot queues of the models served, summed.
func (s *Server) Queue() engine.QueueStats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var q engine.QueueStats
	counted := map[*engine.Model]bool{}
	for _, rm := range s.roles {
		if !counted[rm.Model] {
			counted[rm.Model] = true
			q = q.Add(rm.Model.Queue())
		}
	}
	return q
}

// Serve answers req locally, calling onToken with each piece of the
// answer's text and of the model's reasoning (GPT-OSS's analysis
// channel), apart: a piece has one or the other.
func (s *Server) Serve(ctx context.Context, req *Request, onToken func(text, reasoning string) error) (*Done, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	rm := s.roles[req.Role]
	closed := s.closed
	if rm != nil && !closed {
		// Counted under the lock: Remove, once it has taken the role out,
		// sees every request that found it.
		rm.active.Add(1)
	}
	s.mu.RUnlock()
	if closed || rm == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoRole, req.Role)
	}
	defer rm.active.Add(-1)
	parent := ctx
	var deadline context.Context
	if req.DeadlineMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.DeadlineMS)*time.Millisecond)
		defer cancel()
		deadline = ctx
	}
	msgs := []engine.Message{{Role: "system", Content: SystemPrompt(req.Role)}}
	for _, m := range req.Messages {
		if m.Role == "system" { // the role's own prompt comes first; extra system text follows it
			msgs[0].Content += "\n\n" + m.Content
			continue
		}
		msgs = append(msgs, engine.Message{Role: m.Role, Content: m.Content})
	}
	sm := req.Sampling
	ereq := engine.Request{
		Messages: msgs, MaxTokens: req.MaxTokens, Think: req.Think,
		Sampling: sm.Options(),
	}
	if req.Prompt != "" {
		ereq.Messages, ereq.Think, ereq.Prompt = nil, nil, req.Prompt
	}
	start := time.Now()
	if req.Draft != nil {
		// Opened once the answer has its slot, beside its prompt; without
		// it the answer is the same, only slower.
		ereq.OpenDraft = func(ctx context.Context) (engine.SpecModel, func(), error) {
			return s.draft(ctx, req.Draft, rm, sm.RepeatPenalty)
		}
		ereq.DraftMin, ereq.DraftMax = s.DraftMin, s.DraftMax
	}
	res, err := rm.Model.Generate(ctx, ereq, func(t engine.Token) error {
		if t.Text == "" && t.Reasoning == "" || onToken == nil {
			return nil
		}
		return onToken(t.Text, t.Reasoning)
	})
	if errors.Is(err, engine.ErrCapacity) {
		return nil, fmt.Errorf("%w: all %s slots in use", ErrBusy, req.Role)
	}
	if errors.Is(err, engine.ErrNoChatTemplate) || errors.Is(err, engine.ErrChatTemplate) {
		// The model cannot take this conversation (a base model; a
		// template that refuses it): the asker's to fix, not this peer's
		// failure.
		return nil, fmt.Errorf("%w: %s: %w", ErrBadRequest, rm.Name, err)
	}
	var tooLong *engine.ContextError
	if errors.As(err, &tooLong) {
		return nil, &TooLongError{Prompt: tooLong.Prompt, Context: tooLong.Context}
	}
	if err != nil && res.Done != engine.DoneCancel {
		return nil, err
	}
	reason := string(res.Done)
	if err != nil && deadline != nil && deadline.Err() != nil && parent.Err() == nil {
		// Our own deadline_ms ran out: what was made is a partial answer,
		// not a failure.
		reason, err = "deadline", nil
	}
	d := &Done{
		Role: req.Role, Model: rm.Name, ModelCID: rm.CID, PromptTokens: res.Metrics.PromptTokens,
		Tokens: res.Metrics.GeneratedTokens, TokPerSec: res.Metrics.DecodeTPS,
		TTFTMS: ms(res.Metrics.TTFT), TotalMS: ms(time.Since(start)), Reason: reason,
		Drafted: res.Drafted, DraftAccepted: res.DraftAccepted, DraftRounds: res.DraftRounds, DraftError: res.DraftError,
	}
	if res.DraftError != "" {
		s.log.Info("moa: drafting stopped", "drafter", req.Draft.Peer, "err", res.DraftError)
	}
	if s.Status != nil {
		d.Thermal, d.Battery = s.Status()
	}
	return d, err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// handle serves one stream: a request frame, then token frames and a done
// or error frame. If the originator resets the stream, generation stops.
func (s *Server) handle(st network.Stream) {
	defer st.Close()
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(io.LimitReader(st, maxFrame+16))
	req, err := DecodeRequestWithin(r, st.Scope())
	if err != nil {
		code := CodeBadRequest
		if errors.Is(err, ErrNoMemory) {
			// Refused unread: too many large requests in flight, from this
			// peer or from all (the resource manager's limits).
			code = CodeBusy
		}
		s.log.Debug("moa: request refused", "peer", st.Conn().RemotePeer(), "err", err)
		writeFrame(st, &Reply{Type: ReplyError, Error: &WireError{Code: code, Message: err.Error()}})
		if code == CodeBusy {
			// Let the sender finish writing what it announced (at most a
			// frame, within the read deadline) so that it reads the answer;
			// discarding costs no memory.
			io.Copy(io.Discard, r)
		}
		return
	}
	st.SetReadDeadline(time.Time{})
	remote := st.Conn().RemotePeer()
	if s.Refuse != nil {
		if why := s.Refuse(); why != "" {
			writeFrame(st, &Reply{Type: ReplyError, Error: &WireError{Code: CodeBusy, Message: "not taking new work: " + why}})
			return
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if s.Rank != nil {
		ctx = engine.WithPriority(ctx, s.Rank(remote))
	}
	// The originator sends nothing more: any read result other than a clean
	// half-close means it went away.
	go func() {
		var b [1]byte
		if _, err := st.Read(b[:]); !errors.Is(err, io.EOF) {
			cancel()
		}
	}()
	release := func() {}
	if share, wait := s.peerLimit(req.Role); share > 0 {
		// Over its share a peer's request waits here for one of its own to
		// end; busy only when its line is full too.
		if err := s.inflight.acquire(ctx, remote, req.Role, share, wait); err != nil {
			if ctx.Err() != nil {
				st.Reset()
				return
			}
			writeFrame(st, &Reply{Type: ReplyError, Error: &WireError{Code: CodeBusy, Message: err.Error()}})
			return
		}
		var once sync.Once
		release = func() { once.Do(func() { s.inflight.release(remote, req.Role) }) }
		defer release()
	}
	w := bufio.NewWriter(st)
	done, err := s.Serve(ctx, req, TokenWriter(w, st.Protocol()))
	// The peer's place frees before it hears that the answer ended: its
	// next question, sent as soon as it does, finds the place free.
	release()
	if err != nil {
		if ctx.Err() != nil {
			s.log.Debug("moa: originator went away", "peer", st.Conn().RemotePeer(), "role", req.Role)
			st.Reset()
			return
		}
		code := CodeInternal
		var tl *TooLongError
		switch {
		case errors.As(err, &tl):
			writeFrame(w, &Reply{Type: ReplyError, Error: &WireError{Code: CodeTooLong, Message: err.Error(),
				PromptTokens: tl.Prompt, Context: tl.Context}})
			w.Flush()
			return
		case errors.Is(err, ErrBusy):
			code = CodeBusy
		case errors.Is(err, ErrNoRole):
			code = CodeNoRole
		case errors.Is(err, ErrBadRequest):
			code = CodeBadRequest
		}
		writeFrame(w, &Reply{Type: ReplyError, Error: &WireError{Code: code, Message: err.Error()}})
		w.Flush()
		return
	}
	writeFrame(w, &Reply{Type: ReplyDone, Done: done})
	w.Flush()
}

// TokenWriter returns how a server frames the pieces of an answer on a
// stream of protocol proto: a token frame per piece, flushed at once. The
// model's reasoning goes only to a caller whose protocol has it
// (ReasoningProtocolID): a caller of ProtocolID would refuse the frame.
func TokenWriter(w *bufio.Writer, proto protocol.ID) func(text, reasoning string) error {
	return func(text, reasoning string) error {
		if proto != ReasoningProtocolID {
			if text == "" {
				return nil
			}
			reasoning = ""
		}
		if err := writeFrame(w, &Reply{Type: ReplyToken, Text: text, Reasoning: reasoning}); err != nil {
			return err
		}
		return w.Flush()
	}
}

// peerLimit is how many requests one remote peer may have at role's
// model (0: the role is not served; the request fails on its own), and how
// many more may wait here for one of those to end.
func (s *Server) peerLimit(role string) (share, wait int) {
	s.mu.RLock()
	rm := s.roles[role]
	s.mu.RUnlock()
	if rm == nil {
		return 0, 0
	}
	o := rm.Model.Options()
	return perPeerLimit(o.Slots, o.Queue)
}

// Close stops serving and unloads the models. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.host != nil {
		s.host.RemoveStreamHandler(ProtocolID)
		s.host.RemoveStreamHandler(ReasoningProtocolID)
		s.host.RemoveStreamHandler(DraftProtocolID)
	}
	var errs []error
	for _, rm := range s.roles {
		errs = append(errs, rm.Close())
	}
	return errors.Join(errs...)
}
