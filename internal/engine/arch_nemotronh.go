package engine

import (
	"fmt"
	"reflect"

	"github.com/ollama/ollama/fs"
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model/models/nemotronh"
)

// nemotronhArch runs NVIDIA's Nemotron-H text models (nemotron_h, ollama's
// model/models/nemotronh): every layer an RMS norm, one operator and the
// residual; the operator is a Mamba-2 mixer (the layers whose
// attention.head_count_kv and feed_forward_length are both 0), attention
// without rope (head_count_kv non-zero, feed_forward_length 0) or a
// squared-ReLU feed-forward (feed_forward_length non-zero). The cache keeps
// the Mamba-2 layers' convolution and SSM states per layer, as it keeps
// the attention layers' KV. A stage keeps the states of its own layers:
// only the hidden state crosses between stages, and a replay from position
// 0 recomputes them.
type nemotronhArch struct {
	m                              *nemotronh.Model
	eps                            float32
	convDim, convChannels, ssmSize int
}

func newNemotronHArch(m *nemotronh.Model, cfg fs.Config) (nemotronhArch, error) {
	inner, groups, state := int(cfg.Uint("ssm.inner_size")), int(cfg.Uint("ssm.group_count")), int(cfg.Uint("ssm.state_size"))
	heads := int(cfg.Uint("ssm.time_step_rank"))
	if recurrentLayers(m) > 0 && (heads <= 0 || groups <= 0 || inner%heads != 0 || inner%groups != 0 || cfg.Uint("ssm.conv_kernel") == 0) {
		return nemotronhArch{}, fmt.Errorf("%w: nemotron_h ssm.time_step_rank %d, ssm.group_count %d, ssm.inner_size %d, ssm.conv_kernel %d: the SSM heads and groups must split the inner size, with a kernel",
			ErrNotGGUF, heads, groups, inner, cfg.Uint("ssm.conv_kernel"))
	}
	a := nemotronhArch{
		m:            m,
		eps:          cfg.Float("attention.layer_norm_rms_epsilon"),
		convDim:      max(0, int(cfg.Uint("ssm.conv_kernel"))-1),
		convChannels: inner + 2*groups*state,
	}
	if heads > 0 {
		a.ssmSize = state * (inner / heads) * heads
	}
	if err := checkNemotronH(m); err != nil {
		return nemotronhArch{}, err
	}
	return a, nil
}

// recurrentLayers counts m's Mamba-2 layers.
func recurrentLayers(m *nemotronh.Model) int {
	n := 0
	for _, l := range m.Layers {
		if _, ok := l.Operator.(*nemotronh.Mamba2); ok {
			n++
		}
	}
	return n
}

func (a nemotronhArch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TokenEmbedding.Forward(ctx, ids)
}

func (a nemotronhArch) layer(ctx ml.Context, i int, h, _, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	h, err := a.m.Layers[i].Forward(ctx, i, h, out, c.(*nemotronh.HybridCache), a.m.Options)
	if err != nil {
		// The layer refuses only a batch of several sequences (sessions
		// run isolated) or heads that do not split the projections'
		// widths (refused at load: checkNemotronH); the round recovers
		// this as ErrInternal.
		panic(fmt.Errorf("nemotron_h layer %d: %w", i, err))
	}
	return h
}

func (a nemotronhArch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	return a.m.Output.Forward(ctx, a.m.OutputNorm.Forward(ctx, h, a.eps))
}

// newCache is nemotronh.New's cache: KV for the attention layers, the
// convolution and SSM states for the Mamba-2 ones. It cannot drop
// positions except back to a checkpoint of the recurrent state
// (Session.Truncate).
func (a nemotronhArch) newCache(int32) kvcache.Cache {
	return nemotronh.NewHybridCache(a.convDim, a.convChannels, a.ssmSize)
}

// isolated: ollama's Nemotron-H runs one sequence per graph.
func (a nemotronhArch) isolated() {}

func (a nemotronhArch) hasEmbed() bool { return embedOK(a.m.TokenEmbedding) }
func (a nemotronhArch) hasHead() bool  { return headOK(a.m.OutputNorm, a.m.Output) }

// hasLayer: every tensor layer i's forward pass reads (nemotronhMissing).
func (a nemotronhArch) hasLayer(i int) bool { return len(nemotronhMissing(a.m, i)) == 0 }

// checkNemotronH refuses a file that lacks tensors of the layers it holds
// (every layer from the first it has a tensor of to the last), or the
// embedding or head its ends need, naming them: ollama's nemotronh has no
// Validate, and its forward pass would dereference the missing tensors.
func checkNemotronH(m *nemotronh.Model) error {
	has := func(i int) bool {
		l := m.Layers[i]
		return normOK(l.AttentionNorm) || holdsTensor(reflect.ValueOf(l.Operator)) || holdsTensor(reflect.ValueOf(l.MLP))
	}
	return heldLayers("nemotron_h", len(m.Layers), has, func(i int) []string { return nemotronhMissing(m, i) },
		embedOK(m.TokenEmbedding), normOK(m.OutputNorm), linearOK(m.Output))
}

// nemotronhMissing names the tensors of layer i its forward pass reads
// unconditionally and the model lacks (ollama skips the convolution's
// bias, the D skip and the group norm where a file has none).
func nemotronhMissing(m *nemotronh.Model, i int) []string {
	l := m.Layers[i]
	p := fmt.Sprintf("blk.%d.", i)
	var out []string
	need := func(ok bool, name string) {
		if !ok {
			out = append(out, p+name)
		}
	}
	need(normOK(l.AttentionNorm), "attn_norm.weight")
	switch op := l.Operator.(type) {
	case *nemotronh.Mamba2:
		need(linearOK(op.SSMIn), "ssm_in.weight")
		need(op.SSMConv1D != nil && op.SSMConv1D.Weight != nil, "ssm_conv1d.weight")
		need(op.SSMDtB != nil, "ssm_dt.bias")
		need(op.SSMA != nil, "ssm_a")
		need(linearOK(op.SSMOut), "ssm_out.weight")
	case *nemotronh.Attention:
		need(linearOK(op.Query), "attn_q.weight")
		need(linearOK(op.Key), "attn_k.weight")
		need(linearOK(op.Value), "attn_v.weight")
		need(linearOK(op.Output), "attn_output.weight")
	case nil:
		switch ff := l.MLP.(type) {
		case *nemotronh.Dense:
			need(linearOK(ff.Up), "ffn_up.weight")
			need(linearOK(ff.Down), "ffn_down.weight")
		case *nemotronh.MoESparse:
			need(linearOK(ff.Router), "ffn_gate_inp.weight")
			need(weightOf(ff, "Up"), "ffn_up_exps.weight")
			need(weightOf(ff, "Down"), "ffn_down_exps.weight")
		default:
			out = append(out, p+"(feed-forward)")
		}
	default:
		out = append(out, p+"(operator)")
	}
	return out
}
