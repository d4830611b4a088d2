package engine

import (
	fsggml "github.com/ollama/ollama/fs/ggml"
)

// GPT-OSS files (gpt-oss-20b; llama.cpp writes the architecture as
// "gpt-oss", ollama's converter as "gptoss"): the o200k vocabulary with
// the harmony format's control tokens, YaRN rope (factor 32 over 4096
// positions), sliding-window attention (128 positions) on even layers,
// every layer a mixture of experts with biases.

var gptossSpecials = []string{"<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>",
	"<|channel|>", "<|start|>", "<|end|>", "<|message|>", "<|call|>"}

// gptossTemplate is the shape of the harmony chat format: each message in
// <|start|>ROLE<|message|>...<|end|>, the answer opened with
// <|start|>assistant (the published template adds the system preamble,
// channels, reasoning effort and tools; it renders in
// TestChatTemplateFamilies).
const gptossTemplate = "{%- for message in messages %}{{- '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' }}{%- endfor %}" +
	"{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"

// gptossKV sets GPT-OSS's metadata and returns its vocabulary.
func gptossKV(kv fsggml.KV, s synthShape, size string) (*synthVocab, error) {
	voc, err := buildVocab(s.vocab, s.normal, gptossSpecials, "<|reserved_%d|>")
	if err != nil {
		return nil, err
	}
	kv["attention.layer_norm_rms_epsilon"] = float32(1e-5)
	kv["attention.key_length"] = uint32(s.headDim)
	kv["attention.value_length"] = uint32(s.headDim)
	kv["attention.sliding_window"] = uint32(synthWindows["gptoss"][size])
	kv["rope.freq_base"] = float32(150000)
	kv["rope.scaling.factor"] = float32(32)
	kv["rope.scaling.original_context_length"] = uint32(4096)
	kv["tokenizer.ggml.pre"] = "gpt-4o"
	kv["tokenizer.ggml.bos_token_id"] = uint32(voc.ids["<|startoftext|>"])
	kv["tokenizer.ggml.eos_token_id"] = uint32(voc.ids["<|return|>"])
	kv["tokenizer.ggml.eos_token_ids"] = []int32{voc.ids["<|return|>"], voc.ids["<|call|>"]}
	kv["tokenizer.ggml.padding_token_id"] = uint32(voc.ids["<|endoftext|>"])
	kv["tokenizer.ggml.add_bos_token"] = false
	kv["tokenizer.chat_template"] = gptossTemplate
	return voc, nil
}

// gptossLayer adds layer p's tensors: attention with biases and a sink per
// head, then the experts (router and experts with biases) after a norm
// named post_attention_norm, as llama.cpp names it.
func gptossLayer(k synthKit, p string, s synthShape, m moeShape) {
	q, kvd := s.heads*s.headDim, s.kvHeads*s.headDim
	bias := k.normal(0.02)
	k.add(p+"attn_norm.weight", k.f32, k.norm, s.hidden)
	k.add(p+"attn_q.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, q)
	k.add(p+"attn_q.bias", k.f32, bias, q)
	k.add(p+"attn_k.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, kvd)
	k.add(p+"attn_k.bias", k.f32, bias, kvd)
	k.add(p+"attn_v.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, kvd)
	k.add(p+"attn_v.bias", k.f32, bias, kvd)
	k.add(p+"attn_output.weight", k.mat, k.normal(k.inv(q)), q, s.hidden)
	k.add(p+"attn_output.bias", k.f32, bias, s.hidden)
	k.add(p+"attn_sinks.weight", k.f32, k.normal(1), s.heads)
	k.add(p+"post_attention_norm.weight", k.f32, k.norm, s.hidden)
	k.add(p+"ffn_gate_inp.weight", k.f32, k.normal(8*k.inv(s.hidden)), s.hidden, m.experts)
	k.add(p+"ffn_gate_inp.bias", k.f32, bias, m.experts)
	k.add(p+"ffn_gate_exps.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, m.expertFFN, m.experts)
	k.add(p+"ffn_gate_exps.bias", k.f32, bias, m.expertFFN, m.experts)
	k.add(p+"ffn_up_exps.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, m.expertFFN, m.experts)
	k.add(p+"ffn_up_exps.bias", k.f32, bias, m.expertFFN, m.experts)
	k.add(p+"ffn_down_exps.weight", k.mat, k.normal(k.inv(m.expertFFN)), m.expertFFN, s.hidden, m.experts)
	k.add(p+"ffn_down_exps.bias", k.f32, bias, s.hidden, m.experts)
}
