package engine

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"

	fsggml "github.com/ollama/ollama/fs/ggml"
)

// SynthSpec describes a synthetic (random-weight) model.
type SynthSpec struct {
	Arch string // qwen3 | qwen2 | llama | gemma3 | mistral3 | lfm2 | lfm2moe | qwen3moe | gptoss (or gpt-oss) | gemma2 | olmo3 | deepseek2 | glm4moelite | llama4 | qwen3next | nemotron_h | nemotron_h_moe | gemma3n
	Size string // tiny | small | 0.6b | 1b | 1.5b | 1.7b | 2b | 3b | 4b | 7b | 8b | 9b | 20b | 30b | 70b | 80b | 109b (see SynthSizesFor)
	Type string // f32 | f16 | q8_0 | q4_k
	Seed uint64
	// Layers, when above 0, keeps the first Layers layers of the shape
	// (a real model's shape, fewer layers: a quick look at its speed);
	// more than the shape has is an ErrBadInput.
	Layers int
	// ChatTemplate, when set, is the file's tokenizer.chat_template in
	// place of the architecture's; NoChatTemplate leaves it out (a base
	// model, used by raw completion only).
	ChatTemplate   string
	NoChatTemplate bool
	// Weights, when set, are the values of the tensors they name (GGUF
	// names, GGUF layout) in place of random ones: trained weights written
	// in the file's shape, vocabulary and type (f32, f16 or q8_0). Every
	// name must be a tensor of the shape, with its count of values.
	Weights map[string][]float32
	// Name, when set, is the file's general.name (default
	// synthetic-ARCH-SIZE-TYPE).
	Name string
	// Progress, when set, sees the tensor bytes written so far and their
	// total, after each tensor.
	Progress func(done, total int64)
}

// SynthSizes and SynthTypes list the accepted SynthSpec values; not every
// architecture has every size (SynthSizesFor).
var (
	SynthSizes = []string{"tiny", "small", "0.6b", "1b", "1.5b", "1.7b", "2b", "3b", "4b", "7b", "8b", "9b", "20b", "30b", "70b", "80b", "109b"}
	SynthTypes = []string{"f32", "f16", "q8_0", "q4_k"}
)

// synthDist is how a tensor's weights are drawn: gen when set (norms and
// other float-only tensors), else N(0, std^2), which quantized types write
// as random blocks of the same std (writeDirect).
type synthDist struct {
	std float32
	gen func(n int, r *rand.Rand) []float32
}

// lazyTensor generates its data when written, so a large model is never held
// in memory whole (fsggml.WriteGGUF writes tensors in parallel).
type lazyTensor struct {
	name  string
	typ   fsggml.TensorType
	n     int // values
	dist  synthDist
	given []float32 // SynthSpec.Weights' values, when given
	seed  uint64
	size  uint64
	wrote func(n int64) // counts the bytes written, for SynthSpec.Progress
}

func (t *lazyTensor) WriteTo(w io.Writer) (int64, error) {
	// Weights depend only on (seed, tensor name).
	h := fnv.New64a()
	h.Write([]byte(t.name))
	r := rand.New(rand.NewPCG(h.Sum64(), t.seed))
	pw := &progressWriter{w: w, wrote: t.wrote}
	var n int64
	var err error
	switch {
	case t.given != nil && t.typ == fsggml.TensorTypeQ8_0:
		n, err = writeQ8_0(pw, t.given)
	case t.given != nil && t.typ != fsggml.TensorTypeF32 && t.typ != fsggml.TensorTypeF16:
		return 0, fmt.Errorf("%w: synth %s: given weights in %v (f32, f16 or q8_0)", ErrBadInput, t.name, t.typ)
	case t.typ == fsggml.TensorTypeF32 || t.typ == fsggml.TensorTypeF16:
		n, err = t.writeFloat(pw, r)
	default:
		if t.dist.gen != nil {
			return 0, fmt.Errorf("engine: synth %s: %v needs normal weights", t.name, t.typ)
		}
		n, err = writeDirect(pw, t.typ, t.n, float64(t.dist.std), r)
	}
	if err == nil && uint64(n) != t.size {
		err = fmt.Errorf("engine: synth %s: %d bytes, want %d", t.name, n, t.size)
	}
	return n, err
}

