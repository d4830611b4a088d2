package shards

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ipfs/go-cid"
	mh "github.com/multiformats/go-multihash"

	"github.com/llmswarm/llmswarm/internal/wire"
)

// ManifestCodec is the multicodec of a manifest root CID: "json" (0x0200).
// A model root is CIDv1, this codec, sha2-256 of the manifest's bytes; a
// file CID (CIDv1, raw, sha2-256 of a GGUF's bytes) names one file.
const ManifestCodec = 0x0200

// MaxManifestBytes bounds a manifest (a 4096-layer model of ~12 tensors a
// layer needs ~8 MiB).
const MaxManifestBytes = 16 << 20

const (
	manifestVersion = 1
	maxManifestTens = 1 << 16
)

// Manifest is a model's root of trust. Its CID (ManifestCID) names the
// model in the swarm; it commits to the model's metadata (tokenizer and
// chat template included) and to every tensor, so a slice, a header or a
// single tensor fetched from anyone is checked against it before it is
// stored or used. The model's shape comes from it, never from what peers
// announce.
//
// Meta is the sha2-256 of the metadata entries in key order, each encoded
// as GGUF encodes it, leaving out the swarm.* keys (the store adds
// swarm.source_cid to slices and headers). Tensors hash their data bytes
// only: a tensor is the same wherever it sits in a file.
type Manifest struct {
	Version int              `json:"version"`
	File    string           `json:"file"` // CID of the whole GGUF the manifest was built from
	Size    int64            `json:"size"` // its size in bytes
	Meta    string           `json:"meta"`
	Arch    string           `json:"arch"`
	Name    string           `json:"name,omitempty"`
	Layers  int              `json:"layers"`
	Hidden  int              `json:"hidden"`
	Vocab   int              `json:"vocab"`
	Quant   string           `json:"quant,omitempty"`
	Tensors []ManifestTensor `json:"tensors"`
}

// ManifestTensor is one tensor of the model.
type ManifestTensor struct {
	Name   string   `json:"name"`
	Type   GGMLType `json:"type"`
	Dims   []uint64 `json:"dims"`
	Size   uint64   `json:"size"`
	SHA256 string   `json:"sha256"` // hex, of the tensor's data bytes
}

// ErrBadManifest: manifest bytes that do not decode, do not validate, or do
// not hash to the root they were fetched for.
var ErrBadManifest = errors.New("shards: bad manifest")

// Encode returns the manifest's canonical bytes (its CID hashes these).
func (m *Manifest) Encode() []byte {
	b, _ := json.Marshal(m) // fixed field order, no maps, no floats: deterministic
	return b
}

// CID returns the manifest's root CID.
func (m *Manifest) CID() cid.Cid { return ManifestCID(m.Encode()) }

// ManifestCID is the root CID of manifest bytes b.
func ManifestCID(b []byte) cid.Cid {
	sum := sha256.Sum256(b)
	digest, _ := mh.Encode(sum[:], mh.SHA2_256) // a sha256 digest always encodes
	return cid.NewCidV1(ManifestCodec, digest)
}

// IsRoot reports whether c is a manifest root (not a file CID).
func IsRoot(c cid.Cid) bool { return c.Prefix().Codec == ManifestCodec }

// ParseModelCID parses a model name given as a CID: a manifest root or,
// for users who name a file, a file CID.
func ParseModelCID(s string) (cid.Cid, error) {
	c, err := cid.Decode(s)
	if err != nil {
		return cid.Undef, fmt.Errorf("shards: bad CID %q: %w", s, err)
	}
	p := c.Prefix()
	if p.Version != 1 || (p.Codec != cid.Raw && p.Codec != ManifestCodec) || p.MhType != mh.SHA2_256 {
		return cid.Undef, fmt.Errorf("shards: CID %q is neither a model root (CIDv1 json sha2-256) nor a file CID (CIDv1 raw sha2-256)", s)
	}
	return c, nil
}

// DecodeManifest checks that b hashes to root and decodes it strictly.
func DecodeManifest(b []byte, root cid.Cid) (*Manifest, error) {
	if len(b) > MaxManifestBytes {
		return nil, fmt.Errorf("%w: %d bytes (at most %d)", ErrBadManifest, len(b), MaxManifestBytes)
	}
	if got := ManifestCID(b); !got.Equals(root) {
		return nil, fmt.Errorf("%w: its bytes hash to %s, not to the root %s it was fetched for", ErrBadManifest, got, root)
	}
	return ParseManifest(b)
}

