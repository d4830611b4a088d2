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

// Kinds of work an item acknowledges.
const (
	KindMoA   = "moa"   // a role's answer: prompt and generated tokens
	KindStage = "stage" // a pipeline stage: positions run through layers [Start,End) of Layers
	KindDraft = "draft" // draft tokens proposed to a verifier
	KindShard = "shard" // bytes of a model slice sent
)

var kindCode = map[string]byte{KindMoA: 1, KindStage: 2, KindDraft: 3, KindShard: 4}

var kindName = map[byte]string{1: KindMoA, 2: KindStage, 3: KindDraft, 4: KindShard}

// ErrBadReceipt is what every refused receipt's error wraps.
var ErrBadReceipt = errors.New("ledger: bad receipt")

// Item is one piece of work a server did for a client: a role's answer,
// a route's positions through a stage, a draft, a shard.
type Item struct {
	Kind  string `json:"kind"`
	Model string `json:"model,omitempty"` // the model's root CID
	Role  string `json:"role,omitempty"`  // moa: the role answered
	// Start, End and Layers: a stage's layers [Start,End) of a model of
	// Layers.
	Start  int   `json:"start,omitempty"`
	End    int   `json:"end,omitempty"`
	Layers int   `json:"layers,omitempty"`
	Tokens int64 `json:"tokens,omitempty"` // moa, draft: tokens in and out; stage: positions run
	Bytes  int64 `json:"bytes,omitempty"`  // shard: bytes received
}

// Receipt is a client's acknowledgement of the work a server did for it
// since its last receipt to that server: the items, one signature for
// them all. The client signs only what it received, once: the server
// keeps the count as the proof of what it gave.
type Receipt struct {
	Server string
	Client string // the peer the work was done for, which signs
	At     int64  // when the client signed it, unix ms
	Nonce  uint64 // one per receipt of the pair, never again
	Items  []Item
}

// Signed is a receipt and its client's signature over its encoding.
type Signed struct {
	Receipt
	Sig []byte
}

// Bounds of one receipt.
const (
	maxTokens = 1 << 24 // far more than any context
	maxBytes  = 1 << 40
	maxLayers = 4096
	maxField  = 256
	// MaxItems is the most items one receipt holds.
	MaxItems = 256
	maxSig   = 1024
	tag      = "swarm/receipt/1\x00"
)

// ShardMiB is how many bytes of a shard sent count as one token of
// work: a 1 MiB transfer weighs as much as one token of a whole model.
const ShardMiB = 1 << 20

// Work is what the item is worth in the ledger's unit, tokens of a whole
// model: a role's tokens count whole, a stage's positions by the share of
// the model's layers it ran, a shard's bytes per ShardMiB.
func (it *Item) Work() float64 {
	switch it.Kind {
	case KindStage:
		if it.Layers <= 0 {
			return 0
		}
		return float64(it.Tokens) * float64(it.End-it.Start) / float64(it.Layers)
	case KindShard:
		return float64(it.Bytes) / ShardMiB
	}
	return float64(it.Tokens)
}

// Work is the receipt's items' work.
func (r *Receipt) Work() float64 {
	var w float64
	for i := range r.Items {
		w += r.Items[i].Work()
	}
	return w
}

func bad(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrBadReceipt, fmt.Sprintf(f, a...)) }

// check refuses an item whose fields are out of bounds or contradict its
// kind.
func (it *Item) check() error {
	if len(it.Model) > maxField || len(it.Role) > maxField {
		return bad("model or role longer than %d bytes", maxField)
	}
	if it.Tokens < 0 || it.Tokens > maxTokens || it.Bytes < 0 || it.Bytes > maxBytes {
		return bad("%d tokens, %d bytes", it.Tokens, it.Bytes)
	}
	switch it.Kind {
	case KindMoA, KindDraft:
		if it.Tokens == 0 || it.Bytes != 0 || it.Layers != 0 || it.Start != 0 || it.End != 0 {
			return bad("a %s item counts tokens only", it.Kind)
		}
	case KindStage:
		if it.Layers <= 0 || it.Layers > maxLayers || it.Start < 0 || it.End <= it.Start || it.End > it.Layers || it.Tokens == 0 || it.Bytes != 0 {
			return bad("a stage item of layers [%d,%d) of %d, %d positions", it.Start, it.End, it.Layers, it.Tokens)
		}
	case KindShard:
		if it.Bytes == 0 || it.Tokens != 0 || it.Layers != 0 || it.Start != 0 || it.End != 0 {
			return bad("a shard item counts bytes only")
		}
	default:
		return bad("kind %q", it.Kind)
	}
	return nil
}

