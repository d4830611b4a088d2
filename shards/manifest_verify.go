package shards

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// ErrMismatch: a file (slice, header or model) that does not match the
// manifest of the model it claims to belong to: poisoned, corrupt or of
// another model. Such a file is never stored or used.
var ErrMismatch = errors.New("shards: file does not match the model's manifest")

// expectedTensor is a tensor a slice of the model must hold.
type expectedTensor struct {
	ManifestTensor
	zero bool // the first stage's placeholder head: zeros, not a manifest tensor
}

// expected lists the tensors a slice of layers [a,b) holds, by the rules
// Slice cuts by: the layers' blocks, the embedding in the first stage, the
// head in the last (the embedding under the head's name when the head is
// tied), a one-row zero placeholder head in a first stage that is not
// also the last, and every tensor that belongs to no layer.
func (m *Manifest) expected(a, b int) []expectedTensor {
	first, last := a == 0, b == m.Layers
	var out []expectedTensor
	_, hasOutput := m.Tensor("output.weight")
	embd, hasEmbd := m.Tensor("token_embd.weight")
	for _, t := range m.Tensors {
		if l := layerOf(t.Name); l >= 0 {
			if l >= a && l < b {
				out = append(out, expectedTensor{ManifestTensor: t})
			}
			continue
		}
		switch t.Name {
		case "token_embd.weight":
			if first {
				out = append(out, expectedTensor{ManifestTensor: t})
			}
		case "output_norm.weight", "output.weight":
			if last {
				out = append(out, expectedTensor{ManifestTensor: t})
			}
		default:
			out = append(out, expectedTensor{ManifestTensor: t})
		}
	}
	switch {
	case last && !first && !hasOutput && hasEmbd:
		tied := embd
		tied.Name = "output.weight"
		out = append(out, expectedTensor{ManifestTensor: tied})
	case first && !last:
		dims := []uint64{uint64(m.Hidden), 1}
		size, _ := tensorBytes(GGMLF32, dims)
		out = append(out, expectedTensor{ManifestTensor: ManifestTensor{Name: "output.weight", Type: GGMLF32, Dims: dims, Size: size}, zero: true})
	}
	return out
}

// VerifySlice checks that the GGUF at path holds exactly layers [a,b) of
// the model m describes (root is m's CID): the metadata the manifest
// commits to, and every tensor a slice of [a,b) must hold, each with the
// manifest's type, shape and data hash, and nothing else. A full model is
// the slice [0,Layers). Errors wrap ErrMismatch and name what differs.
func (m *Manifest) VerifySlice(path, root string, a, b int) error {
	if a < 0 || a >= b || b > m.Layers {
		return fmt.Errorf("%w: %s: layers [%d,%d) of a %d-layer model", ErrLayerRange, path, a, b, m.Layers)
	}
	return m.verifyFile(path, root, m.expected(a, b))
}

// VerifyHeader checks that the GGUF at path is the model's header: its
// metadata (tokenizer and chat template included) is what the manifest
// commits to, and it holds no tensor.
func (m *Manifest) VerifyHeader(path, root string) error {
	return m.verifyFile(path, root, nil)
}

func (m *Manifest) verifyFile(path, root string, want []expectedTensor) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrMismatch, path, fmt.Sprintf(format, args...))
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	g, err := ReadGGUF(f, st.Size())
	if err != nil {
		return bad("not a readable GGUF: %v", err)
	}
	if src := g.String(SourceCIDKey); src != "" && src != root && src != m.File {
		return bad("it says it comes from model %s", trunc(src))
	}
	meta, err := metaHash(g)
	if err != nil {
		return bad("%v", err)
	}
	if meta != m.Meta {
		return bad("metadata (tokenizer, template, shape) hashes to %.12s…, the manifest commits to %.12s…", meta, m.Meta)
	}
	if len(g.Tensors) != len(want) {
		return bad("%d tensors, a slice of this model holds %d", len(g.Tensors), len(want))
	}
	byName := make(map[string]expectedTensor, len(want))
	for _, t := range want {
		byName[t.Name] = t
	}
	for _, t := range g.Tensors {
		w, ok := byName[t.Name]
		if !ok {
			return bad("tensor %q does not belong in this slice", trunc(t.Name))
		}
		delete(byName, t.Name)
		if t.Type != w.Type || !slices.Equal(t.Dims, w.Dims) {
			return bad("tensor %q is %v %v, the manifest says %v %v", t.Name, t.Type, t.Dims, w.Type, w.Dims)
		}
		sum, zero, err := hashSection(io.NewSectionReader(f, g.DataOffset+int64(t.Offset), int64(t.Size)))
		if err != nil {
			return fmt.Errorf("shards: reading %s: tensor %q: %w", path, t.Name, err)
		}
		if w.zero {
			if !zero {
				return bad("placeholder tensor %q is not all zeros", t.Name)
			}
			continue
		}
		if sum != w.SHA256 {
			return bad("tensor %q data hashes to %.12s…, the manifest says %.12s…", t.Name, sum, w.SHA256)
		}
	}
	return nil
}

// hashSection hashes r to its end and reports whether every byte was zero.
func hashSection(r io.Reader) (string, bool, error) {
	h := sha256.New()
	buf := make([]byte, 256<<10)
	zero := true
	for {
		n, err := r.Read(buf)
		if n > 0 {
			h.Write(buf[:n])
			if zero {
				for _, c := range buf[:n] {
					if c != 0 {
						zero = false
						break
					}
				}
			}
		}
		if err == io.EOF {
			return hex.EncodeToString(h.Sum(nil)), zero, nil
		}
		if err != nil {
			return "", false, err
		}
	}
}

// boundSlack covers what a slice or header adds to the model's own
// metadata: the swarm.* keys, and a tensor table's alignment.
const boundSlack = 1 << 20

// headerBound is the most bytes the model's header-only file can take:
// the whole file's metadata and tensor table (its size less its tensor
// data), the manifest it may carry, and slack.
func (m *Manifest) headerBound() int64 {
	meta := m.Size
	for _, t := range m.Tensors {
		meta -= int64(t.Size)
	}
	return max(meta, 0) + int64(len(m.Encode())) + boundSlack
}

// sliceBound is the most bytes a slice of layers [a,b) can take: the
// header's bound and the tensors the slice holds, each padded.
func (m *Manifest) sliceBound(a, b int) int64 {
	size := m.headerBound()
	for _, t := range m.expected(a, b) {
		size += int64(t.Size) + 64
	}
	return size
}
