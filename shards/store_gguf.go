package shards

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"slices"
)

// WriteHeader writes to out a GGUF holding every metadata key of the GGUF
// at in (architecture, hyperparameters, tokenizer, chat template) and no
// tensors: what an originator needs to tokenize and template prompts
// without holding any weights.
func WriteHeader(in, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	err = writeHeader(in, f, "")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out)
		return err
	}
	return nil
}

// writeHeader writes in's metadata with zero tensors to w, adding
// SourceCIDKey = source unless source is empty or in already carries it.
func writeHeader(in string, w io.Writer, source string) error {
	g, err := ReadGGUFFile(in)
	if err != nil {
		return err
	}
	kvs, err := withSourceKV(g, source, nil)
	if err != nil {
		return fmt.Errorf("shards: %s: %w", in, err)
	}
	h := &GGUF{KVs: kvs, Alignment: g.Alignment}
	return WriteGGUF(w, h, func(int, io.Writer) error { return errors.New("no tensors") })
}

// ManifestKey is the GGUF metadata key under which a slice carries its
// model's manifest (JSON), so that any holder of a slice can serve the
// manifest its layers are checked against. The manifest is checked
// against SourceCIDKey's root before it is used.
const ManifestKey = "swarm.manifest"

// withSourceKV returns g's metadata with SourceCIDKey = source and, when
// given, ManifestKey = manifest appended. Appending (never inserting)
// keeps a slice of a slice byte-identical to a slice of the full model.
func withSourceKV(g *GGUF, source string, manifest []byte) ([]KV, error) {
	if source == "" {
		return g.KVs, nil
	}
	kvs := g.KVs
	if v, ok := g.Get(SourceCIDKey); ok {
		if v != source {
			return nil, fmt.Errorf("%w: it comes from model %v, not %s", ErrBadShard, v, source)
		}
	} else {
		kvs = append(slices.Clip(kvs), KV{Key: SourceCIDKey, Type: TypeString, Value: source})
	}
	if _, ok := g.Get(ManifestKey); !ok && manifest != nil {
		kvs = append(slices.Clip(kvs), KV{Key: ManifestKey, Type: TypeString, Value: string(manifest)})
	}
	return kvs, nil
}

// withProvenance writes dst (atomically) as the GGUF at in with
// SourceCIDKey = modelCID, and returns dst's CID and size. Tensor data is
// copied unchanged: only the metadata grows.
func (s *Store) withProvenance(in, dst, modelCID string) (string, int64, error) {
	f, err := os.Open(in)
	if err != nil {
		return "", 0, fmt.Errorf("shards: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, fmt.Errorf("shards: %w", err)
	}
	g, err := ReadGGUF(f, st.Size())
	if err != nil {
		return "", 0, fmt.Errorf("shards: %s: %w", in, err)
	}
	var man []byte
	if _, b, ok := s.Manifest(modelCID); ok {
		man = b
	}
	kvs, err := withSourceKV(g, modelCID, man)
	if err != nil {
		return "", 0, fmt.Errorf("shards: %s: %w", in, err)
	}
	og := &GGUF{KVs: kvs, Alignment: g.Alignment}
	for _, t := range g.Tensors {
		og.Tensors = append(og.Tensors, TensorInfo{Name: t.Name, Dims: t.Dims, Type: t.Type})
	}
	var fc string
	var size int64
	err = s.writeFileAtomic(dst, func(w io.Writer) error {
		h := newHashWriter(w)
		err := WriteGGUF(h, og, func(i int, w io.Writer) error {
			t := g.Tensors[i]
			_, err := io.Copy(w, io.NewSectionReader(f, g.DataOffset+int64(t.Offset), int64(t.Size)))
			return err
		})
		fc, size = h.cid(), h.n
		return err
	})
	return fc, size, err
}

// hashWriter passes writes through while hashing and counting them, so a
// file's CID is known the moment it is written.
type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func newHashWriter(w io.Writer) *hashWriter { return &hashWriter{w: w, h: sha256.New()} }

func (h *hashWriter) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

func (h *hashWriter) cid() string {
	c, _ := DigestCID(h.h.Sum(nil)) // a sha256 digest always encodes
	return c.String()
}

// AdoptManifest stores the manifest a slice file carries (ManifestKey),
// after checking it against the root the file names (SourceCIDKey), and
// returns that root. A file carrying none, or a file CID as its source,
// adopts nothing ("" and no error).
func (s *Store) AdoptManifest(path string) (string, error) {
	g, err := ReadGGUFFile(path)
	if err != nil {
		return "", err
	}
	src, man := g.String(SourceCIDKey), g.String(ManifestKey)
	c, err := ParseModelCID(src)
	if err != nil || !IsRoot(c) || man == "" {
		return "", nil
	}
	if _, err := s.PutManifest(c.String(), []byte(man)); err != nil {
		return "", fmt.Errorf("shards: %s: %w", path, err)
	}
	return c.String(), nil
}
