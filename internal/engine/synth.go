package engine

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sync"

	fsggml "github.com/ollama/ollama/fs/ggml"
	ggmlbackend "github.com/ollama/ollama/ml/backend/ggml"
)

// SynthSpec describes a synthetic (random-weight) model.
type SynthSpec struct {
	Arch string // qwen3 | qwen2 | llama
	Size string // tiny | small | 0.6b
	Type string // f32 | f16 | q8_0 | q4_k
	Seed uint64
	// Progress, when set, sees the tensor bytes written so far and their
	// total, after each tensor.
	Progress func(done, total int64)
}

// SynthSizes and SynthTypes list the accepted SynthSpec values.
var (
	SynthSizes = []string{"tiny", "small", "0.6b"}
	SynthTypes = []string{"f32", "f16", "q8_0", "q4_k"}
)

type synthShape struct {
	hidden, layers, heads, kvHeads, headDim, ffn, vocab, normal, ctx int
}

// synthShapes: tiny and small are for tests; 0.6b is the real shape of
// Qwen3-0.6B, Qwen2.5-0.5B and a Llama-3-style model of similar size.
var synthShapes = map[string]map[string]synthShape{
	"qwen3": {
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192},
		"0.6b":  {1024, 28, 16, 8, 128, 3072, 151936, 151643, 40960},
	},
	"qwen2": {
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192},
		"0.6b":  {896, 24, 14, 2, 64, 4864, 151936, 151643, 32768},
	},
	"llama": {
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192},
		"0.6b":  {1024, 16, 16, 8, 64, 4096, 128256, 128000, 131072},
	},
}

const (
	qwen3Template = "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}" +
		"{%- for message in messages %}{%- if message.role != 'system' %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}" +
		"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
	qwen25Template = "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}" +
		"{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}" +
		"{%- for message in messages %}{%- if message.role != 'system' %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}" +
		"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
	llama3Template = "{% set loop_messages = messages %}{% for message in loop_messages %}" +
		"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}" +
		"{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}" +
		"{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

// lazyTensor generates its data when written, so a large model is never held
// in memory whole (fsggml.WriteGGUF writes tensors in parallel).
type lazyTensor struct {
	name  string
	typ   fsggml.TensorType
	shape []uint64
	gen   func() []float32
	size  uint64
	wrote func(n int64) // counts the bytes written, for SynthSpec.Progress
}

func (t *lazyTensor) WriteTo(w io.Writer) (int64, error) {
	f := t.gen()
	var data []byte
	switch t.typ {
	case fsggml.TensorTypeF32:
		data = make([]byte, 4*len(f))
		for i, v := range f {
			u := math.Float32bits(v)
			data[4*i], data[4*i+1], data[4*i+2], data[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
	case fsggml.TensorTypeF16:
		data = F32ToF16Bytes(f)
	default:
		data = ggmlbackend.Quantize(t.typ, f, t.shape)
	}
	if uint64(len(data)) != t.size {
		return 0, fmt.Errorf("engine: synth %s: %d bytes, want %d", t.name, len(data), t.size)
	}
	n, err := w.Write(data)
	if t.wrote != nil {
		t.wrote(int64(n))
	}
	return int64(n), err
}

// Synth writes a random-weight GGUF for spec to path. Weights depend only on
// (seed, tensor name), so files of different types hold the same underlying
// weights. Weights are scaled so that the layers, not the token embedding,
// dominate the residual stream: greedy decoding then produces varied tokens.
func Synth(ctx context.Context, path string, spec SynthSpec) (err error) {
	defer recoverErr(&err, "writing synthetic model")
	shapes, ok := synthShapes[spec.Arch]
	if !ok {
		return fmt.Errorf("%w %q (synth: qwen3 | qwen2 | llama)", ErrUnsupportedArch, spec.Arch)
	}
	s, ok := shapes[spec.Size]
	if !ok {
		return fmt.Errorf("%w: synth size %q (tiny | small | 0.6b)", ErrBadInput, spec.Size)
	}
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
	case "qwen3", "qwen2":
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
		if arch == "qwen3" {
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
	}
	kv["tokenizer.ggml.tokens"] = voc.tokens
	kv["tokenizer.ggml.token_type"] = voc.types
	kv["tokenizer.ggml.merges"] = voc.merges

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
	addT := func(name string, typ fsggml.TensorType, gen func(n int, r *rand.Rand) []float32, dims ...int) {
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
		lt := &lazyTensor{name: name, typ: typ, shape: shape, wrote: wrote}
		lt.gen = func() []float32 {
			h := fnv.New64a()
			h.Write([]byte(name))
			return gen(n, rand.New(rand.NewPCG(h.Sum64(), spec.Seed)))
		}
		t := &fsggml.Tensor{Name: name, Kind: uint32(typ), Shape: shape, WriterTo: lt}
		lt.size = t.Size()
		total += int64(lt.size)
		ts = append(ts, t)
	}
	normal := func(std float32) func(int, *rand.Rand) []float32 {
		return func(n int, r *rand.Rand) []float32 {
			out := make([]float32, n)
			for i := range out {
				out[i] = std * float32(r.NormFloat64())
			}
			return out
		}
	}
	norm := func(n int, r *rand.Rand) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = 1 + 0.05*float32(r.NormFloat64())
		}
		return out
	}
	inv := func(fanIn int) float32 { return float32(1 / math.Sqrt(float64(fanIn))) }
	f32 := fsggml.TensorTypeF32
	q, kvd := s.heads*s.headDim, s.kvHeads*s.headDim
	const embStd = 0.5
	addT("token_embd.weight", embType, normal(embStd), s.hidden, s.vocab)
	// Random signs in the output norm decorrelate the head from the input
	// token's own embedding (tied models would otherwise echo it).
	addT("output_norm.weight", f32, normal(1), s.hidden)
	if arch == "llama" {
		addT("output.weight", embType, normal(inv(s.hidden)), s.hidden, s.vocab)
		addT("rope_freqs.weight", f32, func(n int, _ *rand.Rand) []float32 {
			out := make([]float32, n)
			for i := range out { // Llama-3.1-style: low frequencies stretched
				out[i] = 1 + 7*float32(i)/float32(n)
			}
			return out
		}, s.headDim/2)
	}
	for l := range s.layers {
		p := fmt.Sprintf("blk.%d.", l)
		addT(p+"attn_norm.weight", f32, norm, s.hidden)
		addT(p+"attn_q.weight", matType, normal(inv(s.hidden)), s.hidden, q)
		addT(p+"attn_k.weight", matType, normal(inv(s.hidden)), s.hidden, kvd)
		addT(p+"attn_v.weight", matType, normal(inv(s.hidden)), s.hidden, kvd)
		addT(p+"attn_output.weight", matType, normal(inv(q)), q, s.hidden)
		switch arch {
		case "qwen3":
			addT(p+"attn_q_norm.weight", f32, norm, s.headDim)
			addT(p+"attn_k_norm.weight", f32, norm, s.headDim)
		case "qwen2":
			addT(p+"attn_q.bias", f32, normal(0.1), q)
			addT(p+"attn_k.bias", f32, normal(0.1), kvd)
			addT(p+"attn_v.bias", f32, normal(0.1), kvd)
		}
		addT(p+"ffn_norm.weight", f32, norm, s.hidden)
		addT(p+"ffn_gate.weight", matType, normal(inv(s.hidden)), s.hidden, s.ffn)
		addT(p+"ffn_up.weight", matType, normal(inv(s.hidden)), s.hidden, s.ffn)
		addT(p+"ffn_down.weight", matType, normal(inv(s.ffn)), s.ffn, s.hidden)
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
