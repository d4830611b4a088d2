package moa

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/internal/wire"
)

// ProtocolID is the MoA stream protocol: one request frame from the
// originator, then token frames and one final done or error frame.
const ProtocolID = "/swarm/moa/1.0.0"

// ReasoningProtocolID is ProtocolID whose token frames may also carry the
// model's reasoning (Reply.Reasoning), apart from the answer's text. The
// frames are strictly decoded, so a field an old peer does not know would
// fail its stream: a server answers both versions and sends reasoning only
// on this one; a caller offers this one first, and a server that has only
// ProtocolID answers there without reasoning.
const ReasoningProtocolID = "/swarm/moa/1.1.0"

// Wire limits.
const (
	maxFrame     = 1 << 20 // one frame, bytes
	maxMessages  = 64
	maxTextBytes = 512 << 10 // all message contents together
	maxGenTokens = 8192
	maxDeadline  = 10 * time.Minute
)

// Message is one chat turn.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request asks a peer to answer as one role.
type Request struct {
	Role     string    `json:"role"`
	Messages []Message `json:"messages"` // the role's system prompt is prepended by the server
	// Prompt, instead of Messages, asks for a raw completion: the model
	// continues this text as it is, with no chat template and no role
	// prompt (a base model answers only so).
	Prompt     string          `json:"prompt,omitempty"`
	Sampling   engine.Sampling `json:"sampling"`
	MaxTokens  int             `json:"max_tokens,omitempty"`
	DeadlineMS int64           `json:"deadline_ms,omitempty"` // budget from receipt; 0: none
	Think      *bool           `json:"think,omitempty"`
	// Draft asks the answering peer to have this peer's drafter draft
	// its answer (speculative speed mode, see draft.go).
	Draft *DraftPeer `json:"draft,omitempty"`
}

// Validate checks a request against the wire limits.
func (r *Request) Validate() error {
	if !IsRole(r.Role) {
		return fmt.Errorf("%w: unknown role %q", ErrBadRequest, trunc(r.Role))
	}
	total := len(r.Prompt)
	switch {
	case r.Prompt != "" && len(r.Messages) > 0:
		return fmt.Errorf("%w: a prompt and %d messages (want one or the other)", ErrBadRequest, len(r.Messages))
	case r.Prompt == "" && (len(r.Messages) == 0 || len(r.Messages) > maxMessages):
		return fmt.Errorf("%w: %d messages (want 1..%d)", ErrBadRequest, len(r.Messages), maxMessages)
	}
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return fmt.Errorf("%w: messages[%d].role %q", ErrBadRequest, i, trunc(m.Role))
		}
		total += len(m.Content)
	}
	if total > maxTextBytes {
		return fmt.Errorf("%w: %d bytes of prompt and message text (max %d)", ErrBadRequest, total, maxTextBytes)
	}
	if r.MaxTokens < 0 || r.MaxTokens > maxGenTokens {
		return fmt.Errorf("%w: max_tokens %d (want 0..%d)", ErrBadRequest, r.MaxTokens, maxGenTokens)
	}
	if r.DeadlineMS < 0 || time.Duration(r.DeadlineMS)*time.Millisecond > maxDeadline {
		return fmt.Errorf("%w: deadline_ms %d", ErrBadRequest, r.DeadlineMS)
	}
	if r.Draft != nil {
		if _, err := r.Draft.validate(); err != nil {
			return err
		}
	}
	s := r.Sampling
	if s.Temperature < 0 || s.Temperature > 5 || s.TopK < 0 || s.TopP < 0 || s.TopP > 1 || s.MinP < 0 || s.MinP > 1 ||
		s.RepeatPenalty < 0 || s.RepeatPenalty > 10 {
		return fmt.Errorf("%w: sampling options out of range", ErrBadRequest)
	}
	return nil
}

// Reply frame types.
const (
	ReplyToken = "token"
	ReplyDone  = "done"
	ReplyError = "error"
)

// Reply is one frame from the serving peer.
type Reply struct {
	Type  string     `json:"type"`
	Text  string     `json:"text,omitempty"`
	Done  *Done      `json:"done,omitempty"`
	Error *WireError `json:"error,omitempty"`
	// Reasoning, on a token frame of ReasoningProtocolID only, is the
	// model's reasoning written with this token (GPT-OSS's analysis
	// channel), never part of the answer's Text.
	Reasoning string `json:"reasoning,omitempty"`
}

// Done closes a successful reply with the generation's metrics.
type Done struct {
	Role         string  `json:"role"`
	Model        string  `json:"model"`
	ModelCID     string  `json:"model_cid"`
	PromptTokens int     `json:"prompt_tokens"`
	Tokens       int     `json:"tokens"`
	TokPerSec    float64 `json:"tok_s"`
	TTFTMS       float64 `json:"ttft_ms"`
	TotalMS      float64 `json:"total_ms"`
	Reason       string  `json:"reason"` // stop, length, cancel, deadline (cut off by deadline_ms: a partial answer)
	Thermal      string  `json:"thermal,omitempty"`
	Battery      int     `json:"battery,omitempty"` // percent; 0: unknown
	// With a draft: tokens proposed, of them accepted, verify steps, and
	// why drafting did not start or stopped ("": it did not).
	Drafted       int    `json:"drafted,omitempty"`
	DraftAccepted int    `json:"draft_accepted,omitempty"`
	DraftRounds   int    `json:"draft_rounds,omitempty"`
	DraftError    string `json:"draft_error,omitempty"`
}

