package engine

import (
	"fmt"
	"math"
	"strings"

	"github.com/ollama/ollama/fs"
	fsggml "github.com/ollama/ollama/fs/ggml"
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/ml/nn"
	"github.com/ollama/ollama/model/models/llama4"
)

// llama4Arch runs Llama 4's text model (model/models/llama4, model_text.go;
// Llama 4 Scout and Maverick): every interleave_moe_layer_step-th layer a
// mixture of experts (a sigmoid-weighted top-k router, the routed
// experts' input scaled by its weight, a shared expert beside them), the
// others a dense SwiGLU; every no_rope_interval-th layer without rope
// (NoPE) over the whole context (a causal cache), its queries scaled per
// position (attention temperature tuning), the others with rope over
// chunks of attention.chunk_size positions (a chunked cache); the
// embedding duplicated before the layers. Vision weights (v.*, mm.*) are
// never run: text only.
//
// As ollama v0.17.4 writes it (and so as this adapter runs it), the norms
// are mean-centred layer norms without bias (nn.LayerNorm), and the
// weightless query and key RMS norms (use_qk_norm) apply on every layer;
// Meta's and llama.cpp's Llama 4 use RMS norms and norm queries and keys
// on the rope layers only.
type llama4Arch struct {
	m      *llama4.Model
	eps    float32
	noRope int   // no_rope_interval: layer i is NoPE where (i+1)%noRope == 0
	chunk  int32 // attention.chunk_size

	tuning       bool    // attention.temperature_tuning
	scale, floor float64 // attention.scale, attention.floor_scale
}

func newLlama4Arch(m *llama4.Model, cfg fs.Config) (llama4Arch, error) {
	a := llama4Arch{
		m:      m,
		eps:    cfg.Float("attention.layer_norm_rms_epsilon"),
		noRope: int(cfg.Uint("no_rope_interval", 4)),
		chunk:  int32(cfg.Uint("attention.chunk_size", 8192)),
		tuning: cfg.Bool("attention.temperature_tuning", true),
		scale:  float64(cfg.Float("attention.scale", 0.1)),
		floor:  float64(cfg.Float("attention.floor_scale", 8192)),
	}
	if a.noRope <= 0 {
		// checkLlama4 refuses such a file first; ollama's forward pass
		// would divide by it.
		return llama4Arch{}, fmt.Errorf("%w: llama4 no_rope_interval is %d", ErrNotGGUF, a.noRope)
	}
	return a, nil
}

func (a llama4Arch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TextModel.TokenEmbedding.Forward(ctx, ids).Duplicate(ctx)
}

// layer runs layer i without the NoPE layers' query scale; the layer loop
// runs this arch through withPositions.
func (a llama4Arch) layer(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	return a.run(ctx, i, h, pos, nil, out, c)
}

// withPositions returns the layer function for one graph over positions
// pos: the per-position query scale as TextModel.Forward computes it from
// the batch's positions, so that a stage computes it from its own.
func (a llama4Arch) withPositions(ctx ml.Context, pos []int32) layerFunc {
	if !a.tuning {
		return a.layer
	}
	scales := make([]float32, len(pos))
	for i, p := range pos {
		scales[i] = float32(math.Log(math.Floor(((float64(p)+1.0)/a.floor)+1.0))*a.scale + 1.0)
	}
	st := ctx.Input().FromFloats(scales, 1, 1, len(scales))
	return func(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
		return a.run(ctx, i, h, pos, st, out, c)
	}
}

// run is TextModel.Forward's loop body for layer i: the chunked cache and
// rope, or the causal cache without rope.
func (a llama4Arch) run(ctx ml.Context, i int, h, pos, scales, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	useChunked := (i+1)%a.noRope != 0
	if wc, ok := c.(*kvcache.WrapperCache); ok {
		wc.SetLayerType(1)
		if useChunked {
			wc.SetLayerType(0)
		}
	}
	tm := a.m.TextModel
	return tm.Layers[i].Forward(ctx, h, pos, scales, out, c, useChunked, tm.TextOptions)
}

func (a llama4Arch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	tm := a.m.TextModel
	return tm.Output.Forward(ctx, tm.OutputNorm.Forward(ctx, h, a.eps))
}

