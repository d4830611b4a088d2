package engine

import (
	"fmt"

	"github.com/ollama/ollama/fs"
	fsggml "github.com/ollama/ollama/fs/ggml"
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/ml/nn"
	"github.com/ollama/ollama/model"
	"github.com/ollama/ollama/model/models/deepseek2"
	"github.com/ollama/ollama/model/models/gemma2"
	"github.com/ollama/ollama/model/models/gemma3"
	"github.com/ollama/ollama/model/models/gemma3n"
	"github.com/ollama/ollama/model/models/glm4moelite"
	"github.com/ollama/ollama/model/models/gptoss"
	"github.com/ollama/ollama/model/models/lfm2"
	"github.com/ollama/ollama/model/models/llama"
	"github.com/ollama/ollama/model/models/llama4"
	"github.com/ollama/ollama/model/models/mistral3"
	"github.com/ollama/ollama/model/models/nemotronh"
	"github.com/ollama/ollama/model/models/olmo3"
	"github.com/ollama/ollama/model/models/qwen2"
	"github.com/ollama/ollama/model/models/qwen3"
	"github.com/ollama/ollama/model/models/qwen3next"
)

// Architectures lists the general.architecture values the engine runs.
var Architectures = []string{"qwen3", "qwen2", "llama", "gemma3", "mistral3", "lfm2", "qwen3moe", "gptoss", "gpt-oss", "gemma2", "olmo3", "deepseek2", "glm4moelite", "llama4",
	"lfm2moe",
	"qwen3next", "gemma3n",
	"nemotron_h",
	"nemotron_h_moe"}

// arch is the per-architecture view of a loaded ollama model that the layer
// loop needs. The layer loop (run.go) mirrors each model's own Forward; the
// test TestWholeMatchesModelForward keeps them bit-identical, so an ollama
// upgrade that changes a model's forward pass is caught.
type arch interface {
	embed(ctx ml.Context, ids ml.Tensor) ml.Tensor
	layer(ctx ml.Context, i int, h, positions, outputs ml.Tensor, cache kvcache.Cache) ml.Tensor
	head(ctx ml.Context, h ml.Tensor) ml.Tensor
	hasEmbed() bool
	hasLayer(i int) bool
	hasHead() bool
}

// ownCache is an arch whose layers need a cache of their own kind (gemma2,
// gemma3, gptoss, olmo3: sliding-window layers beside global ones; lfm2:
// recurrent state beside KV); the others take a causal one. rewind is how
// many positions behind its window a sliding-window cache keeps, so that a
// session can be truncated by that many (Session.Truncate).
type ownCache interface {
	newCache(rewind int32) kvcache.Cache
}

// sliceRefused names the architectures whose stage slices ollama cannot
// load, and why: such a model runs from its whole file (a stage may still
// run a range of its layers from it).
// (none today: lfm2's the engine builds itself, sliceLoaders).
var sliceRefused = map[string]string{
	"gemma3n": "gemma3n runs whole only: " + wholeOnly["gemma3n"],
}

// noRewind names the architectures whose sessions cannot go back to an
// earlier position but to 0 (Session.Truncate), and why: a recurrent
// state holds no past positions to drop. A rejected speculative draft
// needs such a rollback, so their routes do not speculate.
var noRewind = map[string]string{
	"lfm2":    "lfm2's short convolutions keep a recurrent state, which cannot drop positions",
	"lfm2moe": "lfm2moe's short convolutions keep a recurrent state, which cannot drop positions",

	"qwen3next": "qwen3next's gated DeltaNet layers keep a recurrent state, which cannot drop positions",

	"nemotron_h": "nemotron_h's Mamba-2 layers keep a recurrent state, which cannot drop positions",

	"nemotron_h_moe": "nemotron_h_moe's Mamba-2 layers keep a recurrent state, which cannot drop positions",
}

// NoRewind says why sessions of arch cannot be truncated to an earlier
// position but 0 ("" when they can).
func NoRewind(arch string) string { return noRewind[arch] }

// SliceRefused says why a stage slice of arch cannot be loaded ("" when it
// can): such a model runs from its whole file.
func SliceRefused(arch string) string { return sliceRefused[arch] }

// Refused says why the engine refuses a model of arch with layers layers
// although it runs the architecture ("" when it does not refuse it), so that
// a file's description need not load it to know.
func Refused(arch string, layers int) string {
	if arch == "gemma2" && layers == gemma2LargeLayers {
		return gemma2LargeWhy
	}
	return ""
}

