package engine

import (
	"fmt"
	"math"

	"github.com/ollama/ollama/fs"
	fsggml "github.com/ollama/ollama/fs/ggml"
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model/input"
	"github.com/ollama/ollama/model/models/gemma3n"
)

// gemma3nArch runs Gemma 3n's text model (model/models/gemma3n,
// model_text.go) as TextModel.Forward does: the residual stream is
// altup.num_inputs streams of hidden floats per position (AltUp), made at
// the embedding from the scaled token embedding and its altup_proj
// projections; every layer takes, beside the streams, a per-layer input
// computed at the embedding from the token ids (per_layer_token_embd) and
// the embedding (per_layer_model_proj); the last
// attention.shared_kv_layers layers read the KV cache of the last two
// layers before them (the last sliding-window one and the last global
// one) and write none; after the last layer the streams are projected
// back (altup_unembd_proj) and averaged before the output norm and the
// head. Audio and vision weights are never run: text only.
//
// So a layer's input is not a hidden state of embedding_length floats
// and its per-layer input comes from the token ids: the model runs whole
// only (runRange refuses any other range, wholeOnly names why), and its
// layer loop comes from embedLayers, per graph.
type gemma3nArch struct {
	m             *gemma3n.Model
	n             int     // block_count
	shared        int     // attention.shared_kv_layers
	scale         float64 // sqrt(embedding_length)
	eps           float32
	window        int32 // attention.sliding_window
	local         []bool
	sparse        []float32
	ropes         [2]float32 // rope.freq_base, rope.freq_base_local
	altup         int
	perLayerVocab int // rows of per_layer_token_embd: the token ids it embeds
}

// wholeOnly names the architectures that run whole only (no range of
// layers but all of them), and why.
var wholeOnly = map[string]string{
	"gemma3n": "gemma3n's residual stream is altup.num_inputs streams of embedding_length floats per position (not one hidden state), and every layer takes a per-layer input computed from the token ids at the embedding",
}

// WholeOnly says why a model of arch runs only whole, layers 0 to its last
// in one range ("" when a range of its layers can run on its own).
func WholeOnly(arch string) string { return wholeOnly[arch] }

// checkGemma3n refuses a gemma3n header whose per-layer arrays or AltUp
// and KV-sharing numbers ollama's gemma3n would index past (it panics) or
// run into a shape that aborts.
func checkGemma3n(meta *fsggml.GGML) error {
	kv := meta.KV()
	if kv.Architecture() != "gemma3n" {
		return nil
	}
	n := int(kv.BlockCount())
	if got := len(kv.Bools("attention.sliding_window_pattern")); got != n {
		return fmt.Errorf("%w: gemma3n attention.sliding_window_pattern has %d entries for %d layers", ErrNotGGUF, got, n)
	}
	if got := len(kv.Floats("activation_sparsity_scale")); got != n {
		return fmt.Errorf("%w: gemma3n activation_sparsity_scale has %d entries for %d layers", ErrNotGGUF, got, n)
	}
	if f := kv.Float("attention.shared_kv_layers", 0); f != 0 && (f < 0 || f != float32(math.Trunc(float64(f)))) {
		return fmt.Errorf("%w: gemma3n attention.shared_kv_layers %g is not a count of layers", ErrNotGGUF, f)
	}
	if s := sharedKVLayers(kv); s > n-2 {
		return fmt.Errorf("%w: gemma3n attention.shared_kv_layers %d of %d layers (the shared layers read two layers before them)", ErrNotGGUF, s, n)
	}
	if in, act := kv.Uint("altup.num_inputs"), kv.Uint("altup.active_idx"); in < 2 || act >= in {
		return fmt.Errorf("%w: gemma3n altup.num_inputs %d, altup.active_idx %d (2 or more streams, the active one among them)", ErrNotGGUF, in, act)
	}
	if kv.Uint("embedding_length_per_layer_input") == 0 {
		return fmt.Errorf("%w: gemma3n embedding_length_per_layer_input missing", ErrNotGGUF)
	}
	return nil
}

