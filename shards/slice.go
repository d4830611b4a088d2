package shards

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ErrOverwriteInput is returned when a slice's output file is its input
// (by any path, symlink or hard link): writing it would destroy the model.
var ErrOverwriteInput = errors.New("shards: the output file is the input file")

// Slice writes to out a GGUF holding what a pipeline stage running layers
// [a,b) needs: the tensors blk.a .. blk.b-1, every tensor not tied to a layer
// or to the ends (such as rope_freqs), token_embd when a == 0, and
// output_norm and the output head when b is the last layer. All metadata is
// kept unchanged, including block_count (layer indices keep their meaning)
// and the tokenizer (an originator can tokenize with any stage's file).
//
// Two details keep ollama's loader from holding the embedding matrix twice:
// with tied embeddings (no output.weight) the last stage gets token_embd
// written as output.weight; and a first stage that is not also the last gets
// a 1-row placeholder output.weight, since ollama otherwise copies
// token_embd into the head of any file without one.
//
// in may itself be a slice, as long as it holds [a,b). out is written
// through a temp file in its directory renamed into place, so a failure
// leaves no partial file and never touches in; an out that is in is refused
// with ErrOverwriteInput. It returns the ModelInfo of the written file.
func Slice(in, out string, a, b int) (ModelInfo, error) {
	return slice(in, out, a, b, func(*GGUF, ModelInfo) (string, []byte, error) { return "", nil, nil })
}

// SliceFile is Slice for a file given by a user, outside any store: the
// slice records its model's CID under SourceCIDKey, as every slice a store
// cuts does, so a peer serving it knows (and announces) which model it
// belongs to. The CID is in's own when in is a full model, else the one in
// records (a slice of a slice); a slice that records none is refused with
// ErrNoSource. The result is byte-identical to the store's slice of the
// same range (see Store.EnsureSlice).
func SliceFile(in, out string, a, b int) (ModelInfo, error) {
	return slice(in, out, a, b, func(g *GGUF, mi ModelInfo) (string, []byte, error) {
		if src := g.String(SourceCIDKey); src != "" {
			return src, nil, nil // the manifest, if it has one, is kept with the rest
		}
		if !mi.isFull() {
			return "", nil, &fileError{in, fmt.Errorf("%w: a slice that does not record its model's CID (%s)", ErrNoSource, SourceCIDKey)}
		}
		_, b, root, err := BuildManifest(in)
		if err != nil {
			return "", nil, err
		}
		return root.String(), b, nil
	})
}

// ErrNoSource is returned by SliceFile for an input that neither is a full
// model nor records the CID of the model it was cut from.
var ErrNoSource = errors.New("shards: unknown source model")

// isFull reports whether the file holds the whole model: every layer, the
// embedding and the head.
func (mi ModelInfo) isFull() bool {
	return mi.LayerRange == [2]int{0, mi.Layers} && mi.HasEmbedding && mi.HasHead
}

// slice writes the slice; source names the model CID to record under
// SourceCIDKey ("" records nothing).
func slice(in, out string, a, b int, source func(*GGUF, ModelInfo) (string, []byte, error)) (ModelInfo, error) {
	f, err := os.Open(in)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("shards: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ModelInfo{}, fmt.Errorf("shards: %w", err)
	}
	g, err := ReadGGUF(f, st.Size())
	if err != nil {
		return ModelInfo{}, &fileError{in, err}
	}
	if ost, err := os.Stat(out); err == nil && os.SameFile(st, ost) {
		return ModelInfo{}, fmt.Errorf("%w: %s is %s", ErrOverwriteInput, out, in)
	}
	mi := g.ModelInfo()
	n := mi.Layers
	if a < 0 || b > n || a >= b {
		return ModelInfo{}, &fileError{in, fmt.Errorf("%w: [%d,%d) of %d layers", ErrLayerRange, a, b, n)}
	}
	if a < mi.LayerRange[0] || b > mi.LayerRange[1] {
		return ModelInfo{}, &fileError{in, fmt.Errorf("%w: asked [%d,%d), file holds layers [%d,%d)", ErrLayerRange, a, b, mi.LayerRange[0], mi.LayerRange[1])}
	}
	first, last := a == 0, b == n
	if first && !mi.HasEmbedding {
		return ModelInfo{}, &fileError{in, fmt.Errorf("%w: first stage needs token_embd, file has none", ErrLayerRange)}
	}
	if last && !mi.HasHead {
		return ModelInfo{}, &fileError{in, fmt.Errorf("%w: last stage needs the output head, file has none", ErrLayerRange)}
	}
	_, hasOutput := g.Tensor("output.weight")
	embd, hasEmbd := g.Tensor("token_embd.weight")

	type span struct {
		off, size int64 // absolute offset in in; size < 0: zeros of -size
	}
	src, man, err := source(g, mi)
	if err != nil {
		return ModelInfo{}, err
	}
	kvs, err := withSourceKV(g, src, man)
	if err != nil {
		return ModelInfo{}, &fileError{in, err}
	}
	og := &GGUF{KVs: kvs, Alignment: g.Alignment}
	var srcs []span
	keep := func(t TensorInfo, name string) {
		og.Tensors = append(og.Tensors, TensorInfo{Name: name, Dims: t.Dims, Type: t.Type})
		srcs = append(srcs, span{g.DataOffset + int64(t.Offset), int64(t.Size)})
	}
	for _, t := range g.Tensors {
		if l := layerOf(t.Name); l >= 0 {
			if l >= a && l < b {
				keep(t, t.Name)
			}
			continue
		}
		switch t.Name {
		case "token_embd.weight":
			if first {
				keep(t, t.Name)
			}
		case "output_norm.weight":
			if last {
				keep(t, t.Name)
			}
		case "output.weight":
			if last {
				keep(t, t.Name)
			}
		default:
			keep(t, t.Name)
		}
	}
	switch {
	case last && !first && !hasOutput && hasEmbd:
		keep(embd, "output.weight") // tied head
	case first && !last && mi.Hidden > 0:
		og.Tensors = append(og.Tensors, TensorInfo{Name: "output.weight", Dims: []uint64{uint64(mi.Hidden), 1}, Type: GGMLF32})
		srcs = append(srcs, span{0, -4 * int64(mi.Hidden)})
	}

	err = writeAtomic(out, 0o644, func(w io.Writer) error {
		return WriteGGUF(w, og, func(i int, w io.Writer) error {
			s := srcs[i]
			if s.size < 0 {
				_, err := w.Write(make([]byte, -s.size))
				return err
			}
			_, err := io.Copy(w, io.NewSectionReader(f, s.off, s.size))
			return err
		})
	})
	if err != nil {
		return ModelInfo{}, fmt.Errorf("shards: slicing %s into %s: %w", in, out, err)
	}
	return ReadModelInfo(out)
}

// writeAtomic writes dst through a synced temp file in dst's directory,
// renamed into place; mode 0 keeps the temp file's 0600.
func writeAtomic(dst string, mode os.FileMode, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(dst), ".tmp-*")
	if err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	if mode != 0 {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = write(f)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), dst)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("shards: writing %s: %w", dst, err)
	}
	return nil
}
