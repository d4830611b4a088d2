package shards

import (
	"fmt"
	"io"
	"os"
)

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
// in may itself be a slice, as long as it holds [a,b). It returns the
// ModelInfo of the written file.
func Slice(in, out string, a, b int) (ModelInfo, error) {
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

	type src struct {
		off, size int64 // absolute offset in in; size < 0: zeros of -size
	}
	og := &GGUF{KVs: g.KVs, Alignment: g.Alignment}
	var srcs []src
	keep := func(t TensorInfo, name string) {
		og.Tensors = append(og.Tensors, TensorInfo{Name: name, Dims: t.Dims, Type: t.Type})
		srcs = append(srcs, src{g.DataOffset + int64(t.Offset), int64(t.Size)})
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
		srcs = append(srcs, src{0, -4 * int64(mi.Hidden)})
	}

	wf, err := os.Create(out)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("shards: %w", err)
	}
	err = WriteGGUF(wf, og, func(i int, w io.Writer) error {
		s := srcs[i]
		if s.size < 0 {
			_, err := w.Write(make([]byte, -s.size))
			return err
		}
		_, err := io.Copy(w, io.NewSectionReader(f, s.off, s.size))
		return err
	})
	if cerr := wf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out)
		return ModelInfo{}, fmt.Errorf("shards: slicing %s into %s: %w", in, out, err)
	}
	return ReadModelInfo(out)
}
