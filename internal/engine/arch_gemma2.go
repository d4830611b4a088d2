package engine

import (
	"fmt"
	"math"

	"github.com/ollama/ollama/fs"
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model/models/gemma2"
)

// gemma2Arch runs Gemma 2 (model/models/gemma2): the embedding scaled by
// sqrt(hidden); norms before and after attention and the MLP; attention
// logits soft-capped (attn_logit_softcapping, inside ollama's layer), even
// layers over a sliding window (their own KV cache), odd layers global;
// the head's logits soft-capped.
type gemma2Arch struct {
	m       *gemma2.Model
	eps     float32
	scale   float64 // sqrt(embedding_length)
	softcap float32
	window  int32
}

// gemma2LargeLayers is Gemma 2 27B's layer count, for which ollama scales
// queries by another factor that its Forward sets on the model's options:
// the engine, which runs the layers itself, cannot set it.
const gemma2LargeLayers = 46

const gemma2LargeWhy = "gemma2 with 46 layers (Gemma 2 27B): ollama sets its query scaling inside its own forward pass, which the engine does not run"

func newGemma2Arch(m *gemma2.Model, cfg fs.Config) (gemma2Arch, error) {
	if why := Refused("gemma2", len(m.Layers)); why != "" {
		return gemma2Arch{}, fmt.Errorf("%w: %s", ErrUnsupportedArch, why)
	}
	return gemma2Arch{
		m:       m,
		eps:     cfg.Float("attention.layer_norm_rms_epsilon"),
		scale:   math.Sqrt(float64(cfg.Uint("embedding_length"))),
		softcap: cfg.Float("final_logit_softcapping"),
		window:  int32(cfg.Uint("attention.sliding_window")),
	}, nil
}

func (a gemma2Arch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TokenEmbedding.Forward(ctx, ids).Scale(ctx, a.scale)
}

func (a gemma2Arch) layer(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	if wc, ok := c.(*kvcache.WrapperCache); ok {
		wc.SetLayerType(i % 2) // 0: the sliding window's cache, 1: the global one
	}
	return a.m.Layers[i].Forward(ctx, h, pos, out, c, a.m.Options)
}

func (a gemma2Arch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	return softcap(ctx, a.m.Output.Forward(ctx, a.m.OutputNorm.Forward(ctx, h, a.eps)), a.softcap)
}

// newCache is gemma2.New's cache (its attention reads keys and values
// unpermuted: CacheConfig{}), keeping rewind positions behind the window.
func (a gemma2Arch) newCache(rewind int32) kvcache.Cache {
	c := windowedCache(a.window, rewind, a.m.Shift)
	c.SetConfig(ml.CacheConfig{})
	return c
}

func (a gemma2Arch) hasEmbed() bool { return embedOK(a.m.TokenEmbedding) }
func (a gemma2Arch) hasHead() bool  { return headOK(a.m.OutputNorm, a.m.Output) }
func (a gemma2Arch) hasLayer(i int) bool {
	l := a.m.Layers[i]
	sa := l.SelfAttention
	return normOK(l.AttentionNorm) && normOK(l.PostAttentionNorm) && normOK(l.MLPNorm) &&
		normOK(l.PostMLPNorm) && sa != nil &&
		linearOK(sa.Query) && linearOK(sa.Key) && linearOK(sa.Value) && linearOK(sa.Output) &&
		l.MLP != nil && linearOK(l.MLP.Gate) && linearOK(l.MLP.Up) && linearOK(l.MLP.Down)
}
