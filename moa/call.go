package moa

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// maxReplyBytes bounds the text one agent may send back (8192 tokens of
// long pieces fit; a peer streaming garbage until the deadline does not).
const maxReplyBytes = 4 << 20

// Call asks peer p to answer req, calling onToken with each piece of the
// answer's text and of the model's reasoning, apart, as they arrive (a
// peer that speaks only ProtocolID sends no reasoning). Ending ctx resets
// the stream, which stops the peer's generation.
func Call(ctx context.Context, h host.Host, p peer.ID, req *Request, onToken func(text, reasoning string)) (*Done, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	st, err := h.NewStream(network.WithAllowLimitedConn(ctx, ProtocolID), p, ReasoningProtocolID, ProtocolID)
	if err != nil {
		return nil, fmt.Errorf("moa: opening stream: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { st.Reset() })
	defer stop()
	if err := writeFrame(st, req); err != nil {
		st.Reset()
		return nil, ctxErr(ctx, fmt.Errorf("moa: sending request: %w", err))
	}
	if err := st.CloseWrite(); err != nil {
		st.Reset()
		return nil, ctxErr(ctx, err)
	}
	r := bufio.NewReader(st)
	received := 0
	for {
		rep, err := DecodeReplyWithin(r, st.Scope())
		if err != nil {
			st.Reset()
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: stream ended before done", ErrProtocol)
			}
			return nil, ctxErr(ctx, err)
		}
		switch rep.Type {
		case ReplyToken:
			if rep.Reasoning != "" && st.Protocol() != ReasoningProtocolID {
				st.Reset()
				return nil, fmt.Errorf("%w: reasoning on %s", ErrProtocol, st.Protocol())
			}
			if received += len(rep.Text) + len(rep.Reasoning); received > maxReplyBytes {
				st.Reset()
				return nil, fmt.Errorf("%w: reply longer than %d bytes", ErrProtocol, maxReplyBytes)
			}
			if onToken != nil {
				onToken(rep.Text, rep.Reasoning)
			}
		case ReplyDone:
			st.Close()
			return rep.Done, nil
		case ReplyError:
			st.Close()
			return nil, remoteError(rep.Error)
		}
	}
}

// ctxErr prefers the context's error: a reset we caused is a timeout or a
// cancellation, not a protocol failure.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// remoteError is a peer's refusal as this peer's error. The peer's
// message may start with the sentinel's own words (its server wrote its
// error whole): they are said once.
func remoteError(e *WireError) error {
	wrap := func(sentinel error) error {
		return fmt.Errorf("%w: %s", sentinel, strings.TrimPrefix(e.Message, sentinel.Error()+": "))
	}
	switch e.Code {
	case CodeBusy:
		return wrap(ErrBusy)
	case CodeNoRole:
		return wrap(ErrNoRole)
	case CodeBadRequest:
		return wrap(ErrBadRequest)
	case CodeTooLong:
		return &TooLongError{Prompt: e.PromptTokens, Context: e.Context}
	}
	return fmt.Errorf("moa: remote error %s: %s", e.Code, e.Message)
}
