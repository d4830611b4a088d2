package engine

import (
	"fmt"
	"reflect"

	"github.com/ollama/ollama/fs"
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model/models/qwen3next"
)

// qwen3nextArch runs Qwen3-Next's text model (model/models/qwen3next):
// layers whose operator is either gated attention (a query twice as wide,
// half of it a sigmoid gate on the output; query and key norms; partial
// rope) or a gated DeltaNet, a linear attention whose recurrent state (a
// head_v_dim² matrix per value head) and short-convolution state the cache
// keeps per layer, as it keeps attention's KV (the layers whose
// attention.head_count_kv is 0). Every layer's feed-forward is a mixture
// of experts with a sigmoid-gated shared expert. A stage keeps the states
// of its own layers: only the hidden state crosses between stages, and a
// replay from position 0 recomputes them. Vision weights are never run:
// text only.
type qwen3nextArch struct {
	m *qwen3next.Model
	// opts is the model's options as qwen3next.New made them: the layers
	// take them by pointer and keep in them the masks of the DeltaNet's
	// chunked prefill, built once per graph (model.Forward clears them
	// before its layers); each graph here gets a copy of these, whose
	// masks are unset, so none outlives its graph.
	opts                         qwen3next.Options
	eps                          float32
	convDim, convChannels, state int
}

func newQwen3NextArch(m *qwen3next.Model, cfg fs.Config) (qwen3nextArch, error) {
	inner, groups, stateSize := int(cfg.Uint("ssm.inner_size")), int(cfg.Uint("ssm.group_count")), int(cfg.Uint("ssm.state_size"))
	vHeads := int(cfg.Uint("ssm.time_step_rank"))
	if vHeads <= 0 || groups <= 0 || inner%vHeads != 0 || vHeads%groups != 0 {
		return qwen3nextArch{}, fmt.Errorf("%w: qwen3next ssm.time_step_rank %d, ssm.group_count %d, ssm.inner_size %d: value heads must split the inner size and be a multiple of the key heads",
			ErrNotGGUF, vHeads, groups, inner)
	}
	headV := inner / vHeads
	a := qwen3nextArch{
		m:            m,
		opts:         *m.Options,
		eps:          cfg.Float("attention.layer_norm_rms_epsilon"),
		convDim:      max(0, int(cfg.Uint("ssm.conv_kernel"))-1),
		convChannels: inner + 2*groups*stateSize,
		state:        headV * headV * vHeads,
	}
	if err := checkQwen3Next(m); err != nil {
		return qwen3nextArch{}, err
	}
	return a, nil
}

func (a qwen3nextArch) embed(ctx ml.Context, ids ml.Tensor) ml.Tensor {
	return a.m.TokenEmbedding.Forward(ctx, ids)
}

// layer runs layer i with options of its own; the layer loop runs this
// arch through withPositions, one set of options per graph, as
// model.Forward.
func (a qwen3nextArch) layer(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
	return a.withPositions(ctx, nil)(ctx, i, h, pos, out, c)
}

// withPositions returns the layer function of one graph: its layers share
// one copy of the options, so the DeltaNet's masks are built once in it.
func (a qwen3nextArch) withPositions(ml.Context, []int32) layerFunc {
	opts := a.opts
	return func(ctx ml.Context, i int, h, pos, out ml.Tensor, c kvcache.Cache) ml.Tensor {
		h, err := a.m.Layers[i].Forward(ctx, i, h, pos, out, c.(*qwen3next.HybridCache), &opts)
		if err != nil {
			// The layer refuses only a batch of sequences of unequal
			// lengths (sessions run isolated) or a layer without its
			// projections (refused at load: checkQwen3Next); the round
			// recovers this as ErrInternal.
			panic(fmt.Errorf("qwen3next layer %d: %w", i, err))
		}
		return h
	}
}

func (a qwen3nextArch) head(ctx ml.Context, h ml.Tensor) ml.Tensor {
	return a.m.Output.Forward(ctx, a.m.OutputNorm.Forward(ctx, h, a.eps))
}

// newCache is qwen3next.New's cache: KV for the attention layers, the
// convolution and delta states for the others. It cannot drop positions
// except back to a checkpoint of the recurrent state (Session.Truncate).
func (a qwen3nextArch) newCache(int32) kvcache.Cache {
	return qwen3next.NewHybridCache(a.m.Shift, a.convDim, a.convChannels, a.state)
}

// isolated: the DeltaNet needs every sequence of a graph to bring the same
// number of positions, which batching sessions does not give.
func (a qwen3nextArch) isolated() {}

func (a qwen3nextArch) hasEmbed() bool { return embedOK(a.m.TokenEmbedding) }
func (a qwen3nextArch) hasHead() bool  { return headOK(a.m.OutputNorm, a.m.Output) }

// hasLayer: every tensor layer i's forward pass reads (qwen3nextMissing).
func (a qwen3nextArch) hasLayer(i int) bool { return len(qwen3nextMissing(a.m, i)) == 0 }