// checkWhole refuses a stage slice of an architecture in sliceRefused, with
// the reason, before ollama refuses it naming a missing tensor.
func checkWhole(meta *fsggml.GGML) error {
	arch := meta.KV().Architecture()
	why := sliceRefused[arch]
	if why == "" {
		return nil
	}
	blocks := map[int]bool{}
	names := map[string]bool{}
	for _, t := range meta.Tensors().Items() {
		names[t.Name] = true
		if i, ok := blockOf(t.Name); ok {
			blocks[i] = true
		}
	}
	n := int(meta.KV().BlockCount())
	if len(blocks) == n && names["token_embd.weight"] && (names["output_norm.weight"] || names["token_embd_norm.weight"]) {
		return nil
	}
	return fmt.Errorf("%w: %s stage slice (%d of %d layers): %s; load the whole file", ErrUnsupportedArch, arch, len(blocks), n, why)
}

// isolatedArch is an arch whose graphs must hold one session's positions
// only: Load runs its sessions as Options.Isolated.
type isolatedArch interface {
	isolated()
}

// perLayerInputs is an arch whose layers take, beside the hidden state,
// inputs the embedding computes from the graph's token ids (gemma3n): the
// layer loop of a graph that starts at the embedding runs the function
// embedLayers returns with it.
type perLayerInputs interface {
	embedLayers(ctx ml.Context, ids ml.Tensor) (ml.Tensor, layerFunc)
}

// tokenLimited is an arch that embeds fewer token ids than its vocabulary
// holds somewhere (gemma3n's per-layer embedding): runRange refuses the
// others, on which ggml would abort.
type tokenLimited interface {
	maxToken() int
}

// layerFunc is arch.layer's signature.
type layerFunc func(ctx ml.Context, i int, h, positions, outputs ml.Tensor, cache kvcache.Cache) ml.Tensor

// positioned is an arch whose layers take, besides the positions tensor,
// tensors computed from the positions' values (mistral3's query scale):
// the layer loop runs a graph's layers with the function it returns.
type positioned interface {
	withPositions(ctx ml.Context, pos []int32) layerFunc
}

func newArch(m model.Model, cfg fs.Config) (arch, error) {
	eps := cfg.Float("attention.layer_norm_rms_epsilon")
	switch t := m.(type) {
	case *gemma3.Model:
		return newGemma3Arch(t, cfg), nil
	case *gemma2.Model:
		return newGemma2Arch(t, cfg)
	case *gemma3n.Model:
		return newGemma3nArch(t, cfg), nil
	case *olmo3.Model:
		return newOLMo3Arch(t, cfg)
	case *deepseek2.Model:
		return deepseek2Arch{t, eps}, nil
	case *glm4moelite.Model:
		return glm4moeliteArch{t, eps}, nil
	case *mistral3.Model:
		return newMistral3Arch(t, cfg), nil
	case *llama4.Model:
		return newLlama4Arch(t, cfg)
	case *lfm2.Model:
		return newLFM2Arch(t, cfg), nil
	case *qwen3next.Model:
		return newQwen3NextArch(t, cfg)
	case *nemotronh.Model:
		return newNemotronHArch(t, cfg)
	case *gptoss.Transformer:
		return newGPTOSSArch(t, cfg), nil
	case *qwen3.Model:
		return qwen3Arch{t, eps}, nil
	case *qwen2.Model:
		return qwen2Arch{t, eps}, nil
	case *llama.Model:
		return llamaArch{t, eps}, nil
	}
	return nil, fmt.Errorf("%w: ollama model type %T", ErrUnsupportedArch, m)
}

// windowedCache is the cache of a model whose layers attend over a
// sliding window of window positions (layer type 0) or globally (type 1):
// the windowed cache keeps rewind positions behind its window, so that a
// session can be truncated by that many (Session.Truncate). A file that
// names no window (0) gets ollama's reading of it: no limit.
func windowedCache(window, rewind int32, shift func(ctx ml.Context, layer int, key, shift ml.Tensor) (ml.Tensor, error)) *kvcache.WrapperCache {
	swa := kvcache.NewSWACache(window, shift)
	if window > 0 {
		swa = kvcache.NewSWAMemCache(window, window+rewind, shift)
	}
	return kvcache.NewWrapperCache(swa, kvcache.NewCausalCache(shift))
}

