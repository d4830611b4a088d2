package pipeline

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/internal/wire"
)

// ProtocolID is the stage protocol.
const ProtocolID = "/swarm/stage/1.0.0"

// Frame types.
const (
	frameOpen   byte = 1 // JSON Open
	frameOpened byte = 2 // JSON Opened
	frameStep   byte = 3 // binary Step
	frameResult byte = 4 // binary Result
	frameError  byte = 5 // JSON WireError
	frameReplay byte = 6 // binary Step run in given batches (a replay after a failover)
	// frameVerify is a binary Step whose result carries the token after
	// every position, not the last only: a speculative step verifying a
	// draft (greedy sessions only).
	frameVerify byte = 7
	// framePart is a binary Step that more of the same prompt follows: a
	// stage runs it, passes it on as a part and answers nothing; the step
	// after the last part carries the prompt's result back (prefill
	// pipelined across the stages, see prefill.go). Only on a session
	// opened with Open.Parts.
	framePart byte = 8
)

// Hidden-state encodings on the wire.
const (
	DTypeF16 = "f16"
	DTypeF32 = "f32"
)

// Limits.
const (
	maxJSONFrame = 64 << 10
	maxFrame     = 256 << 20 // a long prompt's hidden states: 8k tokens x 8k hidden x f32
	maxRouteHops = 64
	maxStepToks  = 32768
	maxVocab     = 1 << 20
)

// RouteHop is one stage of a route as carried in Open.
type RouteHop struct {
	Peer  string   `json:"peer"`
	Addrs []string `json:"addrs,omitempty"`
	Start int      `json:"start"`
	End   int      `json:"end"`
}

// Open starts a session on Route[Index] and, through it, on every later hop.
type Open struct {
	Session  uint64          `json:"session"`
	Model    string          `json:"model"` // model CID
	Layers   int             `json:"layers"`
	Hidden   int             `json:"hidden"`
	Route    []RouteHop      `json:"route"`
	Index    int             `json:"index"`
	DType    string          `json:"dtype"`
	Sampling engine.Sampling `json:"sampling"`         // how the last stage picks tokens
	Logits   bool            `json:"logits,omitempty"` // return logits instead of a sampled token
	// From and Until make a probe: a route over layers [From, Until) only
	// (Until 0: Layers). With From > 0 the first hop takes hidden states
	// instead of token ids; with Until < Layers the last hop returns the
	// hidden states of every position of each step, as f32 in the result's
	// logits, instead of sampling. A stage that predates them refuses such
	// an open as a bad frame (its JSON decoding is strict): an ordinary open
	// never carries them.
	From  int `json:"from,omitempty"`
	Until int `json:"until,omitempty"`
	// Verify opens a session that may carry verify steps (speculative
	// decoding): greedy sampling, no logits, no probe. A stage that
	// predates verify steps refuses such an open as a bad frame (strict
	// JSON), so an originator learns before its first step that the
	// route cannot verify, and opens it plain.
	Verify bool `json:"verify,omitempty"`
	// Parts opens a session that takes part frames (framePart): a long
	// prompt cut into chunks that flow down the route one behind the
	// other, each stage at work on one chunk while the next stage works on
	// the chunk before. Never on a probe. A stage that predates parts
	// refuses such an open as a bad frame (strict JSON), and the
	// originator opens the route again without.
	Parts bool `json:"parts,omitempty"`
}

// end is the layer the route ends at.
func (o *Open) end() int {
	if o.Until > 0 {
		return o.Until
	}
	return o.Layers
}

// probe reports whether the route stops short of the model's head.
func (o *Open) probe() bool { return o.end() < o.Layers }

func (o *Open) validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrBadFrame, fmt.Sprintf(f, a...)) }
	if o.Session == 0 {
		return bad("session 0")
	}
	if o.Layers <= 0 || o.Layers > 4096 || o.Hidden <= 0 || o.Hidden > 65536 {
		return bad("layers %d / hidden %d", o.Layers, o.Hidden)
	}
	if len(o.Route) == 0 || len(o.Route) > maxRouteHops || o.Index < 0 || o.Index >= len(o.Route) {
		return bad("route of %d hops, index %d", len(o.Route), o.Index)
	}
	if o.From < 0 || o.Until < 0 || o.Until > o.Layers || o.From >= o.end() {
		return bad("probe of layers [%d,%d) of %d", o.From, o.end(), o.Layers)
	}
	next := o.From
	for i, h := range o.Route {
		if h.Start != next || h.End <= h.Start || h.End > o.end() {
			return bad("route hop %d runs [%d,%d): hops must chain from %d to %d", i, h.Start, h.End, o.From, o.end())
		}
		next = h.End
		if len(h.Addrs) > 32 {
			return bad("route hop %d has %d addresses", i, len(h.Addrs))
		}
	}
	if next != o.end() {
		return bad("route ends at layer %d, not %d", next, o.end())
	}
	if o.DType != DTypeF16 && o.DType != DTypeF32 {
		return bad("dtype %q (f16 or f32)", o.DType)
	}
	if o.Parts && o.probe() {
		return bad("a probe takes no parts")
	}
	if o.Verify && (o.Logits || o.probe()) {
		return bad("a verify session must be without logits, over the whole model")
	}
	return nil
}