// Error codes on the wire.
const (
	CodeBusy       = "busy"
	CodeBadRequest = "bad_request"
	CodeNoRole     = "no_role"
	CodeInternal   = "internal"
	CodeTooLong    = "too_long" // the prompt does not fit the model's context
)

// WireError is an error frame.
type WireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// With too_long: the prompt's tokens and the model's context.
	PromptTokens int `json:"prompt_tokens,omitempty"`
	Context      int `json:"context,omitempty"`
}

func (r *Reply) validate() error {
	switch r.Type {
	case ReplyToken:
		if r.Done != nil || r.Error != nil {
			return fmt.Errorf("%w: token frame with done or error", ErrProtocol)
		}
		return nil
	case ReplyDone:
		if r.Done == nil {
			return fmt.Errorf("%w: done frame without metrics", ErrProtocol)
		}
	case ReplyError:
		if r.Error == nil || r.Error.Code == "" {
			return fmt.Errorf("%w: error frame without code", ErrProtocol)
		}
	default:
		return fmt.Errorf("%w: unknown frame type %q", ErrProtocol, trunc(r.Type))
	}
	if r.Reasoning != "" {
		return fmt.Errorf("%w: %s frame with reasoning", ErrProtocol, r.Type)
	}
	return nil
}

// frames is the MoA and draft protocols' framing: a uvarint length, then
// one strict JSON value, at most maxFrame bytes.
var frames = &wire.Codec{Err: ErrProtocol}

// writeFrame writes v as one frame.
func writeFrame(w io.Writer, v any) error { return frames.WriteJSON(w, 0, v, maxFrame) }

// Budget is where the memory a frame takes is reserved before it is
// read: a stream's resource scope (network.Stream.Scope()), so that every
// frame buffer counts against the resource manager's limits for the
// protocol, the peer and the process.
type Budget interface {
	ReserveMemory(size int, prio uint8) error
	ReleaseMemory(size int)
}

// ErrNoMemory is a frame refused because the resource manager's budget
// for it is used up (too many large frames in flight, from that peer or
// from all of them).
var ErrNoMemory = errors.New("moa: no memory budget left for the frame")

// smallFrame is the size up to which a frame is reserved at high priority.
const smallFrame = 64 << 10

// frameCost is what a frame of n bytes is reserved for: its bytes and
// what decoding them allocates.
func frameCost(n int) int { return 2 * n }

// readFrame reads one frame into v, strictly (unknown fields are errors).
// With a budget, the frame's memory is reserved at prio as its bytes
// arrive (twice what the buffer holds, for decoding), and released once it
// is decoded; a frame the budget cannot hold is refused with ErrNoMemory
// and not read further. A peer that announces large frames and sends
// little (a slow loris) holds only what it sent.
func readFrame(r *bufio.Reader, v any, budget Budget, prio uint8) error {
	held := 0
	defer func() {
		if held > 0 {
			budget.ReleaseMemory(held)
		}
	}()
	var reserve func(n, size int) error
	if budget != nil {
		reserve = func(n, size int) error {
			more := frameCost(size) - held
			if more <= 0 {
				return nil
			}
			p := prio
			if n <= smallFrame {
				// Ordinary requests and tokens keep the budget's top share, which
				// large frames (an attacker's, or a huge prompt) cannot take.
				p = max(prio, network.ReservationPriorityHigh)
			}
			if err := budget.ReserveMemory(more, p); err != nil {
				return fmt.Errorf("%w: a frame of %d bytes: %v", ErrNoMemory, n, err)
			}
			held += more
			return nil
		}
	}
	_, b, err := frames.Read(r, maxFrame, reserve)
	if err == nil {
		err = frames.DecodeJSON(b, v)
	}
	if err == nil || err == io.EOF || errors.Is(err, ErrProtocol) || errors.Is(err, ErrNoMemory) {
		return err
	}
	// A frame cut short, or a read that failed, is a protocol error here
	// too: MoA has no use for telling a cut stream from a broken peer.
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated frame: %w", ErrProtocol, err)
	}
	return fmt.Errorf("%w: reading a frame: %w", ErrProtocol, err)
}

// DecodeRequest reads and validates a request frame.
func DecodeRequest(r *bufio.Reader) (*Request, error) { return DecodeRequestWithin(r, nil) }

// DecodeRequestWithin is DecodeRequest with the frame's memory reserved
// from budget (a server's incoming stream) first.
func DecodeRequestWithin(r *bufio.Reader, budget Budget) (*Request, error) {
	var req Request
	if err := readFrame(r, &req, budget, network.ReservationPriorityMedium); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return &req, nil
}

// DecodeReply reads and validates a reply frame.
func DecodeReply(r *bufio.Reader) (*Reply, error) { return DecodeReplyWithin(r, nil) }

// DecodeReplyWithin is DecodeReply with the frame's memory reserved from
// budget (the originator's stream) first; an answer to this peer's own
// request gets a higher priority than a stranger's request.
func DecodeReplyWithin(r *bufio.Reader, budget Budget) (*Reply, error) {
	var rep Reply
	if err := readFrame(r, &rep, budget, network.ReservationPriorityHigh); err != nil {
		return nil, err
	}
	if err := rep.validate(); err != nil {
		return nil, err
	}
	return &rep, nil
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
