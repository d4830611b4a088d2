package engine

import (
	"fmt"
	"reflect"
	"strings"

	fsggml "github.com/ollama/ollama/fs/ggml"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/ml/nn"
	"github.com/ollama/ollama/model"
	"github.com/ollama/ollama/model/models/lfm2"
)

// LFM2 stage slices. ollama's loader (model.New) ends with the model's
// Validate, and lfm2's wants every layer's tensors, the embedding and the
// head: a stage slice cannot pass it. So the engine builds a slice's model
// itself, from ollama's parts: lfm2.New makes the layers from the metadata
// (each layer's operator, attention or short convolution, and its
// feed-forward, dense or experts), and every tensor the file holds goes
// where ollama's own loader puts it, by the names its struct tags give
// (TestLFM2SliceBuild holds the two equal, tensor by tensor, on whole
// files). What Validate checks is kept for what the slice holds: every
// layer from its first to its last must have all its tensors, the first
// layer the embedding and the last the head, else the slice is refused
// naming the tensors it lacks (lfm2Missing). Whole files still load
// through model.New and Validate.

// sliceLoaders are the architectures whose stage slices the engine
// builds itself, ollama's loader refusing them (see above).
var sliceLoaders = map[string]func(path string, meta *fsggml.GGML, p ml.BackendParams) (model.Model, ml.Backend, error){
	"lfm2":    loadLFM2Slice,
	"lfm2moe": loadLFM2Slice,
}

// wholeFile reports whether meta holds every layer, the embedding and an
// output norm: a file ollama's own loader takes.
func wholeFile(meta *fsggml.GGML) bool {
	blocks := map[int]bool{}
	names := map[string]bool{}
	for _, t := range meta.Tensors().Items() {
		names[t.Name] = true
		if i, ok := blockOf(t.Name); ok {
			blocks[i] = true
		}
	}
	return len(blocks) == int(meta.KV().BlockCount()) && names["token_embd.weight"] &&
		(names["output_norm.weight"] || names["token_embd_norm.weight"])
}

// loadLFM2Slice opens the ggml backend on a stage slice of an LFM2 model
// and builds the model on it, refusing a slice that lacks tensors of what
// it holds.
func loadLFM2Slice(path string, meta *fsggml.GGML, p ml.BackendParams) (model.Model, ml.Backend, error) {
	b, err := ml.NewBackend(path, p)
	if err != nil {
		return nil, nil, err
	}
	m, err := buildLFM2(b)
	if err == nil {
		err = checkLFM2Slice(m, meta)
	}
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return m, b, nil
}

// checkLFM2Slice is Validate for what a slice holds: every layer from its
// first to its last with all its tensors, the embedding with the first
// layer, the head with the last.
func checkLFM2Slice(m *lfm2.Model, meta *fsggml.GGML) error {
	lo, hi := -1, -1
	for _, t := range meta.Tensors().Items() {
		if i, ok := blockOf(t.Name); ok && i < len(m.Layers) {
			if lo < 0 || i < lo {
				lo = i
			}
			hi = max(hi, i)
		}
	}
	if lo < 0 {
		return fmt.Errorf("%w: %s stage slice with no layer", ErrMissingLayers, meta.KV().Architecture())
	}
	var missing []string
	if lo == 0 && !embedOK(m.TokenEmbedding) {
		missing = append(missing, "token_embd.weight")
	}
	for i := lo; i <= hi; i++ {
		missing = append(missing, lfm2Missing(m, i)...)
	}
	if hi == len(m.Layers)-1 {
		if !normOK(m.OutputNorm) {
			missing = append(missing, "output_norm.weight")
		}
		if !linearOK(m.Output) || m.Output.Weight.Dim(1) <= 1 {
			missing = append(missing, "output.weight")
		}
	}
	if len(missing) > 0 {
		if len(missing) > 8 {
			missing = append(missing[:8], fmt.Sprintf("and %d more", len(missing)-8))
		}
		return fmt.Errorf("%w: %s stage slice of layers [%d,%d) lacks %s", ErrMissingLayers,
			meta.KV().Architecture(), lo, hi+1, strings.Join(missing, ", "))
	}
	return nil
}