// Opened confirms the chain from this hop on is ready.
type Opened struct {
	Session uint64 `json:"session"`
	Vocab   int    `json:"vocab"`
}

// WireError is a stage's refusal or failure. Peer and layers name the hop
// that failed (a downstream failure is reported by the hop before it).
type WireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Peer    string `json:"peer,omitempty"`
	Start   int    `json:"start"`
	End     int    `json:"end"`
}

// Error codes.
const (
	CodeBadFrame    = "bad_frame"    // the frame is malformed, of the wrong size, dtype or session
	CodeNoShard     = "no_shard"     // the peer does not hold these layers of this model
	CodeBusy        = "busy"         // no session slot free
	CodeDownstream  = "downstream"   // the next hop failed or went away
	CodeInternal    = "internal"     // the engine failed
	CodeContextFull = "context_full" // the session's KV cache is full: the answer ends here
	CodeHung        = "hung"         // the originator saw no progress and the peer did not answer a ping
	// CodeBadInput: the hidden states a hop received hold NaN, infinities or
	// absurd magnitudes (see MaxActivation); the error names the hop that
	// sent them (the upstream hop), not the one that refused them.
	CodeBadInput = "bad_input"
	// CodeBadOutput: a result that came back from the next hop failed the
	// checks (a token outside the vocabulary, logits or hidden states of the
	// wrong count or with bad numbers); the error names the next hop.
	CodeBadOutput = "bad_output"
)

// Step carries one batch of positions through the chain.
type Step struct {
	Session uint64
	Pos     int     // position of the first token
	Tokens  []int32 // the batch's token ids (input of layer 0; history for sampling)
	DType   byte    // 0: no hidden (to stage 0), 1: f16, 2: f32
	Hidden  []byte  // len(Tokens) x hidden x (2 or 4) bytes
	// Batches, when set, are the sizes of the batches the tokens are run
	// in, in order (a replay repeats the batch shapes of the original run:
	// some weight types, q4_k among them, give other numbers for a token
	// run in a batch than for the same token run alone). nil: one batch.
	Batches []int
	// Verify asks for the token after every position (Result.Tokens): a
	// speculative step verifying a draft. It travels as frameVerify and
	// never has Batches.
	Verify bool
	// Drafts, on a verify step of a sampling session, is the distribution
	// each draft token (Tokens[1:]) was drawn from; nil: every draft token
	// is certain to its draft (see wire_draft.go).
	Drafts []engine.Dist
	// Part: more of the same prompt follows; no result comes back for
	// this step (framePart). Never with Batches or Verify.
	Part bool
}

const (
	dtNone byte = 0
	dtF16  byte = 1
	dtF32  byte = 2
)

func dtypeCode(s string) byte {
	if s == DTypeF32 {
		return dtF32
	}
	return dtF16
}

// HopTiming is what one stage spent on one step.
type HopTiming struct {
	ComputeMS    float32 // its own layers
	DownstreamMS float32 // from sending to the next hop until its result came back
}

// Result travels back from the last stage: the sampled token (or logits)
// and each hop's timings, last hop first.
type Result struct {
	Session uint64
	Token   int32
	Logits  []float32
	Hops    []HopTiming
	// Tokens, for a verify step, is the token chosen after each of its
	// positions (Token is the last of them).
	Tokens []int32
}

// frames is the stage protocol's framing: a uvarint length, a type byte,
// then a binary body, or for Open, Opened and Error a strict JSON one of at
// most maxJSONFrame bytes.
var frames = &wire.Codec{Err: ErrBadFrame, Types: []uint64{
	frameOpen: limitJSON, frameOpened: limitJSON, frameError: limitJSON,
	frameStep: maxFrame, frameResult: maxFrame, frameReplay: maxFrame, frameVerify: maxFrame, framePart: maxFrame,
}}

func writeFrame(w io.Writer, typ byte, body []byte) error { return frames.Write(w, typ, body) }

func writeJSON(w io.Writer, typ byte, v any) error { return frames.WriteJSON(w, typ, v, wire.NoLimit) }

// Frame size limits by what the reader expects next.
const (
	// limitJSON: Open, Opened and Error frames.
	limitJSON = maxJSONFrame + 1
	// limitResult: a result with a full vocabulary of logits and 64 hop timings.
	limitResult = 1 + 17 + 4*maxVocab + 1 + 8*maxRouteHops
)

