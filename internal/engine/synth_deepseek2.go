package engine

import fsggml "github.com/ollama/ollama/fs/ggml"

// DeepSeek V3 files (and those of models built on it): a byte-level BPE
// vocabulary (pre-tokenizer deepseek-v3, the one ollama's deepseek2 reads)
// with full-width-bar specials; multi-head latent attention; the first
// leading_dense_block_count layers dense, the others experts with shared
// experts and a router bias (exp_probs_b). Only tiny and small are written:
// the real models (671B and up) are not this machine's to write.

var deepseekSpecials = []string{"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜▁pad▁｜>"}

// deepseekTemplate is the shape of DeepSeek V3's template without tools:
// the system prompt first, <｜User｜> before a question, <｜Assistant｜>
// before an answer, which ends with <｜end▁of▁sentence｜>.
const deepseekTemplate = "{{- bos_token }}{%- for message in messages %}{%- if message['role'] == 'system' %}{{- message['content'] }}" +
	"{%- elif message['role'] == 'user' %}{{- '<｜User｜>' + message['content'] }}" +
	"{%- elif message['role'] == 'assistant' %}{{- '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' }}{%- endif %}{%- endfor %}" +
	"{%- if add_generation_prompt %}{{- '<｜Assistant｜>' }}{%- endif %}"

// mlaShape is multi-head latent attention's: the query's low-rank
// bottleneck (0: a plain projection), the keys' and values' compressed
// width, the rotary and the plain parts of a key head, a value head; and
// how many layers lead dense, and the shared experts. absorbed: the key
// and value up-projections split per head (attn_k_b, attn_v_b), attention
// run over the compressed keys themselves, as llama.cpp writes DeepSeek V3
// files since 2025; else one attn_kv_b, as in older files.
type mlaShape struct {
	qLora, kvLora, rope, nope, v, leadingDense, shared int
	absorbed                                           bool
}

var synthMLA = map[string]mlaShape{
	"tiny":  {0, 32, 8, 16, 16, 1, 1, true},
	"small": {64, 64, 16, 32, 32, 1, 1, false},
}

// mlaKV sets the metadata DeepSeek V3's layer reads: latent attention's
// shape (a query and a value head's lengths), leading dense layers, shared
// experts, and the routed experts' weights (sigmoid, renormalised, scaled).
func mlaKV(kv fsggml.KV, d mlaShape, routedScale float32) {
	kv["leading_dense_block_count"] = uint32(d.leadingDense)
	kv["expert_shared_count"] = uint32(d.shared)
	kv["expert_weights_scale"] = routedScale
	kv["expert_weights_norm"] = true
	kv["expert_gating_func"] = uint32(2) // sigmoid
	kv["attention.q_lora_rank"] = uint32(d.qLora)
	kv["attention.kv_lora_rank"] = uint32(d.kvLora)
	kv["attention.key_length"] = uint32(d.nope + d.rope)
	kv["attention.value_length"] = uint32(d.v)
	kv["rope.dimension_count"] = uint32(d.rope)
}

// deepseek2KV sets DeepSeek V3's metadata and returns its vocabulary.
func deepseek2KV(kv fsggml.KV, s synthShape, size string) (*synthVocab, error) {
	voc, err := buildVocab(s.vocab, s.normal, deepseekSpecials, "")
	if err != nil {
		return nil, err
	}
	for _, sp := range deepseekSpecials {
		voc.types[voc.ids[sp]] = tokControl
	}
	d := synthMLA[size]
	mlaKV(kv, d, 2.5)
	if d.absorbed {
		// the cache holds one head: the compressed key with its rotary
		// part, and the compressed key again as the value
		kv["attention.key_length_mla"] = uint32(d.nope + d.rope)
		kv["attention.value_length_mla"] = uint32(d.v)
		kv["attention.key_length"] = uint32(d.kvLora + d.rope)
		kv["attention.value_length"] = uint32(d.kvLora)
		kv["attention.head_count_kv"] = uint32(1)
	}
	kv["rope.freq_base"] = float32(10000)
	kv["rope.scaling.type"] = "yarn"
	kv["rope.scaling.factor"] = float32(40)
	kv["rope.scaling.original_context_length"] = uint32(4096)
	kv["rope.scaling.yarn_log_multiplier"] = float32(0.1)
	kv["tokenizer.ggml.pre"] = "deepseek-v3"
	kv["tokenizer.ggml.bos_token_id"] = uint32(voc.ids["<｜begin▁of▁sentence｜>"])
	kv["tokenizer.ggml.eos_token_id"] = uint32(voc.ids["<｜end▁of▁sentence｜>"])
	kv["tokenizer.ggml.padding_token_id"] = uint32(voc.ids["<｜▁pad▁｜>"])
	kv["tokenizer.ggml.add_bos_token"] = true
	kv["tokenizer.chat_template"] = deepseekTemplate
	return voc, nil
}

