package verify

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/llmswarm/llmswarm/internal/wire"
)

// ProtocolID is the challenge protocol: one challenge per stream.
const ProtocolID = "/swarm/verify/1.0.0"

// Frame types: a frame is a uvarint length (type byte + body), the type
// byte, then the body.
const (
	frameRequest  byte = 1 // binary Request, challenger to peer
	frameBoundary byte = 2 // binary: one layer's output, peer to challenger
	frameError    byte = 3 // JSON WireError, peer to challenger
)

// Limits of the protocol. A challenge is small on purpose: a few
// positions, so answering one costs a peer about one short prefill of the
// layers it claims.
const (
	// MaxTokens is the most input positions of one challenge.
	MaxTokens = 8
	// MaxHidden is the largest hidden size a request may carry.
	MaxHidden = 65536
	// MaxVocab is the largest logits vector a trace may end with.
	MaxVocab = 1 << 20
	// MaxLayers is the most layers one challenge may cover.
	MaxLayers = 4096
	// MaxTraceBytes bounds a whole trace (every boundary's floats): a
	// server refuses a challenge whose answer would be larger.
	MaxTraceBytes = 64 << 20
	maxModelLen   = 256
	maxJSON       = 4 << 10
	// requestHeader: kind, start, end, positions, hidden size, model length.
	requestHeader = 1 + 4 + 4 + 4 + 4 + 2
	// limitRequest and limitBoundary bound a frame's body by what the
	// reader expects next.
	limitRequest  = requestHeader + maxModelLen + MaxTokens*MaxHidden*4
	limitBoundary = 8 + 4*max(MaxTokens*MaxHidden, MaxVocab)
)

// Input kinds of a request.
const (
	kindTokens byte = 0 // token ids: the range starts at layer 0
	kindHidden byte = 1 // f32 hidden states: the range starts after layer 0
)

// Request asks a peer to run layers [Start,End) of the model Model (a
// CID) over a few positions chosen by the challenger: token ids when
// Start is 0, else hidden states, HiddenSize floats per position.
type Request struct {
	Model      string
	Start, End int
	Tokens     []int32
	Hidden     []float32
	HiddenSize int
}

// Positions is the number of input positions.
func (r *Request) Positions() int {
	if r.Start == 0 {
		return len(r.Tokens)
	}
	if r.HiddenSize <= 0 {
		return 0
	}
	return len(r.Hidden) / r.HiddenSize
}

// validate checks the request's shape against the protocol's limits.
func (r *Request) validate() error {
	n := r.Positions()
	switch {
	case r.Model == "" || len(r.Model) > maxModelLen:
		return fmt.Errorf("%w: model name of %d bytes", ErrBadFrame, len(r.Model))
	case r.Start < 0 || r.End <= r.Start || r.End-r.Start > MaxLayers:
		return fmt.Errorf("%w: layers [%d,%d)", ErrBadFrame, r.Start, r.End)
	case n < 1 || n > MaxTokens:
		return fmt.Errorf("%w: %d positions (1..%d)", ErrBadFrame, n, MaxTokens)
	case r.Start == 0 && (r.Hidden != nil || r.HiddenSize != 0):
		return fmt.Errorf("%w: layer 0 takes token ids, not hidden states", ErrBadFrame)
	case r.Start > 0 && (r.Tokens != nil || r.HiddenSize < 1 || r.HiddenSize > MaxHidden || len(r.Hidden) != n*r.HiddenSize):
		return fmt.Errorf("%w: layer %d takes hidden states (%d floats of %d per position)", ErrBadFrame, r.Start, len(r.Hidden), r.HiddenSize)
	}
	for _, f := range r.Hidden {
		if !finite(f) {
			return fmt.Errorf("%w: hidden state holds NaN or Inf", ErrBadFrame)
		}
	}
	return nil
}