// resultLimit bounds the result of a step of n positions in a session
// opened with open: a probe's carries n hidden states.
func resultLimit(open *Open, n int) uint64 {
	if open.probe() {
		return uint64(1+17+1+8*maxRouteHops) + 4*uint64(n)*uint64(open.Hidden)
	}
	return limitResult + 4 + 4*uint64(n) // a verify step's tokens
}

// limitStep bounds a step or replay frame of a model with the given
// hidden size, whose session holds at most ctx positions (0: the protocol's
// limit): a step cannot carry more tokens than the session has room for,
// so the frame a stage reads is bounded by the KV cache it already holds
// for the session, not by what a peer declares.
func limitStep(hidden, ctx int) uint64 {
	toks := maxStepToks
	if ctx > 0 {
		toks = min(toks, ctx)
	}
	return uint64(1 + 4 + 4*toks + 17 + 4*toks + toks*hidden*4 + maxDraftBytes)
}

// readFrame reads one frame of at most limit bytes (its length, type byte
// included): its type and body. The body is read as it arrives, so a peer
// that declares a huge frame and sends nothing costs no memory.
func readFrame(r *bufio.Reader, limit uint64) (byte, []byte, error) {
	return frames.Read(r, min(limit, maxFrame), nil)
}

func decodeJSON(body []byte, v any) error { return frames.DecodeJSON(body, v) }

// encodeStep: u64 session, u32 pos, u32 n, u8 dtype, n x i32 tokens, hidden.
func encodeStep(s *Step) []byte {
	b := make([]byte, 0, 17+4*len(s.Tokens)+len(s.Hidden))
	b = binary.LittleEndian.AppendUint64(b, s.Session)
	b = binary.LittleEndian.AppendUint32(b, uint32(s.Pos))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s.Tokens)))
	b = append(b, s.DType)
	for _, t := range s.Tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	return append(b, s.Hidden...)
}

// maxBatches bounds the batches of one replay step.
const maxBatches = maxStepToks

// encodeStepFrame is a step frame: a replay frame when the step has
// batches (u32 count, count x u32 sizes, then the step), a step frame
// otherwise.
func encodeStepFrame(s *Step) (byte, []byte) {
	if s.Verify {
		b := encodeStep(s)
		if len(s.Drafts) > 0 {
			b = appendDrafts(b, s.Drafts)
		}
		return frameVerify, b
	}
	if s.Part {
		return framePart, encodeStep(s)
	}
	if s.Batches == nil {
		return frameStep, encodeStep(s)
	}
	b := make([]byte, 0, 4+4*len(s.Batches))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s.Batches)))
	for _, n := range s.Batches {
		b = binary.LittleEndian.AppendUint32(b, uint32(n))
	}
	return frameReplay, append(b, encodeStep(s)...)
}

// DecodeStepFrame parses a step or replay frame body.
func DecodeStepFrame(typ byte, body []byte, hidden int) (*Step, error) {
	if typ == frameStep || typ == framePart {
		s, err := DecodeStep(body, hidden)
		if err == nil {
			s.Part = typ == framePart
		}
		return s, err
	}
	if typ == frameVerify {
		s, rest, err := decodeStep(body, hidden)
		if err != nil {
			return nil, err
		}
		s.Verify = true
		if s.Drafts, err = decodeDrafts(rest, len(s.Tokens)); err != nil {
			return nil, err
		}
		return s, nil
	}
	if typ != frameReplay {
		return nil, fmt.Errorf("%w: expected a step frame, got type %d", ErrBadFrame, typ)
	}
	if len(body) < 4 {
		return nil, fmt.Errorf("%w: replay of %d bytes", ErrBadFrame, len(body))
	}
	nb := int(binary.LittleEndian.Uint32(body))
	if nb <= 0 || nb > maxBatches || len(body) < 4+4*nb {
		return nil, fmt.Errorf("%w: replay of %d batches", ErrBadFrame, nb)
	}
	batches := make([]int, nb)
	sum := 0
	for i := range batches {
		n := int(binary.LittleEndian.Uint32(body[4+4*i:]))
		if n <= 0 || n > maxStepToks {
			return nil, fmt.Errorf("%w: replay batch %d of %d tokens", ErrBadFrame, i, n)
		}
		batches[i] = n
		sum += n
	}
	s, err := DecodeStep(body[4+4*nb:], hidden)
	if err != nil {
		return nil, err
	}
	if sum != len(s.Tokens) {
		return nil, fmt.Errorf("%w: replay batches add up to %d tokens, step has %d", ErrBadFrame, sum, len(s.Tokens))
	}
	s.Batches = batches
	return s, nil
}