// deepseek2Layer adds layer l's tensors (prefix p): latent attention, then
// a dense MLP in the leading layers and experts (with shared ones) after.
func deepseek2Layer(k synthKit, p string, l int, s synthShape, d mlaShape, m moeShape) {
	headK := d.nope + d.rope
	k.add(p+"attn_norm.weight", k.f32, k.norm, s.hidden)
	if d.qLora == 0 {
		k.add(p+"attn_q.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, s.heads*headK)
	} else {
		k.add(p+"attn_q_a.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, d.qLora)
		k.add(p+"attn_q_a_norm.weight", k.f32, k.norm, d.qLora)
		k.add(p+"attn_q_b.weight", k.mat, k.normal(k.inv(d.qLora)), d.qLora, s.heads*headK)
	}
	k.add(p+"attn_kv_a_mqa.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, d.kvLora+d.rope)
	k.add(p+"attn_kv_a_norm.weight", k.f32, k.norm, d.kvLora)
	if d.absorbed {
		k.add(p+"attn_k_b.weight", k.mat, k.normal(k.inv(d.nope)), d.nope, d.kvLora, s.heads)
		k.add(p+"attn_v_b.weight", k.mat, k.normal(k.inv(d.kvLora)), d.kvLora, d.v, s.heads)
	} else {
		k.add(p+"attn_kv_b.weight", k.mat, k.normal(k.inv(d.kvLora)), d.kvLora, s.heads*(d.nope+d.v))
	}
	k.add(p+"attn_output.weight", k.mat, k.normal(k.inv(s.heads*d.v)), s.heads*d.v, s.hidden)
	k.add(p+"ffn_norm.weight", k.f32, k.norm, s.hidden)
	if l < d.leadingDense {
		k.add(p+"ffn_gate.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, s.ffn)
		k.add(p+"ffn_up.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, s.ffn)
		k.add(p+"ffn_down.weight", k.mat, k.normal(k.inv(s.ffn)), s.ffn, s.hidden)
		return
	}
	shared := d.shared * m.expertFFN
	k.add(p+"ffn_gate_inp.weight", k.f32, k.normal(8*k.inv(s.hidden)), s.hidden, m.experts)
	k.add(p+"exp_probs_b.bias", k.f32, k.normal(0.1), m.experts)
	k.add(p+"ffn_gate_exps.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, m.expertFFN, m.experts)
	k.add(p+"ffn_up_exps.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, m.expertFFN, m.experts)
	k.add(p+"ffn_down_exps.weight", k.mat, k.normal(k.inv(m.expertFFN)), m.expertFFN, s.hidden, m.experts)
	k.add(p+"ffn_gate_shexp.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, shared)
	k.add(p+"ffn_up_shexp.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, shared)
	k.add(p+"ffn_down_shexp.weight", k.mat, k.normal(k.inv(shared)), shared, s.hidden)
}

// GLM-4.7-Flash files (glm4moelite): DeepSeek V3's layers with absorbed
// latent attention in every size, the glm4 pre-tokenizer and GLM's chat
// specials, an unscaled rope; attention.key_length and value_length are a
// query head's and a value head's, as ollama writes them.

var glmSpecials = []string{"<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>",
	"<|user|>", "<|assistant|>", "<|observation|>"}

// glmTemplate is the shape of GLM 4.x's template without tools or thinking.
const glmTemplate = "[gMASK]<sop>{%- for message in messages %}{{- '<|' + message['role'] + '|>\\n' + message['content'] }}{%- endfor %}" +
	"{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}"

var synthGLMMLA = map[string]mlaShape{
	"tiny":  {0, 32, 8, 16, 16, 1, 1, true},
	"small": {64, 64, 16, 32, 32, 1, 1, true},
}

// glm4moeliteKV sets GLM-4.7-Flash's metadata and returns its vocabulary.
func glm4moeliteKV(kv fsggml.KV, s synthShape, size string) (*synthVocab, error) {
	voc, err := buildVocab(s.vocab, s.normal, glmSpecials, "")
	if err != nil {
		return nil, err
	}
	mlaKV(kv, synthGLMMLA[size], 1.8)
	kv["rope.freq_base"] = float32(1000000)
	kv["tokenizer.ggml.pre"] = "glm4"
	kv["tokenizer.ggml.bos_token_id"] = uint32(voc.ids["[gMASK]"])
	kv["tokenizer.ggml.eos_token_id"] = uint32(voc.ids["<|endoftext|>"])
	// (the real files also end a turn at <|user|> and <|observation|>: a
	// random model says one of them early, and the tests need 24 tokens)
	kv["tokenizer.ggml.padding_token_id"] = uint32(voc.ids["<|endoftext|>"])
	kv["tokenizer.ggml.add_bos_token"] = false
	kv["tokenizer.chat_template"] = glmTemplate
	return voc, nil
}