// buildLFM2 makes the lfm2 model of b's file, text only, with the tensors
// the file holds where ollama's loader puts them (a struct of tensors none
// of which the file holds stays nil, as there).
func buildLFM2(b ml.Backend) (*lfm2.Model, error) {
	om, err := lfm2.New(b.Config())
	if err != nil {
		return nil, err
	}
	m, ok := om.(*lfm2.Model)
	if !ok {
		return nil, fmt.Errorf("%w: lfm2.New made a %T", ErrInternal, om)
	}
	m.VisionModel, m.VisionProjector = nil, nil
	get := func(names ...string) ml.Tensor {
		for _, n := range names {
			if t := b.Get(n); t != nil {
				return t
			}
		}
		return nil
	}
	m.TokenEmbedding = nil
	if w := get("token_embd.weight"); w != nil {
		m.TokenEmbedding = &nn.Embedding{Weight: w}
	}
	m.OutputNorm = norm(get("output_norm.weight", "token_embd_norm.weight"))
	m.Output = linear(get("output.weight", "token_embd.weight"), get("output.bias", "token_embd.bias"))
	for i := range m.Layers {
		l := &m.Layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		lin := func(name string, alt ...string) *nn.Linear {
			w, bias := get(p+name+".weight"), get(p+name+".bias")
			for _, a := range alt {
				if w == nil {
					w = get(p + a + ".weight")
				}
				if bias == nil {
					bias = get(p + a + ".bias")
				}
			}
			return linear(w, bias)
		}
		l.AttentionNorm = norm(get(p + "attn_norm.weight"))
		l.MLPNorm = norm(get(p + "ffn_norm.weight"))
		switch op := l.Operator.(type) {
		case *lfm2.Attention:
			op.Query, op.Key, op.Value = lin("attn_q"), lin("attn_k"), lin("attn_v")
			op.Output = lin("attn_output", "attn_out")
			op.QueryNorm, op.KeyNorm = norm(get(p+"attn_q_norm.weight")), norm(get(p+"attn_k_norm.weight"))
		case *lfm2.ShortConv:
			op.InProj, op.OutProj = lin("shortconv.in_proj"), lin("shortconv.out_proj")
			if w := get(p + "shortconv.conv.weight"); w != nil {
				// Conv's type is lfm2's own: made and set by reflection
				f := reflect.ValueOf(op).Elem().FieldByName("Conv")
				if f.Kind() != reflect.Pointer || f.Type().Elem().Kind() != reflect.Struct {
					return nil, fmt.Errorf("%w: ollama's lfm2.ShortConv has no Conv kernel pointer", ErrInternal)
				}
				k := reflect.New(f.Type().Elem())
				if err := setField(k.Interface(), "Weight", w); err != nil {
					return nil, err
				}
				f.Set(k)
			}
		default:
			return nil, fmt.Errorf("%w: lfm2 layer %d: operator %T", ErrInternal, i, l.Operator)
		}
		ffn, err := lfm2FFNOf(l.MLP)
		if err != nil {
			return nil, fmt.Errorf("lfm2 layer %d: %w", i, err)
		}
		for _, f := range ffn {
			var v any
			switch {
			case f.batch:
				w, bias := get(p+f.name+".weight"), get(p+f.name+".bias")
				if w != nil || bias != nil {
					v = &nn.LinearBatch{Weight: w, Bias: bias}
				} else {
					v = (*nn.LinearBatch)(nil)
				}
			case f.tensor:
				v = get(p+f.name+".bias", p+f.name)
			default:
				v = lin(f.name)
			}
			if err := setField(l.MLP, f.field, v); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// lfm2FFN is a field of one of lfm2's feed-forward types (unexported):
// its tensor's name in a layer, and whether it is a batched (experts')
// matrix or a bare tensor, else a linear map. required: Validate wants it.
type lfm2FFN struct {
	field, name   string
	batch, tensor bool
	required      bool
}

var (
	lfm2Dense  = []lfm2FFN{{field: "Up", name: "ffn_up", required: true}, {field: "Down", name: "ffn_down", required: true}, {field: "Gate", name: "ffn_gate", required: true}}
	lfm2Sparse = []lfm2FFN{{field: "Router", name: "ffn_gate_inp", required: true},
		{field: "Gate", name: "ffn_gate_exps", batch: true, required: true}, {field: "Up", name: "ffn_up_exps", batch: true, required: true},
		{field: "Down", name: "ffn_down_exps", batch: true, required: true}, {field: "Bias", name: "exp_probs_b", tensor: true}}
)

// lfm2FFNOf lists the fields of ff, a layer's feed-forward as lfm2.New
// made it: dense or experts.
func lfm2FFNOf(ff lfm2.FeedForward) ([]lfm2FFN, error) {
	if t := reflect.TypeOf(ff); t != nil && t.Kind() == reflect.Pointer {
		switch t.Elem().Name() {
		case "denseMLP":
			return lfm2Dense, nil
		case "sparseMLP":
			return lfm2Sparse, nil
		}
	}
	return nil, fmt.Errorf("%w: unknown lfm2 feed-forward %T", ErrInternal, ff)
}

// setField sets the exported field name of the struct p points to (a type
// ollama does not export) to v.
func setField(p any, name string, v any) error {
	s := reflect.ValueOf(p)
	if s.Kind() != reflect.Pointer || s.IsNil() || s.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("%w: setting %s of %T", ErrInternal, name, p)
	}
	f := s.Elem().FieldByName(name)
	if !f.IsValid() || !f.CanSet() {
		return fmt.Errorf("%w: ollama's %T has no field %s", ErrInternal, p, name)
	}
	x := reflect.ValueOf(v)
	if !x.IsValid() {
		x = reflect.Zero(f.Type())
	}
	if !x.Type().AssignableTo(f.Type()) {
		return fmt.Errorf("%w: ollama's %T.%s is %v, not %T", ErrInternal, p, name, f.Type(), v)
	}
	f.Set(x)
	return nil
}

// lfm2Missing names the tensors of layer i that Validate wants and the
// model lacks.
func lfm2Missing(m *lfm2.Model, i int) []string {
	l := m.Layers[i]
	p := fmt.Sprintf("blk.%d.", i)
	var out []string
	need := func(ok bool, name string) {
		if !ok {
			out = append(out, p+name+".weight")
		}
	}
	need(normOK(l.AttentionNorm), "attn_norm")
	switch op := l.Operator.(type) {
	case *lfm2.Attention:
		need(op != nil && linearOK(op.Query), "attn_q")
		need(op != nil && linearOK(op.Key), "attn_k")
		need(op != nil && linearOK(op.Value), "attn_v")
		need(op != nil && linearOK(op.Output), "attn_output")
		need(op != nil && normOK(op.QueryNorm), "attn_q_norm")
		need(op != nil && normOK(op.KeyNorm), "attn_k_norm")
	case *lfm2.ShortConv:
		need(op != nil && op.Conv != nil && op.Conv.Weight != nil, "shortconv.conv")
		need(op != nil && linearOK(op.InProj), "shortconv.in_proj")
		need(op != nil && linearOK(op.OutProj), "shortconv.out_proj")
	default:
		out = append(out, p+"(operator)")
	}
	need(normOK(l.MLPNorm), "ffn_norm")
	ffn, err := lfm2FFNOf(l.MLP)
	if err != nil {
		return append(out, p+"(feed-forward)")
	}
	v := reflect.ValueOf(l.MLP).Elem()
	for _, f := range ffn {
		if !f.required {
			continue
		}
		fv := v.FieldByName(f.field)
		ok := fv.IsValid() && fv.Kind() == reflect.Pointer && !fv.IsNil()
		if ok {
			w := fv.Elem().FieldByName("Weight")
			ok = w.IsValid() && !w.IsNil()
		}
		need(ok, f.name)
	}
	return out
}

func norm(w ml.Tensor) *nn.RMSNorm {
	if w == nil {
		return nil
	}
	return &nn.RMSNorm{Weight: w}
}

func linear(w, bias ml.Tensor) *nn.Linear {
	if w == nil && bias == nil {
		return nil
	}
	return &nn.Linear{Weight: w, Bias: bias}
}