// softcap is limit·tanh(h/limit), Gemma's soft-capping of logits; h itself
// when limit is 0.
func softcap(ctx ml.Context, h ml.Tensor, limit float32) ml.Tensor {
	if limit <= 0 {
		return h
	}
	return h.Scale(ctx, 1.0/float64(limit)).Tanh(ctx).Scale(ctx, float64(limit))
}

func linearOK(l *nn.Linear) bool   { return l != nil && l.Weight != nil }
func normOK(n *nn.RMSNorm) bool    { return n != nil && n.Weight != nil }
func embedOK(e *nn.Embedding) bool { return e != nil && e.Weight != nil }

// headOK rejects the 1-column placeholder output.weight a first-stage slice
// carries to stop ollama from loading a second copy of tied embeddings.
func headOK(norm *nn.RMSNorm, out *nn.Linear) bool {
	return normOK(norm) && linearOK(out) && out.Weight.Dim(1) > 1
}

type qwen3Arch struct {
	m   *qwen3.Model
	eps float32
}

func (a qwen3Arch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TokenEmbedding.Forward(ctx, ids)
}

func (a qwen3Arch) layer(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	return a.m.Layers[i].Forward(ctx, h, pos, out, c, a.m.Options)
}

func (a qwen3Arch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	return a.m.Output.Forward(ctx, a.m.OutputNorm.Forward(ctx, h, a.eps))
}

func (a qwen3Arch) hasEmbed() bool { return embedOK(a.m.TokenEmbedding) }
func (a qwen3Arch) hasHead() bool  { return headOK(a.m.OutputNorm, a.m.Output) }
func (a qwen3Arch) hasLayer(i int) bool {
	l := a.m.Layers[i]
	return normOK(l.AttentionNorm) && normOK(l.MLPNorm) && l.Attention != nil &&
		linearOK(l.Attention.Query) && linearOK(l.Attention.Key) && linearOK(l.Attention.Value) &&
		linearOK(l.Attention.Output) && l.MLP != nil
}

type qwen2Arch struct {
	m   *qwen2.Model
	eps float32
}

func (a qwen2Arch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TokenEmbedding.Forward(ctx, ids)
}

func (a qwen2Arch) layer(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	return a.m.Layers[i].Forward(ctx, h, pos, out, c, &a.m.Options)
}

func (a qwen2Arch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	return a.m.Output.Forward(ctx, a.m.OutputNorm.Forward(ctx, h, a.eps))
}

func (a qwen2Arch) hasEmbed() bool { return embedOK(a.m.TokenEmbedding) }
func (a qwen2Arch) hasHead() bool  { return headOK(a.m.OutputNorm, a.m.Output) }
func (a qwen2Arch) hasLayer(i int) bool {
	l := a.m.Layers[i]
	return normOK(l.AttentionNorm) && normOK(l.MLPNorm) && l.Attention != nil &&
		linearOK(l.Attention.Query) && linearOK(l.Attention.Key) && linearOK(l.Attention.Value) &&
		linearOK(l.Attention.Output) && l.MLP != nil &&
		linearOK(l.MLP.Gate) && linearOK(l.MLP.Up) && linearOK(l.MLP.Down)
}

type llamaArch struct {
	m   *llama.Model
	eps float32
}

func (a llamaArch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TokenEmbedding.Forward(ctx, ids)
}

func (a llamaArch) layer(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	return a.m.Layers[i].Forward(ctx, h, pos, out, c, &a.m.Options)
}

func (a llamaArch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	return a.m.Output.Forward(ctx, a.m.OutputNorm.Forward(ctx, h, a.eps))
}

func (a llamaArch) hasEmbed() bool { return embedOK(a.m.TokenEmbedding) }
func (a llamaArch) hasHead() bool  { return headOK(a.m.OutputNorm, a.m.Output) }
func (a llamaArch) hasLayer(i int) bool {
	l := a.m.Layers[i]
	return normOK(l.AttentionNorm) && normOK(l.MLPNorm) && l.SelfAttention != nil &&
		linearOK(l.SelfAttention.Query) && linearOK(l.SelfAttention.Key) &&
		linearOK(l.SelfAttention.Value) && linearOK(l.SelfAttention.Output) && l.MLP != nil &&
		linearOK(l.MLP.Gate) && linearOK(l.MLP.Up) && linearOK(l.MLP.Down)
}