// ParseManifest decodes manifest bytes strictly (unknown fields, trailing
// data and a non-canonical encoding are refused) and validates them. It
// does not check a root: see DecodeManifest.
func ParseManifest(b []byte) (*Manifest, error) {
	if len(b) > MaxManifestBytes {
		return nil, fmt.Errorf("%w: %d bytes (at most %d)", ErrBadManifest, len(b), MaxManifestBytes)
	}
	var m Manifest
	if err := wire.DecodeJSON(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	// One model, one root: any other spelling of the same content is refused.
	if !bytes.Equal(m.Encode(), b) {
		return nil, fmt.Errorf("%w: not in canonical form", ErrBadManifest)
	}
	return &m, nil
}

func (m *Manifest) validate() error {
	if m.Version != manifestVersion {
		return fmt.Errorf("version %d (want %d)", m.Version, manifestVersion)
	}
	if c, err := ParseCID(m.File); err != nil || c.String() != m.File {
		return fmt.Errorf("file CID %q", trunc(m.File))
	}
	if m.Size <= 0 || !isHex256(m.Meta) {
		return errors.New("size or metadata hash")
	}
	if m.Arch == "" || len(m.Arch) > 64 || len(m.Name) > 256 || len(m.Quant) > 32 {
		return errors.New("arch, name or quant")
	}
	if m.Layers <= 0 || m.Layers > 4096 || m.Hidden <= 0 || m.Hidden > 1<<20 || m.Vocab < 0 || m.Vocab > 1<<24 {
		return fmt.Errorf("shape: %d layers, hidden %d, vocab %d", m.Layers, m.Hidden, m.Vocab)
	}
	if len(m.Tensors) == 0 || len(m.Tensors) > maxManifestTens {
		return fmt.Errorf("%d tensors", len(m.Tensors))
	}
	seen := make(map[string]bool, len(m.Tensors))
	var total uint64
	for i, t := range m.Tensors {
		if t.Name == "" || len(t.Name) > 256 || seen[t.Name] {
			return fmt.Errorf("tensor %d: empty, long or repeated name %q", i, trunc(t.Name))
		}
		seen[t.Name] = true
		if len(t.Dims) == 0 || len(t.Dims) > 4 {
			return fmt.Errorf("tensor %q: %d dims", t.Name, len(t.Dims))
		}
		size, err := tensorBytes(t.Type, t.Dims)
		if err != nil || size != t.Size {
			return fmt.Errorf("tensor %q: size %d does not match its type and shape", t.Name, t.Size)
		}
		if !isHex256(t.SHA256) {
			return fmt.Errorf("tensor %q: hash %q", t.Name, trunc(t.SHA256))
		}
		if l := layerOf(t.Name); l >= m.Layers {
			return fmt.Errorf("tensor %q: layer beyond the model's %d", t.Name, m.Layers)
		}
		if total += t.Size; total > uint64(m.Size) {
			return errors.New("tensors larger than the file")
		}
	}
	return nil
}

func isHex256(s string) bool {
	if len(s) != 64 || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// Tensor returns the manifest entry named name.
func (m *Manifest) Tensor(name string) (ManifestTensor, bool) {
	for _, t := range m.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return ManifestTensor{}, false
}

// metaHash hashes g's metadata as the manifest commits to it.
func metaHash(g *GGUF) (string, error) {
	kvs := slices.Clone(g.KVs)
	slices.SortStableFunc(kvs, func(a, b KV) int { return strings.Compare(a.Key, b.Key) })
	h := sha256.New()
	cw := &countWriter{w: h}
	le := []byte{0, 0, 0, 0}
	for i, kv := range kvs {
		if strings.HasPrefix(kv.Key, "swarm.") {
			continue
		}
		if i > 0 && kvs[i-1].Key == kv.Key {
			return "", fmt.Errorf("metadata key %q appears twice", kv.Key)
		}
		cw.str(kv.Key)
		le[0], le[1], le[2], le[3] = byte(kv.Type), byte(kv.Type>>8), byte(kv.Type>>16), byte(kv.Type>>24)
		cw.write(le)
		var err error
		if kv.Type == TypeArray {
			err = cw.array(kv.ArrayType, kv.Value)
		} else {
			err = cw.scalar(kv.Type, kv.Value)
		}
		if err != nil {
			return "", fmt.Errorf("metadata key %q: %w", kv.Key, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// BuildManifest reads the full model at path once and returns its
// manifest, the manifest's bytes and root.
func BuildManifest(path string) (*Manifest, []byte, cid.Cid, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, cid.Undef, fmt.Errorf("shards: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, cid.Undef, fmt.Errorf("shards: %w", err)
	}
	g, err := ReadGGUF(f, st.Size())
	if err != nil {
		return nil, nil, cid.Undef, &fileError{path, err}
	}
	mi := g.ModelInfo()
	if !mi.isFull() {
		return nil, nil, cid.Undef, fmt.Errorf("%w: %s holds layers [%d,%d) of %d (embedding %v, head %v)", ErrNotFullModel,
			path, mi.LayerRange[0], mi.LayerRange[1], mi.Layers, mi.HasEmbedding, mi.HasHead)
	}
	meta, err := metaHash(g)
	if err != nil {
		return nil, nil, cid.Undef, &fileError{path, err}
	}
	// JSON carries text: names that are not UTF-8 would not come back as
	// the same bytes. The metadata hash covers the real ones.
	m := &Manifest{Version: manifestVersion, Size: st.Size(), Meta: meta, Arch: strings.ToValidUTF8(mi.Arch, "?"),
		Name: strings.ToValidUTF8(mi.Name, "?"), Layers: mi.Layers, Hidden: mi.Hidden, Vocab: mi.VocabSize,
		Quant: strings.ToValidUTF8(mi.Quant, "?")}
	for _, t := range g.Tensors {
		if !utf8.ValidString(t.Name) {
			return nil, nil, cid.Undef, &fileError{path, fmt.Errorf("tensor name %q is not UTF-8", t.Name)}
		}
	}
	if len(m.Name) > 256 {
		m.Name = strings.ToValidUTF8(m.Name[:256], "")
	}
	sums, fileSum, err := hashTensors(f, st.Size(), g)
	if err != nil {
		return nil, nil, cid.Undef, fmt.Errorf("shards: hashing %s: %w", path, err)
	}
	fc, _ := DigestCID(fileSum)
	m.File = fc.String()
	for i, t := range g.Tensors {
		m.Tensors = append(m.Tensors, ManifestTensor{Name: t.Name, Type: t.Type, Dims: t.Dims, Size: t.Size, SHA256: sums[i]})
	}
	if err := m.validate(); err != nil {
		return nil, nil, cid.Undef, &fileError{path, err}
	}
	b := m.Encode()
	return m, b, ManifestCID(b), nil
}

// hashTensors reads the file once, start to end, hashing all of it and,
// on the way, each tensor's data. It returns the tensors' hashes (hex, in
// g.Tensors order) and the whole file's sha2-256.
func hashTensors(r io.ReaderAt, size int64, g *GGUF) ([]string, []byte, error) {
	type span struct {
		i        int
		off, end int64
		h        hash.Hash
	}
	spans := make([]span, len(g.Tensors))
	for i, t := range g.Tensors {
		off := g.DataOffset + int64(t.Offset)
		spans[i] = span{i: i, off: off, end: off + int64(t.Size), h: sha256.New()}
	}
	slices.SortFunc(spans, func(a, b span) int { return int(min(max(a.off-b.off, -1), 1)) })
	file := sha256.New()
	buf := make([]byte, 1<<20)
	var pos int64
	first := 0 // spans before first have ended
	for pos < size {
		n, err := r.ReadAt(buf[:min(int64(len(buf)), size-pos)], pos)
		if n == 0 && err != nil {
			return nil, nil, err
		}
		chunk := buf[:n]
		file.Write(chunk)
		end := pos + int64(n)
		for j := first; j < len(spans) && spans[j].off < end; j++ {
			s := &spans[j]
			lo, hi := max(s.off, pos), min(s.end, end)
			if lo < hi {
				s.h.Write(chunk[lo-pos : hi-pos])
			}
		}
		for first < len(spans) && spans[first].end <= end {
			first++
		}
		pos = end
	}
	out := make([]string, len(spans))
	for _, s := range spans {
		if s.end > size {
			return nil, nil, fmt.Errorf("tensor %q runs past the end of the file", g.Tensors[s.i].Name)
		}
		out[s.i] = hex.EncodeToString(s.h.Sum(nil))
	}
	return out, file.Sum(nil), nil
}

// Experts reports whether the model is a mixture of experts: a tensor
// of routed experts, named as llama.cpp and ollama name them
// (blk.N.ffn_gate_exps.weight, ffn_up_exps, ffn_down_exps, ffn_gate_up_exps).
func (m *Manifest) Experts() bool {
	for _, t := range m.Tensors {
		if strings.Contains(t.Name, "_exps.") {
			return true
		}
	}
	return false
}

// Quantized reports whether any tensor of the model is stored in a
// quantized type (anything but F32, F16 and BF16), from the tensors
// themselves rather than the header's file type.
func (m *Manifest) Quantized() bool {
	for _, t := range m.Tensors {
		if t.Type.Quantized() {
			return true
		}
	}
	return false
}

// Quantized reports whether any tensor of the file is stored in a
// quantized type, as Manifest.Quantized.
func (g *GGUF) Quantized() bool {
	for _, t := range g.Tensors {
		if t.Type.Quantized() {
			return true
		}
	}
	return false
}

// Quantized reports whether t is a quantized type: anything but F32, F16
// and BF16.
func (t GGMLType) Quantized() bool {
	switch t.String() {
	case "F32", "F16", "BF16":
		return false
	}
	return true
}