func (t *lazyTensor) writeFloat(w io.Writer, r *rand.Rand) (int64, error) {
	f := t.given
	switch {
	case f != nil:
	case t.dist.gen != nil:
		f = t.dist.gen(t.n, r)
	default:
		f = make([]float32, t.n)
		for i := range f {
			f[i] = t.dist.std * float32(r.NormFloat64())
		}
	}
	var data []byte
	if t.typ == fsggml.TensorTypeF16 {
		data = F32ToF16Bytes(f)
	} else {
		data = make([]byte, 4*len(f))
		for i, v := range f {
			u := math.Float32bits(v)
			data[4*i], data[4*i+1], data[4*i+2], data[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
	}
	n, err := w.Write(data)
	return int64(n), err
}

// progressWriter reports every write's bytes to wrote.
type progressWriter struct {
	w     io.Writer
	wrote func(n int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if p.wrote != nil {
		p.wrote(int64(n))
	}
	return n, err
}

// Synth writes a random-weight GGUF for spec to path. Weights depend only on
// (seed, tensor name): f32 and f16 files hold the same underlying weights;
// q8_0 and q4_k files are written as random quantized blocks of the same
// scale (other draws, not a quantization of those weights), which keeps an
// 8B model to the time its bytes take to reach the disk. Weights are scaled
// so that the layers, not the token embedding, dominate the residual
// stream: greedy decoding then produces varied tokens.
func Synth(ctx context.Context, path string, spec SynthSpec) error {
	shapes, ok := synthShapes[synthArch(spec.Arch)]
	if !ok {
		return fmt.Errorf("%w %q (synth: qwen3 | qwen2 | llama | gemma3 | mistral3 | lfm2 | lfm2moe | qwen3moe | gptoss | gemma2 | olmo3 | deepseek2 | glm4moelite | llama4 | qwen3next | nemotron_h | nemotron_h_moe | gemma3n)", ErrUnsupportedArch, spec.Arch)
	}
	s, ok := shapes[spec.Size]
	if !ok {
		return fmt.Errorf("%w: synth size %q for %s (%s)", ErrBadInput, spec.Size, spec.Arch, strings.Join(SynthSizesFor(spec.Arch), " | "))
	}
	switch {
	case spec.Layers < 0 || spec.Layers > s.layers:
		return fmt.Errorf("%w: synth layers %d for %s %s (1..%d, or 0 for all)", ErrBadInput, spec.Layers, spec.Arch, spec.Size, s.layers)
	case spec.Layers > 0:
		s.layers = spec.Layers
	}
	return synthShaped(ctx, path, spec, s)
}

// synthShaped writes spec's model with shape s.
func synthShaped(ctx context.Context, path string, spec SynthSpec, s synthShape) (err error) {
	defer recoverErr(&err, "writing synthetic model")
	var matType, embType fsggml.TensorType
	var ftype fsggml.FileType
	switch spec.Type {
	case "f32":
		matType, embType, ftype = fsggml.TensorTypeF32, fsggml.TensorTypeF32, fsggml.FileTypeF32
	case "f16":
		matType, embType, ftype = fsggml.TensorTypeF16, fsggml.TensorTypeF16, fsggml.FileTypeF16
	case "q8_0":
		matType, embType, ftype = fsggml.TensorTypeQ8_0, fsggml.TensorTypeQ8_0, fsggml.FileTypeQ8_0
	case "q4_k": // like Q4_K_M: matrices Q4_K, embedding Q6_K
		matType, embType, ftype = fsggml.TensorTypeQ4_K, fsggml.TensorTypeQ6_K, fsggml.FileTypeQ4_K_M
	default:
		return fmt.Errorf("%w: synth type %q (f32 | f16 | q8_0 | q4_k)", ErrBadInput, spec.Type)
	}
	if spec.Weights != nil && spec.Type == "q4_k" {
		return fmt.Errorf("%w: synth weights given in q4_k (f32, f16 or q8_0)", ErrBadInput)
	}
	arch := spec.Arch
	var voc *synthVocab
	kv := fsggml.KV{
		"general.architecture":             arch,
		"general.name":                     fmt.Sprintf("synthetic-%s-%s-%s", arch, spec.Size, spec.Type),
		"general.type":                     "model",
		"general.file_type":                uint32(ftype),
		"general.quantization_version":     uint32(2),
		"general.alignment":                uint32(32),
		"block_count":                      uint32(s.layers),
		"context_length":                   uint32(s.ctx),
		"embedding_length":                 uint32(s.hidden),
		"feed_forward_length":              uint32(s.ffn),
		"attention.head_count":             uint32(s.heads),
		"attention.head_count_kv":          uint32(s.kvHeads),
		"attention.layer_norm_rms_epsilon": float32(1e-6),
		"tokenizer.ggml.model":             "gpt2",
	}
	switch arch {
	case "qwen3", "qwen2", "qwen3moe":
		voc, err = buildVocab(s.vocab, s.normal, qwenSpecials, "")
		if err != nil {
			return err
		}
		eot := voc.ids["<|endoftext|>"]
		kv["rope.freq_base"] = float32(1000000)
		kv["tokenizer.ggml.pre"] = "qwen2"
		kv["tokenizer.ggml.eos_token_id"] = uint32(voc.ids["<|im_end|>"])
		kv["tokenizer.ggml.padding_token_id"] = uint32(eot)
		kv["tokenizer.ggml.bos_token_id"] = uint32(eot)
		kv["tokenizer.ggml.add_bos_token"] = false
		if arch != "qwen2" {
			kv["attention.key_length"] = uint32(s.headDim)
			kv["attention.value_length"] = uint32(s.headDim)
			kv["tokenizer.chat_template"] = qwen3Template
		} else {
			kv["tokenizer.chat_template"] = qwen25Template
		}
	case "llama":
		voc, err = buildVocab(s.vocab, s.normal, llamaSpecials, "<|reserved_special_token_%d|>")
		if err != nil {
			return err
		}
		kv["rope.freq_base"] = float32(500000)
		kv["rope.dimension_count"] = uint32(s.headDim)
		kv["vocab_size"] = uint32(s.vocab)
		kv["tokenizer.ggml.pre"] = "llama-bpe"
		kv["tokenizer.ggml.bos_token_id"] = uint32(voc.ids["<|begin_of_text|>"])
		kv["tokenizer.ggml.eos_token_id"] = uint32(voc.ids["<|eot_id|>"])
		kv["tokenizer.ggml.add_bos_token"] = true
		kv["tokenizer.chat_template"] = llama3Template
	case "gemma3":
		if voc, err = gemma3KV(kv, s, spec.Size); err != nil {
			return err
		}
	case "gemma2":
		if voc, err = gemma2KV(kv, s, spec.Size); err != nil {
			return err
		}
	case "olmo3":
		if voc, err = olmo3KV(kv, s, spec.Size); err != nil {
			return err
		}
	case "deepseek2":
		if voc, err = deepseek2KV(kv, s, spec.Size); err != nil {
			return err
		}
	case "glm4moelite":
		if voc, err = glm4moeliteKV(kv, s, spec.Size); err != nil {
			return err
		}
	case "mistral3":
		if voc, err = mistral3KV(kv, s, spec.Size); err != nil {
			return err
		}
	case "lfm2", "lfm2moe":
		if voc, err = lfm2KV(kv, s, spec.Size); err != nil {
			return err
		}
	case "gptoss", "gpt-oss":
		if voc, err = gptossKV(kv, s, spec.Size); err != nil {
			return err
		}
	case "llama4":
		if voc, err = llama4KV(kv, s, spec.Size); err != nil {
			return err
		}
	case "gemma3n":
		if voc, err = gemma3nKV(kv, s, spec.Size); err != nil {
			return err
		}
	case "qwen3next":
		if voc, err = qwen3nextKV(kv, s, spec.Size); err != nil {
			return err
		}
	case "nemotron_h", "nemotron_h_moe":
		if voc, err = nemotronhKV(kv, s, spec.Size); err != nil {
			return err
		}
	}
	if spec.Name != "" {
		kv["general.name"] = spec.Name
	}
	switch {
	case spec.NoChatTemplate:
		delete(kv, "tokenizer.chat_template")
	case spec.ChatTemplate != "":
		kv["tokenizer.chat_template"] = spec.ChatTemplate
	}
	moe, isMoE := synthExperts[synthArch(arch)][spec.Size]
	if isMoE {
		moeKV(kv, moe)
	}
	kv["tokenizer.ggml.tokens"] = voc.tokens
	kv["tokenizer.ggml.token_type"] = voc.types
	if voc.merges != nil {
		kv["tokenizer.ggml.merges"] = voc.merges
	}

	var ts []*fsggml.Tensor
	// WriteGGUF writes tensors from several goroutines: the count and the
	// calls to Progress are serialized.
	var mu sync.Mutex
	var done, total int64
	wrote := func(n int64) {
		mu.Lock()
		defer mu.Unlock()
		done += n
		if spec.Progress != nil {
			spec.Progress(done, total)
		}
	}
	// Of spec.Weights: how many the shape has, and the first that does not fit.
	var given int
	var badWeights error
	addT := func(name string, typ fsggml.TensorType, dist synthDist, dims ...int) {
		if typ != fsggml.TensorTypeF32 && typ != fsggml.TensorTypeF16 {
			// k-quants need rows of 256, the others rows of 32: fall back like
			// llama.cpp's quantizer does for odd shapes.
			if dims[0]%256 != 0 && (typ == fsggml.TensorTypeQ4_K || typ == fsggml.TensorTypeQ6_K) {
				typ = fsggml.TensorTypeQ8_0
			}
			if dims[0]%32 != 0 {
				typ = fsggml.TensorTypeF16
			}
		}
		n := 1
		shape := make([]uint64, len(dims))
		for i, d := range dims {
			n *= d
			shape[i] = uint64(d)
		}
		lt := &lazyTensor{name: name, typ: typ, n: n, dist: dist, seed: spec.Seed, wrote: wrote}
		if w, ok := spec.Weights[name]; ok {
			if len(w) != n {
				badWeights = cmp.Or(badWeights, fmt.Errorf("%w: synth weights of %s: %d values, want %d", ErrBadInput, name, len(w), n))
			}
			lt.given = w
			given++
		}
		t := &fsggml.Tensor{Name: name, Kind: uint32(typ), Shape: shape, WriterTo: lt}
		lt.size = t.Size()
		total += int64(lt.size)
		ts = append(ts, t)
	}
	normal := func(std float32) synthDist { return synthDist{std: std} }
	norm := synthDist{gen: func(n int, r *rand.Rand) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = 1 + 0.05*float32(r.NormFloat64())
		}
		return out
	}}
	inv := func(fanIn int) float32 { return float32(1 / math.Sqrt(float64(fanIn))) }
	f32 := fsggml.TensorTypeF32
	q, kvd := s.heads*s.headDim, s.kvHeads*s.headDim
	embStd := float32(0.5)
	if arch == "gemma3" || arch == "gemma2" || arch == "gemma3n" {
		// the model scales its embedding by sqrt(hidden)
		embStd /= float32(math.Sqrt(float64(s.hidden)))
	}
	addT("token_embd.weight", embType, normal(embStd), s.hidden, s.vocab)
	// Random signs in the output norm decorrelate the head from the input
	// token's own embedding (tied models would otherwise echo it).
	addT("output_norm.weight", f32, normal(1), s.hidden)
	if !s.tied {
		addT("output.weight", embType, normal(inv(s.hidden)), s.hidden, s.vocab)
	}
	if s.ropeFreqs {
		addT("rope_freqs.weight", f32, synthDist{gen: func(n int, _ *rand.Rand) []float32 {
			out := make([]float32, n)
			for i := range out { // Llama-3.1-style: low frequencies stretched
				out[i] = 1 + 7*float32(i)/float32(n)
			}
			return out
		}}, s.headDim/2)
	}
	addFFN := func(p string, dense bool) {
		addT(p+"ffn_norm.weight", f32, norm, s.hidden)
		if isMoE && !dense {
			// The router's logits vary by several units: tokens take
			// different experts (rounding still overturns a close choice
			// now and then: TestRepackSameTokens).
			addT(p+"ffn_gate_inp.weight", f32, normal(8*inv(s.hidden)), s.hidden, moe.experts)
			addT(p+"ffn_gate_exps.weight", matType, normal(inv(s.hidden)), s.hidden, moe.expertFFN, moe.experts)
			addT(p+"ffn_up_exps.weight", matType, normal(inv(s.hidden)), s.hidden, moe.expertFFN, moe.experts)
			addT(p+"ffn_down_exps.weight", matType, normal(inv(moe.expertFFN)), moe.expertFFN, s.hidden, moe.experts)
			if arch == "lfm2moe" {
				// the bias added to the router's sigmoid scores to choose
				addT(p+"exp_probs_b.bias", f32, normal(0.1), moe.experts)
			}
			return
		}
		addT(p+"ffn_gate.weight", matType, normal(inv(s.hidden)), s.hidden, s.ffn)
		addT(p+"ffn_up.weight", matType, normal(inv(s.hidden)), s.hidden, s.ffn)
		addT(p+"ffn_down.weight", matType, normal(inv(s.ffn)), s.ffn, s.hidden)
	}
	kit := synthKit{add: addT, normal: normal, norm: norm, inv: inv, f32: f32, mat: matType}
	if arch == "gemma3n" {
		gemma3nTop(kit, s, spec.Size)
	}
	for l := range s.layers {
		p := fmt.Sprintf("blk.%d.", l)
		switch synthArch(arch) {
		case "gptoss":
			gptossLayer(kit, p, s, moe)
			continue
		case "olmo3":
			olmo3Layer(kit, p, s)
			continue
		case "deepseek2":
			deepseek2Layer(kit, p, l, s, synthMLA[spec.Size], moe)
			continue
		case "glm4moelite":
			deepseek2Layer(kit, p, l, s, synthGLMMLA[spec.Size], moe)
			continue
		case "llama4":
			llama4Layer(kit, p, l, spec.Size, s, moe)
			continue
		case "gemma3n":
			gemma3nLayer(kit, p, s, spec.Size)
			continue
		case "qwen3next":
			qwen3nextLayer(kit, p, l, spec.Size, s, moe)
			continue
		case "nemotron_h", "nemotron_h_moe":
			nemotronhLayer(kit, p, l, arch, spec.Size, s, moe)
			continue
		}
		dense := arch == "lfm2moe" && !lfm2MoE(spec.Size, l)
		addT(p+"attn_norm.weight", f32, norm, s.hidden)
		if (arch == "lfm2" || arch == "lfm2moe") && lfm2Conv(spec.Size, l) {
			// the convolution's kernel stays F32, as in the real files
			addT(p+"shortconv.conv.weight", f32, normal(inv(lfm2LCache)), lfm2LCache, s.hidden)
			addT(p+"shortconv.in_proj.weight", matType, normal(inv(s.hidden)), s.hidden, 3*s.hidden)
			addT(p+"shortconv.out_proj.weight", matType, normal(inv(s.hidden)), s.hidden, s.hidden)
			addFFN(p, dense)
			continue
		}
		addT(p+"attn_q.weight", matType, normal(inv(s.hidden)), s.hidden, q)
		addT(p+"attn_k.weight", matType, normal(inv(s.hidden)), s.hidden, kvd)
		addT(p+"attn_v.weight", matType, normal(inv(s.hidden)), s.hidden, kvd)
		addT(p+"attn_output.weight", matType, normal(inv(q)), q, s.hidden)
		switch arch {
		case "qwen3", "qwen3moe":
			addT(p+"attn_q_norm.weight", f32, norm, s.headDim)
			addT(p+"attn_k_norm.weight", f32, norm, s.headDim)
		case "lfm2", "lfm2moe":
			addT(p+"attn_q_norm.weight", f32, norm, s.headDim)
			addT(p+"attn_k_norm.weight", f32, norm, s.headDim)
		case "gemma3":
			addT(p+"attn_q_norm.weight", f32, norm, s.headDim)
			addT(p+"attn_k_norm.weight", f32, norm, s.headDim)
			addT(p+"post_attention_norm.weight", f32, norm, s.hidden)
			addT(p+"post_ffw_norm.weight", f32, norm, s.hidden)
		case "gemma2":
			addT(p+"post_attention_norm.weight", f32, norm, s.hidden)
			addT(p+"post_ffw_norm.weight", f32, norm, s.hidden)
		case "qwen2":
			addT(p+"attn_q.bias", f32, normal(0.1), q)
			addT(p+"attn_k.bias", f32, normal(0.1), kvd)
			addT(p+"attn_v.bias", f32, normal(0.1), kvd)
		}
		addFFN(p, dense)
	}
	if badWeights != nil {
		return badWeights
	}
	if given != len(spec.Weights) {
		var unknown []string
		for name := range spec.Weights {
			if !slices.ContainsFunc(ts, func(t *fsggml.Tensor) bool { return t.Name == name }) {
				unknown = append(unknown, name)
			}
		}
		slices.Sort(unknown)
		return fmt.Errorf("%w: synth weights of tensors the %s %s shape does not have: %s", ErrBadInput, arch, spec.Size, strings.Join(unknown, ", "))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("engine: synth: %w", err)
	}
	if err := fsggml.WriteGGUF(f, kv, ts); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("engine: synth %s: %w", path, err)
	}
	return f.Close()
}
