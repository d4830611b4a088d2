package engine

import (
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model/models/deepseek2"
)

// deepseek2Arch runs DeepSeek V2/V3's text model (model/models/deepseek2;
// Kimi K2 and others share it): multi-head latent attention (queries
// through an optional low-rank bottleneck, keys and values from one
// compressed projection plus a shared rotary part), then a dense MLP in
// the first leading_dense_block_count layers and a mixture of experts
// after (sigmoid router scores, top-k, shared experts added).
type deepseek2Arch struct {
	m   *deepseek2.Model
	eps float32
}

func (a deepseek2Arch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TokenEmbedding.Forward(ctx, ids)
}

func (a deepseek2Arch) layer(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	return a.m.Layers[i].Forward(ctx, h, pos, out, c, a.m.Options)
}

func (a deepseek2Arch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	return a.m.Output.Forward(ctx, a.m.OutputNorm.Forward(ctx, h, a.eps))
}

func (a deepseek2Arch) hasEmbed() bool { return embedOK(a.m.TokenEmbedding) }
func (a deepseek2Arch) hasHead() bool  { return headOK(a.m.OutputNorm, a.m.Output) }
func (a deepseek2Arch) hasLayer(i int) bool {
	l := a.m.Layers[i]
	at := l.Attention
	if at == nil {
		return false
	}
	q := linearOK(at.Q) || linearOK(at.QA) && normOK(at.QANorm) && linearOK(at.QB)
	kv := linearOK(at.KVB) || linearOK(at.KB) && linearOK(at.VB)
	return normOK(l.AttentionNorm) && normOK(l.MLPNorm) && q && linearOK(at.KVA) &&
		normOK(at.KVANorm) && kv && linearOK(at.Output) && l.MLP != nil
}
