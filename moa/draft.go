package moa

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// Speculative speed mode. The originator asks a reasoner to answer with a
// drafter's help (Request.Draft); the reasoner opens a draft session on
// the drafter's peer (DraftProtocolID) and, for each round, sends the
// tokens accepted since the last and asks for k proposals, which it
// verifies in one step of its own model (engine.Generate with a draft).
// The answer is the reasoner's own, token for token when greedy, and
// follows its distribution when sampling: the drafter's proposals are
// taken as certain to it (its distribution is never trusted), so a lying
// drafter costs speed, not correctness. The two models must share a
// tokenizer: the session opens only when their fingerprints match.

// DraftProtocolID is the draft session protocol: a DraftOpen frame, a
// DraftReply, then DraftStep and DraftReply frames in turn.
const DraftProtocolID = "/swarm/draft/1.0.0"

// Draft session limits.
const (
	draftOpenTimeout = 10 * time.Second
	draftIdle        = 30 * time.Second // between steps
	maxDraftAddrs    = 16
)

// DraftPeer names the peer whose drafter drafts a request's answer.
type DraftPeer struct {
	Peer  string   `json:"peer"`
	Addrs []string `json:"addrs,omitempty"` // where to reach it, if the reasoner does not know
}

func (d *DraftPeer) validate() (peer.AddrInfo, error) {
	id, err := peer.Decode(d.Peer)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("%w: draft.peer %q: %v", ErrBadRequest, trunc(d.Peer), err)
	}
	if len(d.Addrs) > maxDraftAddrs {
		return peer.AddrInfo{}, fmt.Errorf("%w: %d draft addresses (max %d)", ErrBadRequest, len(d.Addrs), maxDraftAddrs)
	}
	ai := peer.AddrInfo{ID: id}
	for _, s := range d.Addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return peer.AddrInfo{}, fmt.Errorf("%w: draft address %q: %v", ErrBadRequest, trunc(s), err)
		}
		ai.Addrs = append(ai.Addrs, a)
	}
	return ai, nil
}

// DraftOpen starts a draft session on a peer serving the drafter role.
type DraftOpen struct {
	// Vocab is the verifier's tokenizer fingerprint; a drafter with
	// another refuses the session.
	Vocab string `json:"vocab"`
	// RepeatPenalty is applied to the drafter's greedy proposals as the
	// verifier applies it (0 or 1: off).
	RepeatPenalty float32 `json:"repeat_penalty,omitempty"`
}

// DraftStep asks the drafter to keep its first Keep positions, run Tokens
// after them and propose N tokens.
type DraftStep struct {
	Keep   int     `json:"keep"`
	Tokens []int32 `json:"tokens"`
	N      int     `json:"n"`
}

// DraftReply answers an open (the drafter's fingerprint, vocabulary size
// and context) or a step (the proposals: fewer than asked where its
// context ends, none when full), or says why not.
type DraftReply struct {
	Vocab     string     `json:"vocab,omitempty"`
	VocabSize int        `json:"vocab_size,omitempty"`
	Context   int        `json:"context,omitempty"`
	Tokens    []int32    `json:"tokens,omitempty"`
	Error     *WireError `json:"error,omitempty"`
}

// CodeVocab refuses a draft session between different tokenizers.
const CodeVocab = "vocab"

// handleDraft serves one draft session with this peer's drafter model.
func (s *Server) handleDraft(st network.Stream) {
	defer st.Close()
	fail := func(code, msg string) {
		writeFrame(st, &DraftReply{Error: &WireError{Code: code, Message: msg}})
	}
	st.SetReadDeadline(time.Now().Add(draftOpenTimeout))
	r := bufio.NewReader(st)
	var open DraftOpen
	if err := readFrame(r, &open, st.Scope(), network.ReservationPriorityMedium); err != nil {
		fail(CodeBadRequest, err.Error())
		return
	}
	if s.Refuse != nil {
		if why := s.Refuse(); why != "" {
			fail(CodeBusy, "not taking new work: "+why)
			return
		}
	}
	if p := open.RepeatPenalty; p < 0 || p > 10 {
		fail(CodeBadRequest, fmt.Sprintf("repeat_penalty %g", p))
		return
	}
	remote := st.Conn().RemotePeer()
	if share, _ := s.peerLimit(Drafter); share > 0 { // none: no drafter, said below
		// A drafter is an aid, not an answer: over its share a peer is
		// refused at once (its answer goes on undrafted), never queued.
		if err := s.inflight.acquire(context.Background(), remote, Drafter, share, 0); err != nil {
			fail(CodeBusy, err.Error())
			return
		}
		defer s.inflight.release(remote, Drafter)
	}
	d, rm, closeDraft, err := s.draftSession(open.Vocab, open.RepeatPenalty)
	switch {
	case errors.Is(err, ErrNoRole):
		fail(CodeNoRole, err.Error())
		return
	case errors.Is(err, errVocab):
		fail(CodeVocab, err.Error())
		return
	case err != nil:
		fail(CodeBusy, err.Error())
		return
	}
	defer closeDraft()
	tok := rm.Model.Tokenizer()
	ctxLen := rm.Model.Options().Context
	if err := writeFrame(st, &DraftReply{Vocab: tok.Fingerprint(), VocabSize: tok.VocabSize(), Context: ctxLen}); err != nil {
		return
	}
	// A session lives as long as the longest answer may: a peer cannot
	// keep the slot past that, however it paces its steps.
	ctx, cancel := context.WithTimeout(context.Background(), maxDeadline)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { st.Reset() })
	defer stop()
	for {
		st.SetReadDeadline(time.Now().Add(draftIdle))
		var step DraftStep
		if err := readFrame(r, &step, st.Scope(), network.ReservationPriorityMedium); err != nil {
			if !errors.Is(err, io.EOF) {
				s.log.Debug("moa: draft session ended", "peer", remote, "err", err)
			}
			return
		}
		props, err := draftStep(ctx, d, &step, tok.VocabSize(), ctxLen)
		if err != nil {
			fail(CodeBadRequest, err.Error())
			return
		}
		if err := writeFrame(st, &DraftReply{Tokens: props}); err != nil {
			return
		}
	}
}

// draftStep runs one step of a draft session.
func draftStep(ctx context.Context, d engine.SpecModel, step *DraftStep, vocab, ctxLen int) ([]int32, error) {
	if step.N < 1 || step.N > engine.MaxSpecK {
		return nil, fmt.Errorf("%w: n %d (1..%d)", ErrBadRequest, step.N, engine.MaxSpecK)
	}
	if step.Keep < 0 || step.Keep > d.Pos() {
		return nil, fmt.Errorf("%w: keep %d of the %d positions held", ErrBadRequest, step.Keep, d.Pos())
	}
	if len(step.Tokens) == 0 || step.Keep+len(step.Tokens) > ctxLen {
		return nil, fmt.Errorf("%w: %d tokens after %d positions (context %d)", ErrBadRequest, len(step.Tokens), step.Keep, ctxLen)
	}
	for _, t := range step.Tokens {
		if t < 0 || int(t) >= vocab {
			return nil, fmt.Errorf("%w: token %d outside the vocabulary of %d", ErrBadRequest, t, vocab)
		}
	}
	if err := d.Truncate(step.Keep); err != nil {
		return nil, err
	}
	var props []int32
	in := step.Tokens
	for len(props) < step.N {
		t, _, err := d.Prefill(ctx, in)
		if errors.Is(err, engine.ErrContextFull) {
			break
		}
		if err != nil {
			return nil, err
		}
		props = append(props, t)
		in = []int32{t}
	}
	return props, nil
}
