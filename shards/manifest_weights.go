package shards

// Weights is how a model's weight bytes split between the parts a
// pipeline places apart, by the rules Slice cuts by: each layer's blocks go
// to the stage running it, the embedding to the first stage only, the final
// norm and the output head to the last stage only.
type Weights struct {
	Layers []uint64 // bytes of blk.N's tensors, by N (len: the manifest's Layers)
	Embed  uint64   // token_embd
	// EmbedRows is token_embd's row count (the vocabulary): a token's
	// lookup reads Embed/EmbedRows bytes.
	EmbedRows uint64
	// Head is output_norm and the output matrix; with a tied head (no
	// output.weight) the embedding again: the last stage's slice holds it
	// under the head's name, and the engine loads a whole model's tied
	// embedding twice (see engine.Estimate).
	Head uint64
	// Shared is every other tensor (such as rope_freqs): each stage holds
	// a copy.
	Shared uint64
}

// Weights tallies the manifest's tensors by part. A manifest that passed
// validation has sizes whose sum fits its file's size, so the sums do not
// overflow; tensor names naming a layer at or past Layers are not counted
// (validation refuses them).
func (m *Manifest) Weights() Weights {
	w := Weights{Layers: make([]uint64, max(m.Layers, 0))}
	var embd, out uint64
	hasOut := false
	for _, t := range m.Tensors {
		if l := layerOf(t.Name); l >= 0 {
			if l < len(w.Layers) {
				w.Layers[l] += t.Size
			}
			continue
		}
		switch t.Name {
		case "token_embd.weight":
			embd = t.Size
			w.EmbedRows = 1
			for _, d := range t.Dims[min(1, len(t.Dims)):] {
				w.EmbedRows *= d
			}
		case "output_norm.weight":
			w.Head += t.Size
		case "output.weight":
			out, hasOut = t.Size, true
		default:
			w.Shared += t.Size
		}
	}
	w.Embed = embd
	if hasOut {
		w.Head += out
	} else {
		w.Head += embd
	}
	return w
}
