package shards

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/llmswarm/llmswarm/internal/wire"
)

// TransferProtocol is the stream protocol that moves model files, layer
// slices and header-only files between peers.
//
// Wire format. One request per stream. Every frame is an unsigned varint
// length (1..65536) followed by that many bytes of JSON.
//
//	client -> server  request frame:
//	  {"op":"slice","model":CID,"from":A,"to":B,"offset":N}  layers [A,B) of model CID
//	  {"op":"header","model":CID,"offset":N}                 all metadata, zero tensors
//	  {"op":"model","model":CID,"offset":N}                  the whole model file
//	  {"op":"manifest","model":ROOT,"offset":N}              the model's manifest
//	server -> client  response frame:
//	  {"cid":FILECID,"size":S,"offset":N,"layers":L}         success, then S-N raw bytes
//	  {"code":CODE,"error":TEXT}                             failure, then the stream ends
//
// CODE is one of unknown_model, not_held, bad_range, bad_offset, bad_request,
// busy, internal. The raw bytes are the file from byte N to its end; the
// client resumes an interrupted transfer by asking again with offset = the
// bytes it already has, and checks the finished file's CID against "cid".
// A model is named by its root (the CID of its manifest) or, for a whole
// file, by the file's CID. The client checks a manifest against the root it
// asked for, and every slice, header or model file it fetches of a model
// named by its root against that manifest, before it keeps the file.
// Unknown JSON fields are ignored so 1.x versions can add fields.
const TransferProtocol = protocol.ID("/swarm/shards/1.0.0")

// Request operations.
const (
	OpSlice  = "slice"
	OpHeader = "header"
	OpModel  = "model"
	// OpManifest fetches a model's manifest; "cid" in the answer is the raw
	// CID of its bytes (the root's digest under the raw codec).
	OpManifest = "manifest"
)

// Response error codes, each mapped to a sentinel error on the client.
const (
	CodeUnknownModel = "unknown_model"
	CodeNotHeld      = "not_held"
	CodeBadRange     = "bad_range"
	CodeBadOffset    = "bad_offset"
	CodeBadRequest   = "bad_request"
	CodeBusy         = "busy"
	CodeInternal     = "internal"
)

const (
	maxFrame  = 64 << 10 // bytes of JSON in one frame
	maxLayers = 1 << 16  // no model has more blocks; bounds request ranges
)

// Errors of the transfer protocol. Remote failures arrive as *TransferError,
// which unwraps to one of these (or to ErrLayerRange for a bad range).
var (
	ErrUnknownModel  = errors.New("shards: unknown model")
	ErrLayersNotHeld = errors.New("shards: layers not held")
	ErrBadOffset     = errors.New("shards: offset past the end of the file")
	ErrBadRequest    = errors.New("shards: bad transfer request")
	ErrBusy          = errors.New("shards: server busy")
	ErrRemote        = errors.New("shards: remote error")
	ErrBadFrame      = errors.New("shards: bad transfer frame")
	ErrCIDMismatch   = errors.New("shards: content does not match its CID")
	ErrBadShard      = errors.New("shards: file is not the shard asked for")
	ErrInterrupted   = errors.New("shards: transfer interrupted")
	ErrTooLarge      = errors.New("shards: file larger than allowed")
)

var codeErrs = map[string]error{
	CodeUnknownModel: ErrUnknownModel,
	CodeNotHeld:      ErrLayersNotHeld,
	CodeBadRange:     ErrLayerRange,
	CodeBadOffset:    ErrBadOffset,
	CodeBadRequest:   ErrBadRequest,
	CodeBusy:         ErrBusy,
	CodeInternal:     ErrRemote,
}

// TransferError is a failure the serving peer reported.
type TransferError struct {
	Peer peer.ID
	Op   string
	Code string
	Msg  string
}

func (e *TransferError) Error() string {
	return fmt.Sprintf("shards: peer %s refused %s: %s: %s", e.Peer, e.Op, e.Code, e.Msg)
}

// cleanMsg bounds and defangs a peer's error text before it reaches our
// errors and logs.
func cleanMsg(s string) string {
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, s)
}

