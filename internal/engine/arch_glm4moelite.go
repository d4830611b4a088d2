package engine

import (
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model/models/glm4moelite"
)

// glm4moeliteArch runs GLM-4.7-Flash (model/models/glm4moelite): DeepSeek
// V3's layer with absorbed latent attention only (attn_k_b, attn_v_b; files
// with one attn_kv_b are refused by ollama's loader as an old format), an
// unscaled rope, and the glm4 pre-tokenizer.
type glm4moeliteArch struct {
	m   *glm4moelite.Model
	eps float32
}

func (a glm4moeliteArch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TokenEmbedding.Forward(ctx, ids)
}

func (a glm4moeliteArch) layer(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	return a.m.Layers[i].Forward(ctx, h, pos, out, c, a.m.Options)
}

func (a glm4moeliteArch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	return a.m.Output.Forward(ctx, a.m.OutputNorm.Forward(ctx, h, a.eps))
}

func (a glm4moeliteArch) hasEmbed() bool { return embedOK(a.m.TokenEmbedding) }
func (a glm4moeliteArch) hasHead() bool  { return headOK(a.m.OutputNorm, a.m.Output) }
func (a glm4moeliteArch) hasLayer(i int) bool {
	l := a.m.Layers[i]
	at := l.Attention
	if at == nil {
		return false
	}
	q := linearOK(at.Q) || linearOK(at.QA) && normOK(at.QANorm) && linearOK(at.QB)
	return normOK(l.AttentionNorm) && normOK(l.MLPNorm) && q && linearOK(at.KVA) &&
		normOK(at.KVANorm) && linearOK(at.KB) && linearOK(at.VB) && linearOK(at.Output) && l.MLP != nil
}
