package engine

import (
	"math/rand/v2"

	fsggml "github.com/ollama/ollama/fs/ggml"
)

// Qwen3-Next files (arch qwen3next, the tensor names and metadata ollama's
// qwen3next model reads): Qwen's vocabulary and template; every
// interval-th layer gated attention (attention.head_count_kv non-zero),
// the others gated DeltaNet linear attention (head_count_kv 0); every
// layer's feed-forward a mixture of experts with a shared expert gated by
// a sigmoid. The DeltaNet's projections are pre-split as ollama wants them
// (attn_qkv, attn_gate) with Qwen3-Next's packed beta/alpha (ssm_ba).

// qwen3nextLayout is a size's linear attention: key heads (ssm.group_count)
// and value heads (ssm.time_step_rank) of head dims (key and value alike,
// as ollama requires), the convolution's kernel, and the full attention
// interval. tiny alternates the two kinds of layer, so every cut of its 4
// layers has both on some side; small and 80b: one in four attention.
// 80b is Qwen3-Next-80B-A3B (config.json: 48 layers of 2048, 16 query
// heads and 2 KV heads of 256, partial rope 0.25, rope theta 1e7; 16 key
// and 32 value heads of 128, kernel 4, full attention every 4th; 512
// experts of 512, 10 per token, a shared expert of 512).
type qwen3nextLayout struct {
	kHeads, vHeads, headDim, conv, interval, shared int
}

var qwen3nextLayouts = map[string]qwen3nextLayout{
	"tiny":  {2, 4, 16, 4, 2, 32},
	"small": {4, 8, 32, 4, 4, 128},
	"80b":   {16, 32, 128, 4, 4, 512},
}

// qwen3nextAttn says whether layer l of size is gated attention.
func qwen3nextAttn(size string, l int) bool {
	return (l+1)%qwen3nextLayouts[size].interval == 0
}

// qwen3nextKV sets Qwen3-Next's metadata and returns its vocabulary.
func qwen3nextKV(kv fsggml.KV, s synthShape, size string) (*synthVocab, error) {
	voc, err := buildVocab(s.vocab, s.normal, qwenSpecials, "")
	if err != nil {
		return nil, err
	}
	lay := qwen3nextLayouts[size]
	eot := voc.ids["<|endoftext|>"]
	kvHeads := make([]uint32, s.layers)
	for l := range kvHeads {
		if qwen3nextAttn(size, l) {
			kvHeads[l] = uint32(s.kvHeads)
		}
	}
	kv["attention.head_count_kv"] = kvHeads
	kv["attention.key_length"] = uint32(s.headDim)
	kv["attention.value_length"] = uint32(s.headDim)
	kv["rope.dimension_count"] = uint32(s.headDim / 4) // partial_rotary_factor 0.25
	kv["rope.freq_base"] = float32(10000000)
	kv["full_attention_interval"] = uint32(lay.interval)
	kv["ssm.inner_size"] = uint32(lay.vHeads * lay.headDim)
	kv["ssm.state_size"] = uint32(lay.headDim)
	kv["ssm.group_count"] = uint32(lay.kHeads)
	kv["ssm.time_step_rank"] = uint32(lay.vHeads)
	kv["ssm.conv_kernel"] = uint32(lay.conv)
	kv["norm_top_k_prob"] = true
	kv["expert_shared_feed_forward_length"] = uint32(lay.shared)
	kv["tokenizer.ggml.pre"] = "qwen2"
	kv["tokenizer.ggml.eos_token_id"] = uint32(voc.ids["<|im_end|>"])
	kv["tokenizer.ggml.padding_token_id"] = uint32(eot)
	kv["tokenizer.ggml.bos_token_id"] = uint32(eot)
	kv["tokenizer.ggml.add_bos_token"] = false
	kv["tokenizer.chat_template"] = qwen3Template
	return voc, nil
}

// qwen3nextLayer adds layer l's tensors: gated attention (the query
// projection twice as wide: query and gate) or the gated DeltaNet (its
// convolution kernel, dt bias and decay F32, as in the real files), then
// the router, the experts, the shared expert and its gate.
func qwen3nextLayer(k synthKit, p string, l int, size string, s synthShape, m moeShape) {
	lay := qwen3nextLayouts[size]
	k.add(p+"attn_norm.weight", k.f32, k.norm, s.hidden)
	if qwen3nextAttn(size, l) {
		q, kvd := s.heads*s.headDim, s.kvHeads*s.headDim
		k.add(p+"attn_q.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, 2*q)
		k.add(p+"attn_k.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, kvd)
		k.add(p+"attn_v.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, kvd)
		k.add(p+"attn_output.weight", k.mat, k.normal(k.inv(q)), q, s.hidden)
		k.add(p+"attn_q_norm.weight", k.f32, k.norm, s.headDim)
		k.add(p+"attn_k_norm.weight", k.f32, k.norm, s.headDim)
	} else {
		inner := lay.vHeads * lay.headDim
		qkv := 2*lay.kHeads*lay.headDim + inner
		k.add(p+"attn_qkv.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, qkv)
		k.add(p+"attn_gate.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, inner)
		k.add(p+"ssm_ba.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, 2*lay.vHeads)
		k.add(p+"ssm_conv1d.weight", k.f32, k.normal(k.inv(lay.conv)), lay.conv, qkv)
		k.add(p+"ssm_dt", k.f32, k.normal(0.5), lay.vHeads)
		// -exp(A_log): a decay per value head, negative
		k.add(p+"ssm_a", k.f32, synthDist{gen: func(n int, r *rand.Rand) []float32 {
			out := make([]float32, n)
			for i := range out {
				out[i] = -(0.5 + float32(r.Float64()))
			}
			return out
		}}, lay.vHeads)
		k.add(p+"ssm_norm.weight", k.f32, k.norm, lay.headDim)
		k.add(p+"ssm_out.weight", k.mat, k.normal(k.inv(inner)), inner, s.hidden)
	}
	k.add(p+"post_attention_norm.weight", k.f32, k.norm, s.hidden)
	k.add(p+"ffn_gate_inp.weight", k.f32, k.normal(8*k.inv(s.hidden)), s.hidden, m.experts)
	k.add(p+"ffn_gate_exps.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, m.expertFFN, m.experts)
	k.add(p+"ffn_up_exps.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, m.expertFFN, m.experts)
	k.add(p+"ffn_down_exps.weight", k.mat, k.normal(k.inv(m.expertFFN)), m.expertFFN, s.hidden, m.experts)
	k.add(p+"ffn_gate_inp_shexp.weight", k.f32, k.normal(k.inv(s.hidden)), s.hidden, 1)
	k.add(p+"ffn_gate_shexp.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, lay.shared)
	k.add(p+"ffn_up_shexp.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, lay.shared)
	k.add(p+"ffn_down_shexp.weight", k.mat, k.normal(k.inv(lay.shared)), lay.shared, s.hidden)
}
