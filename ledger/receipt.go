package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Kinds of work a receipt acknowledges.
const (
	KindMoA   = "moa"   // a role's answer: prompt and generated tokens
	KindStage = "stage" // a pipeline stage: positions run through layers [Start,End) of Layers
	KindDraft = "draft" // draft tokens proposed to a verifier
	KindShard = "shard" // bytes of a model slice sent
)

// ErrBadReceipt is what every refused receipt's error wraps.
var ErrBadReceipt = errors.New("ledger: bad receipt")

// Receipt is a client's acknowledgement of work a server did for it. The
// client signs only what it received, once: the server keeps the signed
// receipt as the proof of what it gave.
type Receipt struct {
	Server string `json:"server"` // the peer that did the work
	Client string `json:"client"` // the peer it was done for, which signs
	Kind   string `json:"kind"`
	Model  string `json:"model,omitempty"` // the model's root CID
	Role   string `json:"role,omitempty"`  // moa: the role answered
	// Start, End and Layers: a stage's layers [Start,End) of a model of
	// Layers.
	Start  int    `json:"start,omitempty"`
	End    int    `json:"end,omitempty"`
	Layers int    `json:"layers,omitempty"`
	Tokens int64  `json:"tokens,omitempty"` // moa, draft: tokens in and out; stage: positions run
	Bytes  int64  `json:"bytes,omitempty"`  // shard: bytes received
	At     int64  `json:"at"`               // when the client signed it, unix ms
	Nonce  uint64 `json:"nonce"`            // one per receipt of the pair, never again
}

// Signed is a receipt and its client's signature over SignedBytes.
type Signed struct {
	Receipt
	Sig []byte `json:"sig"`
}

// Bounds of one receipt.
const (
	maxTokens = 1 << 24 // far more than any context
	maxBytes  = 1 << 40
	maxLayers = 4096
	maxField  = 256
)

// ShardMiB is how many bytes of a shard sent count as one token of
// work: a 1 MiB transfer weighs as much as one token of a whole model.
const ShardMiB = 1 << 20

// Work is what the receipt is worth in the ledger's unit, tokens of a
// whole model: a role's tokens count whole, a stage's positions by the
// share of the model's layers it ran, a shard's bytes per ShardMiB.
func (r *Receipt) Work() float64 {
	switch r.Kind {
	case KindStage:
		if r.Layers <= 0 {
			return 0
		}
		return float64(r.Tokens) * float64(r.End-r.Start) / float64(r.Layers)
	case KindShard:
		return float64(r.Bytes) / ShardMiB
	}
	return float64(r.Tokens)
}

// check refuses a receipt whose fields are out of bounds or contradict
// its kind.
func (r *Receipt) check() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrBadReceipt, fmt.Sprintf(f, a...)) }
	if _, err := peer.Decode(r.Server); err != nil {
		return bad("server %q: %v", r.Server, err)
	}
	if _, err := peer.Decode(r.Client); err != nil {
		return bad("client %q: %v", r.Client, err)
	}
	if r.Server == r.Client {
		return bad("a peer's receipt for work done for itself")
	}
	if len(r.Model) > maxField || len(r.Role) > maxField {
		return bad("model or role longer than %d bytes", maxField)
	}
	if r.Tokens < 0 || r.Tokens > maxTokens || r.Bytes < 0 || r.Bytes > maxBytes {
		return bad("%d tokens, %d bytes", r.Tokens, r.Bytes)
	}
	switch r.Kind {
	case KindMoA, KindDraft:
		if r.Tokens == 0 || r.Bytes != 0 || r.Layers != 0 {
			return bad("a %s receipt counts tokens only", r.Kind)
		}
	case KindStage:
		if r.Layers <= 0 || r.Layers > maxLayers || r.Start < 0 || r.End <= r.Start || r.End > r.Layers || r.Tokens == 0 || r.Bytes != 0 {
			return bad("a stage receipt of layers [%d,%d) of %d, %d positions", r.Start, r.End, r.Layers, r.Tokens)
		}
	case KindShard:
		if r.Bytes == 0 || r.Tokens != 0 {
			return bad("a shard receipt counts bytes only")
		}
	default:
		return bad("kind %q", r.Kind)
	}
	if r.At <= 0 {
		return bad("no time")
	}
	return nil
}

// SignedBytes is what the client signs: a domain tag, then every field in
// a fixed order, strings length-prefixed, so that no two receipts share
// their bytes and no other signed message of the swarm reads as one.
func (r *Receipt) SignedBytes() []byte {
	b := []byte("swarm/receipt/1\x00")
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	str(r.Server)
	str(r.Client)
	str(r.Kind)
	str(r.Model)
	str(r.Role)
	for _, n := range []int64{int64(r.Start), int64(r.End), int64(r.Layers), r.Tokens, r.Bytes, r.At} {
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return binary.BigEndian.AppendUint64(b, r.Nonce)
}

// Sign signs r with key, the client's own: r.Client must be key's peer.
func Sign(r Receipt, key crypto.PrivKey) (*Signed, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if r.Client != id.String() {
		return nil, fmt.Errorf("%w: signing as %s a receipt of client %s", ErrBadReceipt, id, r.Client)
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	sig, err := key.Sign(r.SignedBytes())
	if err != nil {
		return nil, err
	}
	return &Signed{Receipt: r, Sig: sig}, nil
}

// Verify checks s's fields and that its client signed it (the key is the
// one the client's peer ID carries).
func (s *Signed) Verify() error {
	if err := s.check(); err != nil {
		return err
	}
	id, _ := peer.Decode(s.Client)
	pub, err := id.ExtractPublicKey()
	if err != nil {
		return fmt.Errorf("%w: the client's ID carries no key: %v", ErrBadReceipt, err)
	}
	ok, err := pub.Verify(s.SignedBytes(), s.Sig)
	if err != nil || !ok {
		return fmt.Errorf("%w: signature is not the client's", ErrBadReceipt)
	}
	return nil
}

// at is the receipt's time.
func (r *Receipt) at() time.Time { return time.UnixMilli(r.At) }

// finite reports whether x is a number the ledger can hold.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
