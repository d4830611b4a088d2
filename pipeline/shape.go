package pipeline

import (
	"fmt"
	"math"
	"strconv"

	"github.com/llmswarm/llmswarm/shards"
)

// maxEndLayers bounds EndCost's terms. A real head costs a few to a few
// tens of layers (Qwen3-0.6B's 151936×1024 head: ~10 of its layers; a
// 1-layer toy with a 256k vocabulary: a few hundred); one dearer than the
// largest model's whole stack of layers describes no model, and the bound
// keeps nanosecond sums far from overflow.
const maxEndLayers = MaxModelLayers

// EndCost is what a model's two ends cost per token, in layers of the
// stage that runs them (times its MsPerLayer). Decode reads every weight
// once per token and is memory-bound, so a part's cost is its bytes over a
// layer's: that counts quantization (a q6_k head behind q4_k layers costs
// its own bytes).
//
// Sampling is not counted: it reads the vocabulary's logits once, 1/hidden
// of what the head's f32 weights take (1/(hidden/8) at 4 bits), below what
// a stage's measurement resolves.
type EndCost struct {
	// Head is the final norm and the output head: charged to the stage
	// holding the last layer.
	Head float64 `json:"head"`
	// Embed is the token's embedding lookup, one row of token_embd:
	// charged to the first stage.
	Embed float64 `json:"embed"`
}

// ModelShape is what Partition needs to know about a model.
type ModelShape struct {
	Layers     int
	LayerBytes int64
	// Ends is the time of the model's ends; zero (no manifest to go by)
	// counts neither.
	Ends EndCost
	// HeadBytes is the memory the last stage needs beside its layers (the
	// final norm and the head, a tied head's embedding included);
	// EmbedBytes the first stage's (token_embd). Slices carry them there
	// only (shards.Slice).
	HeadBytes, EmbedBytes int64
	// HiddenBytesPerToken (2×hidden for fp16) is carried for callers that
	// print per-hop traffic. The cost model charges a hop its RTT only:
	// Device has no bandwidth, and a few KiB per token is latency-bound.
	HiddenBytesPerToken int64
}

// ShapeFromManifest derives a model's shape from its manifest's tensor
// sizes: a layer's bytes are the mean of its blocks' (rounded up), the
// ends' costs are their bytes over that mean (the embedding: one row of
// it). A manifest whose layers hold no bytes, or whose ends cost more than
// maxEndLayers layers, is refused with ErrBadShape.
func ShapeFromManifest(m *shards.Manifest) (ModelShape, error) {
	if m == nil {
		return ModelShape{}, fmt.Errorf("%w: no manifest", ErrBadShape)
	}
	w := m.Weights()
	var total uint64
	for _, b := range w.Layers {
		if total += b; total < b || total > math.MaxInt64 {
			return ModelShape{}, fmt.Errorf("%w: the manifest's layers hold more bytes than an int64 counts", ErrBadShape)
		}
	}
	if len(w.Layers) == 0 || total == 0 {
		return ModelShape{}, fmt.Errorf("%w: the manifest's %d layers hold no weights", ErrBadShape, m.Layers)
	}
	if w.Head > math.MaxInt64 || w.Embed > math.MaxInt64 {
		return ModelShape{}, fmt.Errorf("%w: the manifest's head (%d bytes) or embedding (%d bytes) is larger than an int64 counts",
			ErrBadShape, w.Head, w.Embed)
	}
	n := uint64(len(w.Layers))
	mean := float64(total) / float64(n)
	s := ModelShape{
		Layers:              m.Layers,
		LayerBytes:          int64((total + n - 1) / n),
		HeadBytes:           int64(w.Head),
		EmbedBytes:          int64(w.Embed),
		HiddenBytesPerToken: 2 * int64(max(m.Hidden, 0)),
		Ends:                EndCost{Head: float64(w.Head) / mean},
	}
	if w.EmbedRows > 0 {
		s.Ends.Embed = float64(w.Embed) / float64(w.EmbedRows) / mean
	}
	if err := s.validate(); err != nil {
		return ModelShape{}, fmt.Errorf("%w (from the manifest: %d bytes a layer, head %d bytes, embedding %d bytes)",
			err, s.LayerBytes, w.Head, w.Embed)
	}
	return s, nil
}

// validate refuses a shape Partition cannot plan for. The byte bounds keep
// every stage's memory sum within an int64.
func (m ModelShape) validate() error {
	if m.Layers <= 0 || m.Layers > MaxModelLayers {
		return fmt.Errorf("%w: %d layers (want 1..%d)", ErrBadShape, m.Layers, MaxModelLayers)
	}
	if m.LayerBytes <= 0 || m.LayerBytes > math.MaxInt64/(2*MaxModelLayers) {
		return fmt.Errorf("%w: %d bytes per layer", ErrBadShape, m.LayerBytes)
	}
	if m.HeadBytes < 0 || m.HeadBytes > math.MaxInt64/4 {
		return fmt.Errorf("%w: %d bytes of output head", ErrBadShape, m.HeadBytes)
	}
	if m.EmbedBytes < 0 || m.EmbedBytes > math.MaxInt64/4 {
		return fmt.Errorf("%w: %d bytes of embedding", ErrBadShape, m.EmbedBytes)
	}
	if m.HiddenBytesPerToken < 0 {
		return fmt.Errorf("%w: %d hidden bytes per token", ErrBadShape, m.HiddenBytesPerToken)
	}
	return m.Ends.validate()
}

// validate refuses NaN, negative, infinite and absurd costs.
func (e EndCost) validate() error {
	for _, t := range []struct {
		what string
		v    float64
	}{{"output head", e.Head}, {"embedding", e.Embed}} {
		if !(t.v >= 0 && t.v <= maxEndLayers) { // false for NaN too
			return fmt.Errorf("%w: the %s costs %s layers' time (want 0..%d)",
				ErrBadShape, t.what, strconv.FormatFloat(t.v, 'g', 4, 64), maxEndLayers)
		}
	}
	return nil
}

// endsFree reports whether the ends cost nothing, in time or memory: then which
// stage holds them does not matter.
func (m ModelShape) endsFree() bool {
	return m.Ends == EndCost{} && m.HeadBytes == 0 && m.EmbedBytes == 0
}