// EncodeRequest is the body of a request frame: u8 kind (0 tokens, 1 f32
// hidden), u32 start, u32 end, u32 positions, u32 hidden size (0 for
// tokens), u16 model length, the model CID, then positions × i32 token
// ids or positions × hidden × f32; little endian.
func EncodeRequest(r *Request) []byte {
	n := r.Positions()
	b := make([]byte, 0, requestHeader+len(r.Model)+4*len(r.Tokens)+4*len(r.Hidden))
	kind := kindTokens
	if r.Start > 0 {
		kind = kindHidden
	}
	b = append(b, kind)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Start))
	b = binary.LittleEndian.AppendUint32(b, uint32(r.End))
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	b = binary.LittleEndian.AppendUint32(b, uint32(r.HiddenSize))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Model)))
	b = append(b, r.Model...)
	for _, t := range r.Tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	for _, f := range r.Hidden {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

// DecodeRequest parses a request frame's body and checks it against the
// protocol's limits.
func DecodeRequest(body []byte) (*Request, error) {
	if len(body) < requestHeader {
		return nil, fmt.Errorf("%w: request of %d bytes", ErrBadFrame, len(body))
	}
	kind := body[0]
	a := binary.LittleEndian.Uint32(body[1:])
	e := binary.LittleEndian.Uint32(body[5:])
	n := binary.LittleEndian.Uint32(body[9:])
	hs := binary.LittleEndian.Uint32(body[13:])
	ml := int(binary.LittleEndian.Uint16(body[17:]))
	rest := body[requestHeader:]
	if kind != kindTokens && kind != kindHidden {
		return nil, fmt.Errorf("%w: input kind %d", ErrBadFrame, kind)
	}
	if a > MaxLayers*2 || e > MaxLayers*2 || n == 0 || n > MaxTokens || hs > MaxHidden || ml == 0 || ml > maxModelLen || len(rest) < ml {
		return nil, fmt.Errorf("%w: request header (layers [%d,%d), %d positions, hidden %d, model of %d bytes)", ErrBadFrame, a, e, n, hs, ml)
	}
	r := &Request{Model: string(rest[:ml]), Start: int(a), End: int(e), HiddenSize: int(hs)}
	rest = rest[ml:]
	if (kind == kindTokens) != (a == 0) {
		return nil, fmt.Errorf("%w: input kind %d for layers from %d", ErrBadFrame, kind, a)
	}
	if kind == kindTokens {
		if hs != 0 || len(rest) != 4*int(n) {
			return nil, fmt.Errorf("%w: %d bytes of token ids for %d positions", ErrBadFrame, len(rest), n)
		}
		r.Tokens = make([]int32, n)
		for i := range r.Tokens {
			r.Tokens[i] = int32(binary.LittleEndian.Uint32(rest[4*i:]))
		}
	} else {
		if hs == 0 || len(rest) != 4*int(n)*int(hs) {
			return nil, fmt.Errorf("%w: %d bytes of hidden state for %d positions of %d", ErrBadFrame, len(rest), n, hs)
		}
		r.Hidden = make([]float32, int(n)*int(hs))
		for i := range r.Hidden {
			r.Hidden[i] = math.Float32frombits(binary.LittleEndian.Uint32(rest[4*i:]))
		}
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// EncodeBoundary is the body of a boundary frame: u32 layer (whose
// output this is), u32 count, count × f32.
func EncodeBoundary(layer int, v []float32) []byte {
	b := make([]byte, 0, 8+4*len(v))
	b = binary.LittleEndian.AppendUint32(b, uint32(layer))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

// DecodeBoundary parses a boundary frame's body. Its values are returned
// as sent: NaN and Inf included (the checker judges them).
func DecodeBoundary(body []byte) (layer int, v []float32, err error) {
	if len(body) < 8 {
		return 0, nil, fmt.Errorf("%w: boundary of %d bytes", ErrBadFrame, len(body))
	}
	l := binary.LittleEndian.Uint32(body)
	n := binary.LittleEndian.Uint32(body[4:])
	if l >= MaxLayers*2 || uint64(len(body)-8) != 4*uint64(n) {
		return 0, nil, fmt.Errorf("%w: boundary of layer %d with %d floats in %d bytes", ErrBadFrame, l, n, len(body)-8)
	}
	v = make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(body[8+4*i:]))
	}
	return int(l), v, nil
}

// WireError is a peer's refusal of a challenge.
type WireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *WireError) Error() string {
	return "verify: peer refused the challenge: " + e.Code + ": " + e.Message
}

// Refusal codes.
const (
	CodeBadRequest  = "bad_request"  // a malformed request, or one that does not fit the model
	CodeNotHeld     = "not_held"     // the peer does not hold those layers of that model
	CodeBusy        = "busy"         // no session free, or too many challenges at once
	CodeRateLimited = "rate_limited" // the asking peer challenged too often
	CodeTooLarge    = "too_large"    // the trace would exceed MaxTraceBytes
	CodeInternal    = "internal"     // the engine failed
)

// WriteRequest writes a request frame.
func WriteRequest(w io.Writer, r *Request) error {
	return writeFrame(w, frameRequest, EncodeRequest(r))
}

// WriteBoundary writes layer's output as a boundary frame.
func WriteBoundary(w io.Writer, layer int, v []float32) error {
	return writeFrame(w, frameBoundary, EncodeBoundary(layer, v))
}

// WriteError writes a refusal frame.
func WriteError(w io.Writer, code, msg string) error {
	if len(msg) > maxJSON-64 {
		msg = msg[:maxJSON-64]
	}
	return frames.WriteJSON(w, frameError, &WireError{Code: code, Message: msg}, wire.NoLimit)
}

// ReadRequest reads a request frame.
func ReadRequest(r *bufio.Reader) (*Request, error) {
	typ, body, err := readFrame(r, limitRequest)
	if err != nil {
		return nil, err
	}
	if typ != frameRequest {
		return nil, fmt.Errorf("%w: expected a request frame, got type %d", ErrBadFrame, typ)
	}
	return DecodeRequest(body)
}

// frames is the challenge protocol's framing: a uvarint length, a type
// byte, then a binary body, or for an error a strict JSON one of at most
// maxJSON bytes.
var frames = &wire.Codec{Err: ErrBadFrame, Types: []uint64{
	frameRequest: wire.NoLimit, frameBoundary: wire.NoLimit, frameError: maxJSON + 1,
}}

func writeFrame(w io.Writer, typ byte, body []byte) error { return frames.Write(w, typ, body) }

// frameSize is the bytes on the wire of a frame with a body of n bytes.
func frameSize(n int) int64 { return int64(frames.Size(n)) }

// readFrame reads one frame whose body is at most limit bytes. The body
// is read as it arrives, so a peer that declares a large frame and sends
// nothing costs no memory. Every read of this protocol is owed a frame: a
// stream that ends before it is io.ErrUnexpectedEOF.
func readFrame(r *bufio.Reader, limit int) (byte, []byte, error) {
	typ, body, err := frames.Read(r, uint64(limit)+1, nil)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return typ, body, err
}

// decodeError parses an error frame strictly.
func decodeError(body []byte) (*WireError, error) {
	var we WireError
	if err := frames.DecodeJSON(body, &we); err != nil {
		return nil, err
	}
	if we.Code == "" {
		return nil, fmt.Errorf("%w: error frame without a code", ErrBadFrame)
	}
	return &we, nil
}

func finite(f float32) bool { return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) }
