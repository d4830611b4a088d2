package engine

import (
	"fmt"

	"github.com/ollama/ollama/fs"
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model/models/olmo3"
)

// olmo3Arch runs OLMo 3 (model/models/olmo3): norms after attention and
// after the MLP only (none before), RMS norms over the whole query and key
// projections; the layers attention.sliding_window_pattern marks attend
// over a sliding window (their own KV cache, their rope unscaled), the
// others globally with the file's (YaRN) rope scaling.
type olmo3Arch struct {
	m   *olmo3.Model
	eps float32
	swa []bool // per layer: over the sliding window
	win int32
}

func newOLMo3Arch(m *olmo3.Model, cfg fs.Config) (olmo3Arch, error) {
	swa := cfg.Bools("attention.sliding_window_pattern")
	if len(swa) != len(m.Layers) {
		// ollama's own forward pass would index past the pattern.
		return olmo3Arch{}, fmt.Errorf("%w: olmo3 attention.sliding_window_pattern has %d entries for %d layers", ErrNotGGUF, len(swa), len(m.Layers))
	}
	return olmo3Arch{m: m, eps: cfg.Float("attention.layer_norm_rms_epsilon"), swa: swa, win: int32(cfg.Uint("attention.sliding_window"))}, nil
}

func (a olmo3Arch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TokenEmbedding.Forward(ctx, ids)
}

func (a olmo3Arch) layer(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	if wc, ok := c.(*kvcache.WrapperCache); ok {
		typ := 1 // the global cache
		if a.swa[i] {
			typ = 0
		}
		wc.SetLayerType(typ)
	}
	return a.m.Layers[i].Forward(ctx, h, pos, out, c, a.m, a.swa[i])
}

func (a olmo3Arch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	return a.m.Output.Forward(ctx, a.m.OutputNorm.Forward(ctx, h, a.eps))
}

// newCache is olmo3.New's cache keeping rewind positions behind the window.
func (a olmo3Arch) newCache(rewind int32) kvcache.Cache {
	return windowedCache(a.win, rewind, a.m.Shift)
}

func (a olmo3Arch) hasEmbed() bool { return embedOK(a.m.TokenEmbedding) }
func (a olmo3Arch) hasHead() bool  { return headOK(a.m.OutputNorm, a.m.Output) }
func (a olmo3Arch) hasLayer(i int) bool {
	l := a.m.Layers[i]
	sa := l.SelfAttention
	return normOK(l.PostAttentionNorm) && normOK(l.PostFFWNorm) && sa != nil &&
		normOK(sa.QNorm) && normOK(sa.KNorm) &&
		linearOK(sa.Query) && linearOK(sa.Key) && linearOK(sa.Value) && linearOK(sa.Output) &&
		l.MLP != nil && linearOK(l.MLP.Gate) && linearOK(l.MLP.Up) && linearOK(l.MLP.Down)
}
