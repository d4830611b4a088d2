package engine

import fsggml "github.com/ollama/ollama/fs/ggml"

// Llama 4 files (Llama-4-Scout-17B-16E text model, as ollama's converter
// writes it: convert/convert_llama4.go): a byte-level BPE vocabulary whose
// specials start at 200000 (<|begin_of_text|>, ... <|header_start|>,
// <|eot|>, ... <|finetune_right_pad|> at 200018; the reserved and vision
// tokens after them are named <|reserved_special_token_n|> here), llama3
// rope (theta 500000), mixture-of-experts layers with a shared expert,
// NoPE layers and chunked attention. No rope_freqs.weight is written:
// ollama's llama4 layer reads a per-layer rope_factors (blk.N), never the
// top-level rope_freqs.weight its converter writes for llama3 rope
// scaling, so the real files' scaling (Scout's config.json has llama3
// rope scaling, as remembered, not checked here) does not change
// ollama's forward pass either way.

var llama4Specials = []string{"<|begin_of_text|>", "<|end_of_text|>", "<|fim_prefix|>", "<|fim_middle|>",
	"<|fim_suffix|>", "<|header_start|>", "<|header_end|>", "<|eom|>", "<|eot|>", "<|step|>",
	"<|text_post_train_reserved_special_token_0|>", "<|text_post_train_reserved_special_token_1|>",
	"<|text_post_train_reserved_special_token_2|>", "<|text_post_train_reserved_special_token_3|>",
	"<|text_post_train_reserved_special_token_4|>", "<|text_post_train_reserved_special_token_5|>",
	"<|python_start|>", "<|python_end|>", "<|finetune_right_pad|>"}

// llama4Template is the shape of Llama 4's chat template (llama.cpp's
// LLM_CHAT_TEMPLATE_LLAMA4): each message in <|header_start|>ROLE
// <|header_end|>, its trimmed text closed by <|eot|> (the published one
// adds tools, images and a date).
const llama4Template = "{{- bos_token }}{%- for message in messages %}" +
	"{{- '<|header_start|>' + message['role'] + '<|header_end|>\\n\\n' + message['content'] | trim + '<|eot|>' }}{%- endfor %}" +
	"{%- if add_generation_prompt %}{{- '<|header_start|>assistant<|header_end|>\\n\\n' }}{%- endif %}"

// llama4Layout is what a size's layers are: every moeStep-th a mixture of
// experts, every noRope-th without rope; chunk is attention.chunk_size,
// floor attention.floor_scale (the NoPE layers' query scale steps every
// floor positions). tiny and small mix every kind of layer (tiny: dense
// rope, dense NoPE, MoE rope; small adds MoE NoPE) and chunk and step the
// scale within the identity tests' 28 positions. 109b is Scout: every
// layer MoE, NoPE every fourth (ollama's default: its converter writes no
// no_rope_interval, nor do the Scout files), chunks of 8192.
type llama4Layout struct {
	moeStep, noRope, chunk, floor int
}

var llama4Layouts = map[string]llama4Layout{
	"tiny":  {2, 3, 8, 4},
	"small": {2, 3, 16, 4},
	"109b":  {1, 4, 8192, 8192},
}

// llama4MoE says whether layer l of size is a mixture of experts.
func llama4MoE(size string, l int) bool {
	return (l+1)%llama4Layouts[size].moeStep == 0
}

// llama4KV sets Llama 4's metadata and returns its vocabulary.
func llama4KV(kv fsggml.KV, s synthShape, size string) (*synthVocab, error) {
	voc, err := buildVocab(s.vocab, s.normal, llama4Specials, "<|reserved_special_token_%d|>")
	if err != nil {
		return nil, err
	}
	lay := llama4Layouts[size]
	kv["attention.layer_norm_rms_epsilon"] = float32(1e-5)
	kv["attention.head_dim"] = uint32(s.headDim)
	kv["attention.key_length"] = uint32(s.headDim)
	kv["attention.value_length"] = uint32(s.headDim)
	kv["rope.dimension_count"] = uint32(s.headDim)
	kv["rope.freq_base"] = float32(500000)
	kv["vocab_size"] = uint32(s.vocab)
	kv["interleave_moe_layer_step"] = uint32(lay.moeStep)
	kv["use_qk_norm"] = true
	kv["attention.chunk_size"] = uint32(lay.chunk)
	if size != "109b" {
		kv["no_rope_interval"] = uint32(lay.noRope)
		kv["attention.floor_scale"] = float32(lay.floor)
	}
	kv["tokenizer.ggml.pre"] = "llama4"
	kv["tokenizer.ggml.bos_token_id"] = uint32(voc.ids["<|begin_of_text|>"])
	kv["tokenizer.ggml.eos_token_id"] = uint32(voc.ids["<|eot|>"])
	kv["tokenizer.ggml.eos_token_ids"] = []int32{voc.ids["<|end_of_text|>"], voc.ids["<|eom|>"]}
	kv["tokenizer.ggml.padding_token_id"] = uint32(voc.ids["<|finetune_right_pad|>"])
	kv["tokenizer.ggml.add_bos_token"] = true
	kv["tokenizer.chat_template"] = llama4Template
	return voc, nil
}

// llama4Layer adds layer l's tensors: attention (no biases, no norm
// weights on query and key), then a dense SwiGLU of width ffn or the
// router, the routed experts and a shared expert as wide as one of them.
func llama4Layer(k synthKit, p string, l int, size string, s synthShape, m moeShape) {
	q, kvd := s.heads*s.headDim, s.kvHeads*s.headDim
	k.add(p+"attn_norm.weight", k.f32, k.norm, s.hidden)
	k.add(p+"attn_q.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, q)
	k.add(p+"attn_k.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, kvd)
	k.add(p+"attn_v.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, kvd)
	k.add(p+"attn_output.weight", k.mat, k.normal(k.inv(q)), q, s.hidden)
	k.add(p+"ffn_norm.weight", k.f32, k.norm, s.hidden)
	if !llama4MoE(size, l) {
		k.add(p+"ffn_gate.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, s.ffn)
		k.add(p+"ffn_up.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, s.ffn)
		k.add(p+"ffn_down.weight", k.mat, k.normal(k.inv(s.ffn)), s.ffn, s.hidden)
		return
	}
	k.add(p+"ffn_gate_inp.weight", k.f32, k.normal(8*k.inv(s.hidden)), s.hidden, m.experts)
	k.add(p+"ffn_gate_exps.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, m.expertFFN, m.experts)
	k.add(p+"ffn_up_exps.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, m.expertFFN, m.experts)
	k.add(p+"ffn_down_exps.weight", k.mat, k.normal(k.inv(m.expertFFN)), m.expertFFN, s.hidden, m.experts)
	k.add(p+"ffn_gate_shexp.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, m.expertFFN)
	k.add(p+"ffn_up_shexp.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, m.expertFFN)
	k.add(p+"ffn_down_shexp.weight", k.mat, k.normal(k.inv(m.expertFFN)), m.expertFFN, s.hidden)
}