// Unwrap returns the sentinel for the code (ErrRemote for codes this
// version does not know).
func (e *TransferError) Unwrap() error {
	if err, ok := codeErrs[e.Code]; ok {
		return err
	}
	return ErrRemote
}

type transferRequest struct {
	Op     string `json:"op"`
	Model  string `json:"model"`
	From   int    `json:"from,omitempty"`
	To     int    `json:"to,omitempty"`
	Offset int64  `json:"offset,omitempty"`
}

type transferResponse struct {
	Code   string `json:"code,omitempty"`
	Error  string `json:"error,omitempty"`
	CID    string `json:"cid,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Offset int64  `json:"offset,omitempty"`
	Layers int    `json:"layers,omitempty"`
}

// validate checks a request and canonicalises its model CID. Errors wrap
// ErrBadRequest, or ErrLayerRange for a range that cannot be right.
func (r *transferRequest) validate() error {
	c, err := ParseModelCID(r.Model)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	r.Model = c.String()
	if r.Op == OpManifest && !IsRoot(c) {
		return fmt.Errorf("%w: %s is a file CID: only a model root has a manifest", ErrBadRequest, r.Model)
	}
	if r.Offset < 0 {
		return fmt.Errorf("%w: negative offset %d", ErrBadRequest, r.Offset)
	}
	switch r.Op {
	case OpSlice:
		if r.From < 0 || r.To <= r.From || r.To > maxLayers {
			return fmt.Errorf("%w: layers [%d,%d)", ErrLayerRange, r.From, r.To)
		}
	case OpHeader, OpModel, OpManifest:
		if r.From != 0 || r.To != 0 {
			return fmt.Errorf("%w: %s takes no layer range", ErrBadRequest, r.Op)
		}
	default:
		return fmt.Errorf("%w: unknown op %q", ErrBadRequest, r.Op)
	}
	return nil
}

func (r *transferResponse) validate(req transferRequest) error {
	if r.Code != "" {
		return nil
	}
	if _, err := ParseCID(r.CID); err != nil {
		return fmt.Errorf("%w: response: %v", ErrBadFrame, err)
	}
	if r.Size < 0 || r.Offset != req.Offset || r.Offset > r.Size {
		return fmt.Errorf("%w: response size %d offset %d for offset %d", ErrBadFrame, r.Size, r.Offset, req.Offset)
	}
	if r.Layers < 0 || r.Layers > maxLayers {
		return fmt.Errorf("%w: response layers %d", ErrBadFrame, r.Layers)
	}
	return nil
}

// frames is the transfer protocol's framing: a uvarint length (1..maxFrame),
// then one JSON value, whose unknown fields are ignored.
var frames = &wire.Codec{UnknownFields: true, Err: ErrBadFrame}

func writeFrame(w io.Writer, v any) error { return frames.WriteJSON(w, 0, v, maxFrame) }

// readFrame reads one frame into v. It takes no byte past the frame: the
// file's raw bytes follow a response on the stream.
func readFrame(r io.Reader, v any) error {
	_, b, err := frames.Read(r, maxFrame, nil)
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		// Whoever reads a frame here is owed one, whole.
		return fmt.Errorf("%w: stream ended before a whole frame: %v", ErrBadFrame, err)
	}
	if err != nil {
		return err
	}
	return frames.DecodeJSON(b, v)
}

// decodeTransferRequest reads and validates one request frame.
func decodeTransferRequest(r io.Reader) (transferRequest, error) {
	var req transferRequest
	if err := readFrame(r, &req); err != nil {
		return transferRequest{}, err
	}
	if err := req.validate(); err != nil {
		return transferRequest{}, err
	}
	return req, nil
}

// decodeTransferResponse reads one response frame and checks it answers req.
func decodeTransferResponse(r io.Reader, req transferRequest) (transferResponse, error) {
	var resp transferResponse
	if err := readFrame(r, &resp); err != nil {
		return transferResponse{}, err
	}
	if err := resp.validate(req); err != nil {
		return transferResponse{}, err
	}
	return resp, nil
}