// check refuses a receipt whose fields are out of bounds.
func (r *Receipt) check() error {
	if _, err := peer.Decode(r.Server); err != nil {
		return bad("server %q: %v", r.Server, err)
	}
	if _, err := peer.Decode(r.Client); err != nil {
		return bad("client %q: %v", r.Client, err)
	}
	if r.Server == r.Client {
		return bad("a peer's receipt for work done for itself")
	}
	if len(r.Items) == 0 || len(r.Items) > MaxItems {
		return bad("%d items (1..%d)", len(r.Items), MaxItems)
	}
	for i := range r.Items {
		if err := r.Items[i].check(); err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
	}
	if r.At <= 0 {
		return bad("no time")
	}
	return nil
}

// Encode is the receipt's bytes, which the client signs and the receipt
// protocol carries: a domain tag, the server and client, the time and
// nonce (big-endian u64), then the items, strings as a uvarint length and
// bytes, numbers as uvarints, each item's model as an index into the
// receipt's table of models. No two receipts share their bytes, and no
// other signed message of the swarm reads as one.
func (r *Receipt) Encode() []byte {
	b := []byte(tag)
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	str(r.Server)
	str(r.Client)
	b = binary.BigEndian.AppendUint64(b, uint64(r.At))
	b = binary.BigEndian.AppendUint64(b, r.Nonce)
	var models []string
	index := map[string]int{}
	for _, it := range r.Items {
		if _, ok := index[it.Model]; !ok {
			index[it.Model] = len(models)
			models = append(models, it.Model)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(models)))
	for _, m := range models {
		str(m)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Items)))
	for _, it := range r.Items {
		b = append(b, kindCode[it.Kind])
		b = binary.AppendUvarint(b, uint64(index[it.Model]))
		str(it.Role)
		for _, n := range []int64{int64(it.Start), int64(it.End), int64(it.Layers), it.Tokens, it.Bytes} {
			b = binary.AppendUvarint(b, uint64(n))
		}
	}
	return b
}

// wire is the signed receipt as the receipt protocol carries it: its
// encoding, then the signature (uvarint length, bytes).
func (s *Signed) wire() []byte {
	b := s.Encode()
	b = binary.AppendUvarint(b, uint64(len(s.Sig)))
	return append(b, s.Sig...)
}

// decodeSigned parses a signed receipt, refusing anything malformed,
// out of bounds or followed by more bytes.
func decodeSigned(b []byte) (*Signed, error) {
	d := decoder{b: b}
	if len(b) < len(tag) || string(b[:len(tag)]) != tag {
		return nil, bad("not a receipt (tag)")
	}
	d.b = b[len(tag):]
	s := &Signed{}
	s.Server, s.Client = d.str(), d.str()
	s.At, s.Nonce = int64(d.u64()), d.u64()
	nm := d.uvar(MaxItems)
	models := make([]string, nm)
	for i := range models {
		models[i] = d.str()
	}
	ni := d.uvar(MaxItems)
	for range ni {
		var it Item
		k := d.byte()
		it.Kind = kindName[k]
		if d.err == nil && it.Kind == "" {
			d.err = bad("item kind %d", k)
		}
		m := d.uvar(len(models) - 1)
		if d.err == nil {
			it.Model = models[m]
		}
		it.Role = d.str()
		it.Start, it.End, it.Layers = d.uvar(maxLayers), d.uvar(maxLayers), d.uvar(maxLayers)
		it.Tokens, it.Bytes = int64(d.uvar(maxTokens)), int64(d.uvar64(maxBytes))
		s.Items = append(s.Items, it)
	}
	n := len(b) - len(d.b) // the signed bytes end here
	s.Sig = []byte(d.str())
	if d.err == nil && len(d.b) > 0 {
		d.err = bad("%d bytes after the signature", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(s.Sig) == 0 || len(s.Sig) > maxSig {
		return nil, bad("signature of %d bytes", len(s.Sig))
	}
	// A receipt's encoding is unique: one decoded and encoded again must
	// be the very bytes signed (no model listed twice or not used).
	if string(s.Encode()) != string(b[:n]) {
		return nil, bad("not in its one encoding")
	}
	return s, nil
}

// decoder reads a receipt's fields; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) u64() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) uvar64(most uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > most {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uvar(most int) int {
	if most < 0 {
		d.fail()
		return 0
	}
	return int(d.uvar64(uint64(most)))
}

func (d *decoder) str() string {
	n := d.uvar(maxSig)
	if d.err != nil || len(d.b) < n {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = bad("truncated or out of bounds")
	}
}

// Sign signs r with key, the client's own: r.Client must be key's peer.
func Sign(r Receipt, key crypto.PrivKey) (*Signed, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if r.Client != id.String() {
		return nil, bad("signing as %s a receipt of client %s", id, r.Client)
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	sig, err := key.Sign(r.Encode())
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
		return bad("the client's ID carries no key: %v", err)
	}
	ok, err := pub.Verify(s.Encode(), s.Sig)
	if err != nil || !ok {
		return bad("signature is not the client's")
	}
	return nil
}

// at is the receipt's time.
func (r *Receipt) at() time.Time { return time.UnixMilli(r.At) }

// finite reports whether x is a number the ledger can hold.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