// newCache is llama4.New's cache: chunked attention beside a causal one.
// The chunked cache keeps every position (it masks, not drops, the earlier
// chunks), so a session can be truncated anywhere.
func (a llama4Arch) newCache(int32) kvcache.Cache {
	return kvcache.NewWrapperCache(
		kvcache.NewChunkedAttentionCache(a.chunk, a.m.TextModel.Shift),
		kvcache.NewCausalCache(a.m.TextModel.Shift),
	)
}

func (a llama4Arch) hasEmbed() bool { return embedOK(a.m.TextModel.TokenEmbedding) }
func (a llama4Arch) hasHead() bool {
	tm := a.m.TextModel
	return layerNormOK(tm.OutputNorm) && linearOK(tm.Output) && tm.Output.Weight.Dim(1) > 1
}
func (a llama4Arch) hasLayer(i int) bool {
	l := a.m.TextModel.Layers[i]
	at := l.Attention
	if at == nil || !layerNormOK(l.AttentionNorm) || !layerNormOK(l.FFNNorm) ||
		!linearOK(at.Query) || !linearOK(at.Key) || !linearOK(at.Value) || !linearOK(at.Output) {
		return false
	}
	switch ff := l.FeedForward.(type) {
	case *llama4.TextMLP:
		return llama4MLPOK(ff)
	case *llama4.TextMOE:
		e := ff.Experts
		return linearOK(ff.Router) && llama4MLPOK(ff.SharedExpert) &&
			e != nil && batchOK(e.Gate) && batchOK(e.Up) && batchOK(e.Down)
	}
	return false
}

func llama4MLPOK(m *llama4.TextMLP) bool {
	return m != nil && linearOK(m.Gate) && linearOK(m.Up) && linearOK(m.Down)
}

func layerNormOK(n *nn.LayerNorm) bool { return n != nil && n.Weight != nil }

// checkLlama4 refuses a llama4 header ollama's model would divide by zero
// or reshape past (ggml aborts the process): the layer steps, the experts
// a mixture layer runs, and the head size ollama reads (attention.head_dim,
// 128 when absent, not the key length) against the projections.
func checkLlama4(meta *fsggml.GGML) error {
	kv := meta.KV()
	if kv.Architecture() != "llama4" {
		return nil
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: llama4 "+format, append([]any{ErrNotGGUF}, args...)...)
	}
	step := kv.Uint("interleave_moe_layer_step", 1)
	if step == 0 {
		return bad("interleave_moe_layer_step is 0 (every step-th layer is a mixture of experts)")
	}
	if n := kv.Uint("no_rope_interval", 4); n == 0 {
		return bad("no_rope_interval is 0 (every interval-th layer runs without rope)")
	}
	experts, used := kv.Uint("expert_count"), kv.Uint("expert_used_count")
	if kv.BlockCount() >= uint64(step) && (used == 0 || used > experts) {
		return bad("expert_used_count %d of expert_count %d (its mixture layers run 1..expert_count experts)", used, experts)
	}
	headDim := uint64(kv.Uint("attention.head_dim", 128))
	heads, kvHeads := kv.Uint("attention.head_count"), kv.Uint("attention.head_count_kv")
	if hidden := kv.Uint("embedding_length"); headDim*uint64(heads) != uint64(hidden) {
		// attention's output is reshaped to the hidden size
		return bad("attention.head_dim %d (128 when absent) times head_count %d is not embedding_length %d", headDim, heads, hidden)
	}
	for _, t := range meta.Tensors().Items() {
		var want uint64
		switch {
		case strings.HasSuffix(t.Name, ".attn_q.weight"):
			want = headDim * uint64(heads)
		case strings.HasSuffix(t.Name, ".attn_k.weight"), strings.HasSuffix(t.Name, ".attn_v.weight"):
			want = headDim * uint64(kvHeads)
		default:
			continue
		}
		if len(t.Shape) != 2 || t.Shape[1] != want {
			return bad("tensor %s has shape %v, but attention.head_dim %d (128 when absent) wants %d outputs", t.Name, t.Shape, headDim, want)
		}
	}
	return nil
}