func newGemma3nArch(m *gemma3n.Model, cfg fs.Config) gemma3nArch {
	a := gemma3nArch{
		m:      m,
		n:      int(cfg.Uint("block_count")),
		shared: sharedKVLayers(cfg),
		scale:  math.Sqrt(float64(cfg.Uint("embedding_length"))),
		eps:    cfg.Float("attention.layer_norm_rms_epsilon", 1e-06),
		window: int32(cfg.Uint("attention.sliding_window")),
		local:  cfg.Bools("attention.sliding_window_pattern"),
		sparse: cfg.Floats("activation_sparsity_scale"),
		ropes:  [2]float32{cfg.Float("rope.freq_base", 1_000_000), cfg.Float("rope.freq_base_local", 10_000)},
		altup:  int(cfg.Uint("altup.num_inputs")),
	}
	if e := m.PerLayerProjector; e != nil && e.TokenEmbedding != nil && embedOK(e.TokenEmbedding.Embedding) {
		a.perLayerVocab = e.TokenEmbedding.Weight.Dim(1)
	}
	return a
}

// embed is the AltUp streams of the embedding (TextModel.Forward's
// hiddenStates before the loop); the layers also need the per-layer
// inputs, which embedLayers gives them.
func (a gemma3nArch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	h, _ := a.embedLayers(ctx, ids)
	return h
}

// embedLayers is TextModel.Forward up to its layer loop: the AltUp streams
// of the embedding, and the function that runs layer i over them with its
// per-layer input, its KV cache (a shared layer's source) and its rope
// base; the last layer's also projects the streams back, averages them and
// keeps the rows whose logits are wanted, as Forward does after its loop.
func (a gemma3nArch) embedLayers(ctx ml.Context, ids ml.Tensor) (ml.Tensor, layerFunc) {
	tm := a.m.TextModel
	opts := &tm.TextOptions
	one := ctx.Input().FromFloats([]float32{1.0}, 1)

	inputs := tm.TokenEmbedding.Forward(ctx, ids, a.scale)
	perLayer := tm.PerLayerProjector.Forward(ctx, input.Batch{Inputs: ids}, inputs, opts)

	target := inputs.Sqr(ctx).Mean(ctx).Sqrt(ctx)
	target = target.Repeat(ctx, 2, a.altup-1)
	h := inputs.Repeat(ctx, 2, a.altup-1)
	proj := tm.AltupEmbd.Forward(ctx, h)
	proj = proj.Mul(ctx, target.Div(ctx, proj.Sqr(ctx).Mean(ctx).Sqrt(ctx)))
	h = inputs.Concat(ctx, proj, 2)

	first := a.n - a.shared
	layer := func(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
		switch {
		case i < first:
			c.SetLayer(i)
		case a.local[i]:
			c.SetLayer(first - 2)
		default:
			c.SetLayer(first - 1)
		}
		typ, base := 0, a.ropes[0]
		if a.local[i] {
			typ, base = 1, a.ropes[1]
		}
		c.(*kvcache.WrapperCache).SetLayerType(typ)
		in := perLayer.View(ctx, i*perLayer.Stride(1), perLayer.Dim(0), perLayer.Stride(2), perLayer.Dim(2))
		h = tm.TextLayers[i].Forward(ctx, h, in, pos, one, c, i >= first, base, float64(a.sparse[i]), opts)
		if i < a.n-1 {
			return h
		}
		h0 := h.Slice(ctx, 2, 0, 1, 1)
		target := h0.Sqr(ctx).Mean(ctx).Sqrt(ctx)
		target = target.Repeat(ctx, 2, a.altup-1)
		rest := h.Slice(ctx, 2, 1, h.Dim(2), 1)
		unembd := tm.AltupUnembd.Forward(ctx, rest)
		unembd = unembd.Mul(ctx, target.Div(ctx, unembd.Sqr(ctx).Mean(ctx).Sqrt(ctx)))
		h = h0.Concat(ctx, unembd, 2)
		h = h.Permute(ctx, 1, 2, 0, 3).Contiguous(ctx).Mean(ctx)
		h = h.Permute(ctx, 2, 0, 1, 3).Contiguous(ctx)
		if out != nil {
			h = h.Rows(ctx, out)
		}
		return h
	}
	return h, layer
}

