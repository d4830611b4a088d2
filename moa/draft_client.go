package moa

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/ledger"
)

// DefaultDraftTimeout bounds one round trip of a draft session: a drafter
// slower than that is no help, and one that hangs is dropped.
const DefaultDraftTimeout = 5 * time.Second

// RemoteDraft is a draft session on another peer's drafter: an
// engine.SpecModel and engine.Proposer proposing a round per round trip.
// It is not safe for concurrent use.
type RemoteDraft struct {
	st      network.Stream
	r       *bufio.Reader
	pos     int // positions the drafter holds
	vocab   int
	ctxLen  int // the drafter's context
	timeout time.Duration
	err     error // the session's first failure: it is not used again
	work    int64 // positions the drafter ran for this session and tokens it proposed
}

// DialDraft opens a draft session on p for a verifier whose tokenizer has
// the given fingerprint and size; timeout bounds each round trip (0:
// DefaultDraftTimeout).
func DialDraft(ctx context.Context, h host.Host, p peer.AddrInfo, open DraftOpen, vocabSize int, timeout time.Duration) (*RemoteDraft, error) {
	if timeout <= 0 {
		timeout = DefaultDraftTimeout
	}
	if len(p.Addrs) > 0 && len(h.Peerstore().Addrs(p.ID)) == 0 {
		// Addresses a requester gave are tried only for a peer this one
		// knows no address of.
		h.Peerstore().AddAddrs(p.ID, p.Addrs, peerstore.TempAddrTTL)
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := h.NewStream(network.WithAllowLimitedConn(dctx, DraftProtocolID), p.ID, DraftProtocolID)
	if err != nil {
		// What the dial met stays here: the answer's requester learns only
		// that the drafter was not reached.
		return nil, &unreachableError{err}
	}
	d := &RemoteDraft{st: st, r: bufio.NewReader(st), vocab: vocabSize, timeout: timeout}
	rep, err := d.roundTrip(dctx, &open, 0)
	if err != nil {
		return nil, err
	}
	switch {
	case rep.Vocab != open.Vocab:
		err = fmt.Errorf("moa: the drafter's tokenizer is %s, not %s", trunc(rep.Vocab), open.Vocab)
	case rep.VocabSize != vocabSize:
		err = fmt.Errorf("moa: the drafter has %d tokens, not %d", rep.VocabSize, vocabSize)
	case len(rep.Tokens) > 0:
		err = fmt.Errorf("%w: tokens in the drafter's answer to an open", ErrProtocol)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	d.ctxLen = rep.Context
	return d, nil
}

// unreachableError is a drafter the dial did not reach; its message does
// not say what the dial met.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return "moa: the drafter could not be reached" }
func (e *unreachableError) Unwrap() error { return e.err }

// tokenTime is how much longer a round trip may take for each token the
// drafter runs (the prompt, or what it has not seen yet).
const tokenTime = 20 * time.Millisecond

// roundTrip sends v and reads the reply, within the timeout (longer by
// tokenTime for each of ntok tokens to run) and ctx.
func (d *RemoteDraft) roundTrip(ctx context.Context, v any, ntok int) (*DraftReply, error) {
	if d.err != nil {
		return nil, d.err
	}
	stop := context.AfterFunc(ctx, func() { d.st.Reset() })
	defer stop()
	d.st.SetDeadline(time.Now().Add(d.timeout + time.Duration(ntok)*tokenTime))
	var rep DraftReply
	err := writeFrame(d.st, v)
	if err == nil {
		err = readFrame(d.r, &rep, d.st.Scope(), network.ReservationPriorityHigh)
	}
	if err == nil && rep.Error != nil {
		err = fmt.Errorf("moa: drafter: %w", remoteError(rep.Error))
	}
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		d.err = err
		d.st.Reset()
		return nil, err
	}
	return &rep, nil
}

// Propose implements engine.Proposer: one round trip.
func (d *RemoteDraft) Propose(ctx context.Context, tokens []int32, n int) ([]int32, []engine.Dist, error) {
	if d.pos+len(tokens) > d.ctxLen-1 {
		return nil, nil, engine.ErrContextFull // no room to propose: the verifier goes on alone
	}
	rep, err := d.roundTrip(ctx, &DraftStep{Keep: d.pos, Tokens: tokens, N: n}, len(tokens))
	if err != nil {
		return nil, nil, err
	}
	if len(rep.Tokens) > n {
		d.err = fmt.Errorf("%w: %d proposals for %d asked", ErrProtocol, len(rep.Tokens), n)
		return nil, nil, d.err
	}
	for _, t := range rep.Tokens {
		if t < 0 || int(t) >= d.vocab {
			d.err = fmt.Errorf("%w: proposal %d outside the vocabulary of %d", ErrProtocol, t, d.vocab)
			return nil, nil, d.err
		}
	}
	if len(rep.Tokens) == 0 {
		d.err = fmt.Errorf("%w: no proposals", ErrProtocol)
		return nil, nil, d.err
	}
	d.pos += len(tokens) + len(rep.Tokens) - 1
	d.work += int64(len(tokens) + len(rep.Tokens))
	return rep.Tokens, nil, nil
}

// Acknowledge gives ack (when set) the item of the work the drafter did
// for this session: the positions it ran and the tokens it proposed, as
// received here. Once, when the session closes.
func (d *RemoteDraft) Acknowledge(ack func(server peer.ID, it ledger.Item)) {
	if ack != nil && d.work > 0 {
		ack(d.st.Conn().RemotePeer(), ledger.Item{Kind: ledger.KindDraft, Tokens: d.work})
	}
	d.work = 0
}

// Pos implements engine.SpecModel.
func (d *RemoteDraft) Pos() int { return d.pos }

// Truncate implements engine.SpecModel; the drafter learns it with the
// next step.
func (d *RemoteDraft) Truncate(n int) error {
	if n < 0 || n > d.pos {
		return fmt.Errorf("moa: truncating a draft of %d positions to %d", d.pos, n)
	}
	d.pos = n
	return nil
}

// Prefill implements engine.SpecModel: one proposal.
func (d *RemoteDraft) Prefill(ctx context.Context, tokens []int32) (int32, engine.Dist, error) {
	props, _, err := d.Propose(ctx, tokens, 1)
	if err != nil {
		return -1, engine.Dist{}, err
	}
	return props[0], engine.Dist{}, nil
}

// Next implements engine.SpecModel: a draft verifies nothing.
func (d *RemoteDraft) Next(context.Context, []int32, []engine.Dist) ([]int32, error) {
	return nil, errors.New("moa: a remote draft does not verify")
}

// Close ends the session.
func (d *RemoteDraft) Close() error { return d.st.Close() }

var (
	_ engine.SpecModel = (*RemoteDraft)(nil)
	_ engine.Proposer  = (*RemoteDraft)(nil)
)

// LocalDraft opens a draft session on this peer's own drafter for a
// verifier whose tokenizer has the fingerprint vocab: greedy proposals,
// with the verifier's repetition penalty.
func (s *Server) LocalDraft(vocab string, penalty float32) (engine.SpecModel, func(), error) {
	d, _, closeDraft, err := s.draftSession(vocab, penalty)
	return d, closeDraft, err
}

// errVocab is a draft session refused between different tokenizers.
var errVocab = errors.New("moa: another tokenizer")

// draftSession opens a session on this peer's drafter for a verifier
// whose tokenizer has the fingerprint vocab (a local answer's, or a
// remote one's over DraftProtocolID), counted as a request of the role
// until closed. ErrNoRole: no drafter; errVocab: another tokenizer;
// ErrBusy: no free slot.
func (s *Server) draftSession(vocab string, penalty float32) (engine.SpecModel, *RoleModel, func(), error) {
	s.mu.RLock()
	dr := s.roles[Drafter]
	if dr != nil && !s.closed {
		dr.active.Add(1) // under the lock, as Serve counts: Remove waits for it
	} else {
		dr = nil
	}
	s.mu.RUnlock()
	if dr == nil {
		return nil, nil, nil, fmt.Errorf("%w: no drafter here", ErrNoRole)
	}
	if fp := dr.Model.Tokenizer().Fingerprint(); fp != vocab {
		dr.active.Add(-1)
		return nil, nil, nil, fmt.Errorf("%w: this drafter's tokenizer is %s, not %s", errVocab, fp, trunc(vocab))
	}
	sess, err := dr.Model.NewSession()
	if err != nil {
		dr.active.Add(-1)
		return nil, nil, nil, fmt.Errorf("%w: %v", ErrBusy, err)
	}
	return engine.SessionDraft(sess, engine.SamplerOptions{RepeatPenalty: penalty}), dr, func() {
		sess.Close()
		dr.active.Add(-1)
	}, nil
}

// draft opens the draft of a request answered by rm: a session on the
// named peer's drafter, or on this peer's own.
func (s *Server) draft(ctx context.Context, dp *DraftPeer, rm *RoleModel, penalty float32) (engine.SpecModel, func(), error) {
	ai, err := dp.validate()
	if err != nil {
		return nil, nil, err
	}
	tok := rm.Model.Tokenizer()
	if s.host == nil || ai.ID == s.host.ID() {
		return s.LocalDraft(tok.Fingerprint(), penalty)
	}
	d, err := DialDraft(ctx, s.host, ai, DraftOpen{Vocab: tok.Fingerprint(), RepeatPenalty: penalty}, tok.VocabSize(), s.DraftTimeout)
	if err != nil {
		var ue *unreachableError
		if errors.As(err, &ue) {
			s.log.Info("moa: drafter not reached", "drafter", ai.ID, "err", ue.err)
		}
		return nil, nil, err
	}
	return d, func() { d.Close(); d.Acknowledge(s.Acknowledge) }, nil
}