// DecodeStep parses a step body and checks its hidden-state size against
// hidden (the model's hidden size).
func DecodeStep(body []byte, hidden int) (*Step, error) {
	s, rest, err := decodeStep(body, hidden)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("%w: %d bytes of hidden state for %d tokens, want %d", ErrBadFrame, len(s.Hidden)+len(rest), len(s.Tokens), len(s.Hidden))
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// decodeStep parses a step body and returns what follows its hidden
// states (a verify step's draft distributions).
func decodeStep(body []byte, hidden int) (*Step, []byte, error) {
	if len(body) < 17 {
		return nil, nil, fmt.Errorf("%w: step of %d bytes", ErrBadFrame, len(body))
	}
	s := &Step{
		Session: binary.LittleEndian.Uint64(body),
		Pos:     int(binary.LittleEndian.Uint32(body[8:])),
		DType:   body[16],
	}
	n := int(binary.LittleEndian.Uint32(body[12:]))
	if n <= 0 || n > maxStepToks {
		return nil, nil, fmt.Errorf("%w: step of %d tokens", ErrBadFrame, n)
	}
	rest := body[17:]
	if len(rest) < 4*n {
		return nil, nil, fmt.Errorf("%w: step truncated", ErrBadFrame)
	}
	s.Tokens = make([]int32, n)
	for i := range s.Tokens {
		s.Tokens[i] = int32(binary.LittleEndian.Uint32(rest[4*i:]))
	}
	s.Hidden = rest[4*n:]
	var per int
	switch s.DType {
	case dtNone:
		per = 0
	case dtF16:
		per = 2
	case dtF32:
		per = 4
	default:
		return nil, nil, fmt.Errorf("%w: dtype %d", ErrBadFrame, s.DType)
	}
	want := n * hidden * per
	if len(s.Hidden) < want {
		return nil, nil, fmt.Errorf("%w: %d bytes of hidden state for %d tokens, want %d", ErrBadFrame, len(s.Hidden), n, want)
	}
	s.Hidden, rest = s.Hidden[:want:want], s.Hidden[want:]
	return s, rest, nil
}

// encodeResult: u64 session, i32 token, u32 nlogits, logits f32, u8 nhops,
// nhops x (f32 compute, f32 downstream).
func encodeResult(r *Result) []byte {
	b := make([]byte, 0, 17+4*len(r.Logits)+8*len(r.Hops))
	b = binary.LittleEndian.AppendUint64(b, r.Session)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Token))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Logits)))
	for _, f := range r.Logits {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	b = append(b, byte(len(r.Hops)))
	for _, h := range r.Hops {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(h.ComputeMS))
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(h.DownstreamMS))
	}
	if len(r.Tokens) > 0 { // a verify step's: u32 n, n x i32
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Tokens)))
		for _, t := range r.Tokens {
			b = binary.LittleEndian.AppendUint32(b, uint32(t))
		}
	}
	return b
}

// DecodeResult parses a result body.
func DecodeResult(body []byte) (*Result, error) {
	if len(body) < 17 {
		return nil, fmt.Errorf("%w: result of %d bytes", ErrBadFrame, len(body))
	}
	r := &Result{Session: binary.LittleEndian.Uint64(body), Token: int32(binary.LittleEndian.Uint32(body[8:]))}
	nl := int(binary.LittleEndian.Uint32(body[12:]))
	if nl < 0 || nl > maxFrame/4 || len(body) < 16+4*nl+1 {
		return nil, fmt.Errorf("%w: result with %d logits in %d bytes", ErrBadFrame, nl, len(body))
	}
	if nl > 0 {
		r.Logits = make([]float32, nl)
		for i := range r.Logits {
			r.Logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(body[16+4*i:]))
		}
	}
	rest := body[16+4*nl:]
	nh := int(rest[0])
	rest = rest[1:]
	if len(rest) < 8*nh || nh > maxRouteHops {
		return nil, fmt.Errorf("%w: result hop timings", ErrBadFrame)
	}
	if toks := rest[8*nh:]; len(toks) > 0 {
		nt := 0
		if len(toks) >= 4 {
			nt = int(binary.LittleEndian.Uint32(toks))
		}
		if nt <= 0 || nt > maxStepToks || len(toks) != 4+4*nt {
			return nil, fmt.Errorf("%w: %d bytes after the result's hop timings", ErrBadFrame, len(toks))
		}
		r.Tokens = make([]int32, nt)
		for i := range r.Tokens {
			r.Tokens[i] = int32(binary.LittleEndian.Uint32(toks[4+4*i:]))
		}
	}
	for i := 0; i < nh; i++ {
		r.Hops = append(r.Hops, HopTiming{
			ComputeMS:    math.Float32frombits(binary.LittleEndian.Uint32(rest[8*i:])),
			DownstreamMS: math.Float32frombits(binary.LittleEndian.Uint32(rest[8*i+4:])),
		})
	}
	return r, nil
}
