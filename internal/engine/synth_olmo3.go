package engine

import fsggml "github.com/ollama/ollama/fs/ggml"

// OLMo 3 files (Olmo-3-7B-Instruct): a byte-level BPE vocabulary (dolma2,
// cl100k-like) with ChatML's specials; three layers in four over a 4096
// sliding window, every fourth global with YaRN (factor 8 over 8192).

var olmo3Specials = []string{"<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"}

// olmo3KV sets OLMo 3's metadata and returns its vocabulary.
func olmo3KV(kv fsggml.KV, s synthShape, size string) (*synthVocab, error) {
	voc, err := buildVocab(s.vocab, s.normal, olmo3Specials, "")
	if err != nil {
		return nil, err
	}
	pattern := make([]bool, s.layers)
	for i := range pattern {
		pattern[i] = i%4 != 3
	}
	kv["attention.sliding_window"] = uint32(synthWindows["olmo3"][size])
	kv["attention.sliding_window_pattern"] = pattern
	kv["rope.freq_base"] = float32(500000)
	kv["rope.scaling.type"] = "yarn"
	kv["rope.scaling.factor"] = float32(8)
	kv["rope.scaling.original_context_length"] = uint32(8192)
	kv["rope.scaling.attn_factor"] = float32(1.2079)
	kv["tokenizer.ggml.pre"] = "dolma2"
	kv["tokenizer.ggml.bos_token_id"] = uint32(voc.ids["<|endoftext|>"])
	kv["tokenizer.ggml.eos_token_id"] = uint32(voc.ids["<|im_end|>"])
	kv["tokenizer.ggml.eos_token_ids"] = []int32{voc.ids["<|endoftext|>"]}
	kv["tokenizer.ggml.padding_token_id"] = uint32(voc.ids["<|pad|>"])
	kv["tokenizer.ggml.add_bos_token"] = false
	kv["tokenizer.chat_template"] = chatMLTemplate
	return voc, nil
}

// chatMLTemplate is ChatML, as OLMo 3 Instruct's template writes a
// conversation without tools.
const chatMLTemplate = "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endfor %}" +
	"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"

// olmo3Layer adds layer p's tensors: no norm before attention or the MLP,
// norms after both, and query and key norms over the whole projection.
func olmo3Layer(k synthKit, p string, s synthShape) {
	q, kvd := s.heads*s.headDim, s.kvHeads*s.headDim
	k.add(p+"attn_q.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, q)
	k.add(p+"attn_k.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, kvd)
	k.add(p+"attn_v.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, kvd)
	k.add(p+"attn_output.weight", k.mat, k.normal(k.inv(q)), q, s.hidden)
	k.add(p+"attn_q_norm.weight", k.f32, k.norm, q)
	k.add(p+"attn_k_norm.weight", k.f32, k.norm, kvd)
	k.add(p+"post_attention_norm.weight", k.f32, k.norm, s.hidden)
	k.add(p+"ffn_gate.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, s.ffn)
	k.add(p+"ffn_up.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, s.ffn)
	k.add(p+"ffn_down.weight", k.mat, k.normal(k.inv(s.ffn)), s.ffn, s.hidden)
	k.add(p+"post_ffw_norm.weight", k.f32, k.norm, s.hidden)
}