// layer is never run: a layer needs its per-layer input, which only
// embedLayers has, and runRange refuses a range that does not start at
// the embedding. Were it reached, the panic is forward's ErrInternal.
func (a gemma3nArch) layer(ml.Context, int, ml.Tensor, ml.Tensor, ml.Tensor, kvcache.Cache) ml.Tensor {
	panic("gemma3n layer run without its per-layer input (embedLayers)")
}

func (a gemma3nArch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	tm := a.m.TextModel
	return tm.Output.Forward(ctx, tm.OutputNorm.Forward(ctx, h, a.eps))
}

// newCache is gemma3n.New's cache (a causal cache, type 0, beside a
// sliding-window one, type 1: the other order from gemma3's) with rewind
// positions kept behind the window.
func (a gemma3nArch) newCache(rewind int32) kvcache.Cache {
	swa := kvcache.NewSWACache(a.window, a.m.Shift)
	if a.window > 0 {
		swa = kvcache.NewSWAMemCache(a.window, a.window+rewind, a.m.Shift)
	}
	return kvcache.NewWrapperCache(kvcache.NewCausalCache(a.m.Shift), swa)
}

// maxToken is one past the largest token id the per-layer embedding holds
// (ggml aborts on a row past it).
func (a gemma3nArch) maxToken() int { return a.perLayerVocab }

func (a gemma3nArch) hasEmbed() bool {
	tm := a.m.TextModel
	p := tm.PerLayerProjector
	return tm.TokenEmbedding != nil && embedOK(tm.TokenEmbedding.Embedding) && p != nil &&
		p.TokenEmbedding != nil && embedOK(p.TokenEmbedding.Embedding) && linearOK(p.Projector) &&
		normOK(p.Norm) && linearOK(tm.AltupEmbd)
}

func (a gemma3nArch) hasHead() bool {
	tm := a.m.TextModel
	return headOK(tm.OutputNorm, tm.Output) && linearOK(tm.AltupUnembd)
}

func (a gemma3nArch) hasLayer(i int) bool {
	l := a.m.TextModel.TextLayers[i]
	if l.AltUp == nil || l.Laurel == nil || l.Attention == nil || l.MLP == nil {
		return false
	}
	at, up, la, mlp := l.Attention, l.AltUp, l.Laurel, l.MLP
	return normOK(l.AttentionNorm) && normOK(l.PostAttentionNorm) && normOK(l.MLPNorm) && normOK(l.PostMLPNorm) &&
		linearOK(l.PerLayerInputGate) && linearOK(l.PerLayerProjection) && normOK(l.PostPerLayerNorm) &&
		linearOK(at.Query) && linearOK(at.Key) && linearOK(at.Value) && linearOK(at.Output) &&
		normOK(at.QueryNorm) && normOK(at.KeyNorm) &&
		up.CorrectionScale != nil && linearOK(up.PredictionCoefficient) && linearOK(up.CorrectionCoefficient) &&
		linearOK(up.Router) && normOK(up.RouterNorm) &&
		linearOK(la.LinearLeft) && linearOK(la.LinearRight) && normOK(la.PostLaurelNorm) &&
		linearOK(mlp.Gate) && linearOK(mlp.Up) && linearOK(mlp.Down)
}

// sharedKVLayers is gemma3n's attention.shared_kv_layers: an unsigned
// integer as ollama's converter writes it, or a float32 holding a whole
// number, as llama.cpp's converter wrote it in Gemma 3n files on the hub
// (ollama's gemma3n reads only the integer: from such a file it would
// share no KV, every layer reading a cache nothing wrote).
func sharedKVLayers(cfg fs.Config) int {
	if s := cfg.Uint("attention.shared_kv_layers"); s > 0 {
		return int(min(s, 1<<20))
	}
	if f := cfg.Float("attention.shared_kv_layers", 0); f > 0 && f < 1<<20 && f == float32(math.Trunc(float64(f))) {
		return int(f)
	}
	return 0
}
