package engine

import (
	"math"

	"github.com/ollama/ollama/fs"
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model/models/mistral3"
)

// mistral3Arch runs Mistral 3's text model (model/models/mistral3,
// model_text.go; Ministral 3, Mistral Small 3.1): Llama's layer, with the
// embedding duplicated before the layers and, where the file names
// rope.scaling.original_context_length, queries scaled per position (Llama
// 4's attention temperature) by a tensor computed from the positions.
// Vision weights (v.*, mm.*) are never run: text only.
type mistral3Arch struct {
	m    *mistral3.Model
	eps  float32
	orig int     // rope.scaling.original_context_length; 0: no scaling
	beta float32 // rope.scaling_beta
}

func newMistral3Arch(m *mistral3.Model, cfg fs.Config) mistral3Arch {
	return mistral3Arch{
		m:    m,
		eps:  cfg.Float("attention.layer_norm_rms_epsilon"),
		orig: int(cfg.Uint("rope.scaling.original_context_length")),
		beta: cfg.Float("rope.scaling_beta", 0.1),
	}
}

func (a mistral3Arch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TextModel.TokenEmbedding.Forward(ctx, ids).Duplicate(ctx)
}

// layer runs layer i where no position scaling applies; the layer loop
// runs this arch through withPositions.
func (a mistral3Arch) layer(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	return a.m.TextModel.Layers[i].Forward(ctx, h, pos, nil, out, c, a.m.TextModel.TextOptions)
}

// withPositions returns the layer function for one graph over positions
// pos: the per-position query scale as TextModel.getScale computes it.
func (a mistral3Arch) withPositions(ctx ml.Context, pos []int32) layerFunc {
	if a.orig <= 0 {
		return a.layer
	}
	scale := make([]float32, len(pos))
	for n, p := range pos {
		interval := math.Floor(float64(p) / float64(a.orig))
		scale[n] = float32(1.0 + float64(a.beta)*math.Log(1.0+interval))
	}
	st := ctx.Input().FromFloats(scale, 1, 1, len(scale))
	return func(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
		return a.m.TextModel.Layers[i].Forward(ctx, h, pos, st, out, c, a.m.TextModel.TextOptions)
	}
}

func (a mistral3Arch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	return a.m.TextModel.Output.Forward(ctx, a.m.TextModel.OutputNorm.Forward(ctx, h, a.eps))
}

func (a mistral3Arch) hasEmbed() bool { return embedOK(a.m.TextModel.TokenEmbedding) }
func (a mistral3Arch) hasHead() bool {
	return headOK(a.m.TextModel.OutputNorm, a.m.TextModel.Output)
}
func (a mistral3Arch) hasLayer(i int) bool {
	l := a.m.TextModel.Layers[i]
	sa := l.SelfAttention
	return normOK(l.AttentionNorm) && normOK(l.MLPNorm) && sa != nil &&
		linearOK(sa.Query) && linearOK(sa.Key) && linearOK(sa.Value) && linearOK(sa.Output) &&
		l.MLP != nil && linearOK(l.MLP.Gate) && linearOK(l.MLP.Up) && linearOK(l.MLP.Down)
}
