package engine

import (
	"math"

	"github.com/ollama/ollama/fs"
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model/models/gemma3"
)

// gemma3Arch runs Gemma 3's text model (model/models/gemma3, model_text.go
// and model.go): the embedding scaled by sqrt(hidden); layers with norms
// after attention and after the MLP as well as before; every sixth layer
// global, the others attending over a sliding window (their own KV cache);
// the head's logits soft-capped where the file asks for it. Vision weights
// (v.*, mm.*) are never run: text only.
type gemma3Arch struct {
	m       *gemma3.Model
	eps     float32
	scale   float64 // sqrt(embedding_length)
	softcap float32
	window  int32 // attention.sliding_window; 0: none
}

// gemma3GlobalEvery is gemma3's gemmaGlobalCacheCount: layer i is global
// when (i+1)%6 == 0, which TextModel.Forward decides so whatever the
// file's sliding_window_pattern.
const gemma3GlobalEvery = 6

func newGemma3Arch(m *gemma3.Model, cfg fs.Config) gemma3Arch {
	a := gemma3Arch{
		m:       m,
		eps:     cfg.Float("attention.layer_norm_rms_epsilon", 1e-06),
		scale:   math.Sqrt(float64(cfg.Uint("embedding_length"))),
		softcap: cfg.Float("final_logit_softcapping", 0),
		window:  int32(cfg.Uint("attention.sliding_window")),
	}
	// As newTextModel corrects it: Gemma 3 1B files carry a softcap of 30
	// that the model does not use.
	if uint32(a.window) < cfg.Uint("context_length") && cfg.Uint("block_count") == 26 {
		a.softcap = 0
	}
	return a
}

func (a gemma3Arch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TextModel.TokenEmbedding.Forward(ctx, ids).Scale(ctx, a.scale)
}

func (a gemma3Arch) layer(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	if wc, ok := c.(*kvcache.WrapperCache); ok {
		// The layer's cache: 0 the sliding window's, 1 the global one (as
		// TextModel.Forward; its SetCausal only matters for images).
		typ := 0
		if (i+1)%gemma3GlobalEvery == 0 {
			typ = 1
		}
		wc.SetLayerType(typ)
	}
	return a.m.TextModel.Layers[i].Forward(ctx, i, h, pos, out, c, a.m.TextModel.TextConfig)
}

func (a gemma3Arch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	return softcap(ctx, a.m.TextModel.Output.Forward(ctx, a.m.TextModel.OutputNorm.Forward(ctx, h, a.eps)), a.softcap)
}

// newCache is gemma3.New's cache (a sliding-window cache beside a causal
// one) with rewind positions kept behind the window.
func (a gemma3Arch) newCache(rewind int32) kvcache.Cache {
	return windowedCache(a.window, rewind, a.m.TextModel.Shift)
}

func (a gemma3Arch) hasEmbed() bool { return embedOK(a.m.TextModel.TokenEmbedding) }
func (a gemma3Arch) hasHead() bool  { return headOK(a.m.TextModel.OutputNorm, a.m.TextModel.Output) }
func (a gemma3Arch) hasLayer(i int) bool {
	l := a.m.TextModel.Layers[i]
	sa := l.SelfAttention
	return normOK(l.AttentionNorm) && normOK(l.PostAttentionNorm) && normOK(l.MLPNorm) &&
		normOK(l.PostMLPNorm) && sa != nil && normOK(sa.QueryNorm) && normOK(sa.KeyNorm) &&
		linearOK(sa.Query) && linearOK(sa.Key) && linearOK(sa.Value) && linearOK(sa.Output) &&
		l.MLP != nil && linearOK(l.MLP.Gate) && linearOK(l.MLP.Up) && linearOK(l.MLP.Down)
}
