package engine

import (
	"github.com/ollama/ollama/fs"
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/ml/nn"
	"github.com/ollama/ollama/model/models/gptoss"
)

// gptossArch runs GPT-OSS (model/models/gptoss): every layer a mixture of
// experts (the router's top-k logits softmaxed, SwiGLU clamped at 7 with
// alpha 1.702, biases everywhere), attention with a learned sink per head,
// even layers over a sliding window (their own KV cache), odd layers
// global; YaRN rope.
type gptossArch struct {
	m      *gptoss.Transformer
	eps    float32
	window int32 // attention.sliding_window
}

func newGPTOSSArch(m *gptoss.Transformer, cfg fs.Config) gptossArch {
	return gptossArch{m: m, eps: cfg.Float("attention.layer_norm_rms_epsilon"), window: int32(cfg.Uint("attention.sliding_window"))}
}

func (a gptossArch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TokenEmbedding.Forward(ctx, ids)
}

func (a gptossArch) layer(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	if wc, ok := c.(*kvcache.WrapperCache); ok {
		wc.SetLayerType(i % 2) // 0: the sliding window's cache, 1: the global one
	}
	return a.m.TransformerBlocks[i].Forward(ctx, h, pos, out, c, &a.m.Options)
}

func (a gptossArch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	return a.m.Output.Forward(ctx, a.m.OutputNorm.Forward(ctx, h, a.eps))
}

// newCache is gptoss.New's cache (a sliding-window cache beside a causal
// one) keeping rewind positions behind the window where ollama keeps 4096.
func (a gptossArch) newCache(rewind int32) kvcache.Cache {
	return windowedCache(a.window, rewind, a.m.Shift)
}

func (a gptossArch) hasEmbed() bool { return embedOK(a.m.TokenEmbedding) }
func (a gptossArch) hasHead() bool  { return headOK(a.m.OutputNorm, a.m.Output) }
func (a gptossArch) hasLayer(i int) bool {
	b := a.m.TransformerBlocks[i]
	at, mlp := b.Attention, b.MLP
	if at == nil || mlp == nil {
		return false
	}
	qkv := linearOK(at.QKV) || linearOK(at.Query) && linearOK(at.Key) && linearOK(at.Value)
	gateUp := batchOK(mlp.GateUp) || batchOK(mlp.Gate) && batchOK(mlp.Up)
	return normOK(at.Norm) && qkv && linearOK(at.Output) && at.Sinks != nil &&
		normOK(mlp.Norm) && linearOK(mlp.Router) && gateUp && batchOK(mlp.Down)
}

func batchOK(l *nn.LinearBatch) bool { return l != nil && l.Weight != nil }