// checkQwen3Next refuses a file that lacks tensors of the layers it holds
// (every layer from the first it has a tensor of to the last), or the
// embedding or head its ends need, naming them: ollama's qwen3next has no
// Validate, and its forward pass would dereference the missing tensors.
func checkQwen3Next(m *qwen3next.Model) error {
	return heldLayers("qwen3next", len(m.Layers), func(i int) bool { return qwen3nextHasAny(m, i) },
		func(i int) []string { return qwen3nextMissing(m, i) }, embedOK(m.TokenEmbedding), normOK(m.OutputNorm), linearOK(m.Output))
}

// qwen3nextFFN lists the tensor fields of a layer's feed-forward (a type
// ollama does not export): the experts' (sparse) or a dense one's, with
// their names; the shared expert's are optional, as in ollama.
func qwen3nextFFN(ff qwen3next.MLP) (fields, names []string, err error) {
	if t := reflect.TypeOf(ff); t != nil && t.Kind() == reflect.Pointer {
		switch t.Elem().Name() {
		case "sparse":
			return []string{"Router", "Gate", "Up", "Down"}, []string{"ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}, nil
		case "dense":
			return []string{"Gate", "Up", "Down"}, []string{"ffn_gate", "ffn_up", "ffn_down"}, nil
		}
	}
	return nil, nil, fmt.Errorf("%w: unknown qwen3next feed-forward %T", ErrInternal, ff)
}

// weightOf is whether field name of the struct ff points to is a linear
// map (nn.Linear or nn.LinearBatch) with its weight.
func weightOf(ff any, name string) bool {
	v := reflect.ValueOf(ff)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return false
	}
	f := v.Elem().FieldByName(name)
	if !f.IsValid() || f.Kind() != reflect.Pointer || f.IsNil() {
		return false
	}
	w := f.Elem().FieldByName("Weight")
	return w.IsValid() && !w.IsNil()
}

// qwen3nextMissing names the tensors of layer i its forward pass reads and
// the model lacks.
func qwen3nextMissing(m *qwen3next.Model, i int) []string {
	l := m.Layers[i]
	p := fmt.Sprintf("blk.%d.", i)
	var out []string
	need := func(ok bool, name string) {
		if !ok {
			out = append(out, p+name)
		}
	}
	need(normOK(l.AttentionNorm), "attn_norm.weight")
	need(normOK(l.AttentionPostNorm), "post_attention_norm.weight")
	switch op := l.Operator.(type) {
	case *qwen3next.FullAttention:
		need(linearOK(op.Query), "attn_q.weight")
		need(normOK(op.QueryNorm), "attn_q_norm.weight")
		need(linearOK(op.Key), "attn_k.weight")
		need(normOK(op.KeyNorm), "attn_k_norm.weight")
		need(linearOK(op.Value), "attn_v.weight")
		need(linearOK(op.Output), "attn_output.weight")
	case *qwen3next.GatedDeltaNet:
		need(linearOK(op.SSMQKV), "attn_qkv.weight")
		need(linearOK(op.SSMQKVGate), "attn_gate.weight")
		need(linearOK(op.SSMBetaAlpha) || linearOK(op.SSMBeta) && linearOK(op.SSMAlpha), "ssm_ba.weight")
		need(op.SSMConv1D != nil && op.SSMConv1D.Weight != nil, "ssm_conv1d.weight")
		need(op.SSMDT != nil, "ssm_dt")
		need(op.SSMA != nil, "ssm_a")
		need(normOK(op.SSMNorm), "ssm_norm.weight")
		need(linearOK(op.SSMOut), "ssm_out.weight")
	default:
		out = append(out, p+"(operator)")
	}
	fields, names, err := qwen3nextFFN(l.MLP)
	if err != nil {
		return append(out, p+"(feed-forward)")
	}
	for k, f := range fields {
		need(weightOf(l.MLP, f), names[k]+".weight")
	}
	return out
}

// qwen3nextHasAny reports whether the file holds any tensor of layer i.
func qwen3nextHasAny(m *qwen3next.Model, i int) bool {
	l := m.Layers[i]
	if normOK(l.AttentionNorm) || normOK(l.AttentionPostNorm) {
		return true
	}
	return holdsTensor(reflect.ValueOf(l.Operator)) || holdsTensor(reflect.ValueOf(l.MLP))
}

// holdsTensor reports whether v, a layer part as ollama's loader filled
// it, holds a tensor in its exported fields.
func holdsTensor(v reflect.Value) bool {
	tensorType := reflect.TypeFor[ml.Tensor]()
	switch {
	case !v.IsValid():
		return false
	case v.Kind() == reflect.Interface && v.Type() == tensorType:
		return !v.IsNil()
	case v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface:
		return !v.IsNil() && holdsTensor(v.Elem())
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && holdsTensor(v.Field(i)) {
				return true
			}
		}
	}
	return false
}
