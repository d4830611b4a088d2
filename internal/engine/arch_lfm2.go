package engine

import (
	"github.com/ollama/ollama/fs"
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model/models/lfm2"
)

// lfm2Arch runs LFM2's dense text model (model/models/lfm2): layers whose
// operator is either attention (with query and key norms) or a short
// convolution whose recurrent state (the last shortconv.l_cache-1 inputs)
// the cache keeps per layer, as it keeps attention's KV. A stage keeps the
// state of its own layers: only the hidden state crosses between stages.
// Vision weights are never run: text only.
type lfm2Arch struct {
	m      *lfm2.Model
	eps    float32
	hidden int
	dConv  int
}

func newLFM2Arch(m *lfm2.Model, cfg fs.Config) lfm2Arch {
	return lfm2Arch{
		m:      m,
		eps:    cfg.Float("attention.layer_norm_rms_epsilon"),
		hidden: int(cfg.Uint("embedding_length")),
		dConv:  max(0, int(cfg.Uint("shortconv.l_cache"))-1),
	}
}

func (a lfm2Arch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TokenEmbedding.Forward(ctx, ids)
}

func (a lfm2Arch) layer(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	return a.m.Layers[i].Forward(ctx, i, h, pos, out, c.(*lfm2.HybridCache), &a.m.Options)
}

func (a lfm2Arch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	return a.m.Output.Forward(ctx, a.m.OutputNorm.Forward(ctx, h, a.eps))
}

// newCache is lfm2.New's cache. It cannot drop positions except back to a
// checkpoint of the recurrent state (Session.Truncate).
func (a lfm2Arch) newCache(int32) kvcache.Cache {
	return lfm2.NewHybridCache(a.m.Shift, a.hidden, a.dConv)
}

// isolated: the short convolution needs every sequence of a graph to bring
// the same number of positions, which batching sessions does not give.
func (a lfm2Arch) isolated() {}

func (a lfm2Arch) hasEmbed() bool { return embedOK(a.m.TokenEmbedding) }
func (a lfm2Arch) hasHead() bool  { return headOK(a.m.OutputNorm, a.m.Output) }

// hasLayer: every tensor Validate wants of the layer (lfm2Missing).
func (a lfm2Arch) hasLayer(i int) bool { return len(lfm2Missing(a.m, i)) == 0 }
