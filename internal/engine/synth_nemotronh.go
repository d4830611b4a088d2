package engine

import (
	"math/rand/v2"
	"strings"

	fsggml "github.com/ollama/ollama/fs/ggml"
)

// Nemotron-H files (arch nemotron_h, the tensor names and metadata
// ollama's nemotronh model and llama.cpp's converter use): one operator per
// layer, as Nemotron-H's hybrid_override_pattern says: M a Mamba-2 mixer
// (attention.head_count_kv and feed_forward_length 0 in its layer), * an
// attention without rope (head_count_kv non-zero), - a squared-ReLU
// feed-forward (feed_forward_length non-zero). A gpt2-style vocabulary
// with ChatML's markers and a ChatML template: the shapes are Nemotron-H's,
// the vocabulary and template are not.

// nemotronhLayout is a size's pattern of layers and its Mamba-2: SSM heads
// (ssm.time_step_rank), groups of B and C (ssm.group_count), state size,
// inner size (heads times their head dim) and the convolution's kernel.
// tiny's 4 layers have every kind, and every cut of them a Mamba-2 layer
// on one side and attention or the feed-forward on the other. 8b is
// Nemotron-H-8B-Base-8K (config.json: 52 layers of 4096, pattern as here;
// 32 query and 8 KV heads of 128, feed-forward 21504; 128 SSM heads of 64,
// 8 groups, state 128, kernel 4; vocabulary 131072, 8192 positions, its
// own head).
type nemotronhLayout struct {
	pattern                             string
	heads, groups, state, inner, kernel int
}

var nemotronhLayouts = map[string]nemotronhLayout{
	"tiny":  {"M*M-", 8, 2, 16, 128, 4},
	"small": {"M-M-M*-M", 16, 4, 32, 512, 4},
	"8b":    {"M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", 128, 8, 128, 8192, 4},
}

// nemotronhLayoutOf is arch's layout of size: nemotron_h_moe's is
// nemotron_h's with a mixture of experts (E) for every feed-forward, as
// Nemotron 3 Nano's pattern has.
func nemotronhLayoutOf(arch, size string) nemotronhLayout {
	lay := nemotronhLayouts[size]
	if arch == "nemotron_h_moe" {
		lay.pattern = strings.ReplaceAll(lay.pattern, "-", "E")
	}
	return lay
}

var nemotronhSpecials = []string{"<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"}

const nemotronhTemplate = "{{- bos_token -}}{%- for message in messages -%}" +
	"{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}{%- endfor -%}" +
	"{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"

// nemotronhKV sets Nemotron-H's metadata (head_count_kv and
// feed_forward_length per layer, as llama.cpp's converter writes them) and
// returns its vocabulary.
func nemotronhKV(kv fsggml.KV, s synthShape, size string) (*synthVocab, error) {
	voc, err := buildVocab(s.vocab, s.normal, nemotronhSpecials, "")
	if err != nil {
		return nil, err
	}
	lay := nemotronhLayoutOf(kv.Architecture(), size)
	kvHeads, ffn := make([]uint32, s.layers), make([]uint32, s.layers)
	for l, c := range lay.pattern[:s.layers] {
		switch c {
		case '*':
			kvHeads[l] = uint32(s.kvHeads)
		case '-', 'E':
			ffn[l] = uint32(s.ffn)
		}
	}
	if kv.Architecture() == "nemotron_h_moe" {
		// sigmoid router scores, the chosen ones renormalised and scaled
		kv["expert_weights_norm"] = true
		kv["expert_weights_scale"] = float32(2.5)
	}
	kv["attention.head_count_kv"] = kvHeads
	kv["feed_forward_length"] = ffn
	kv["attention.key_length"] = uint32(s.headDim)
	kv["attention.value_length"] = uint32(s.headDim)
	kv["attention.layer_norm_rms_epsilon"] = float32(1e-5)
	kv["ssm.conv_kernel"] = uint32(lay.kernel)
	kv["ssm.inner_size"] = uint32(lay.inner)
	kv["ssm.state_size"] = uint32(lay.state)
	kv["ssm.time_step_rank"] = uint32(lay.heads)
	kv["ssm.group_count"] = uint32(lay.groups)
	kv["tokenizer.ggml.pre"] = "gpt-2"
	kv["tokenizer.ggml.bos_token_id"] = uint32(voc.ids["<s>"])
	kv["tokenizer.ggml.eos_token_id"] = uint32(voc.ids["<|im_end|>"])
	kv["tokenizer.ggml.padding_token_id"] = uint32(voc.ids["<unk>"])
	kv["tokenizer.ggml.add_bos_token"] = true
	kv["tokenizer.chat_template"] = nemotronhTemplate
	return voc, nil
}

// nemotronhLayer adds layer l's tensors: its norm, then the Mamba-2 mixer
// (the input projection to z, x, B, C and dt; the convolution's kernel and
// bias, dt's bias, the decay A and skip D F32, as in the real files; the
// group norm, one weight row per group), the attention or the
// feed-forward.
func nemotronhLayer(k synthKit, p string, l int, arch, size string, s synthShape, m moeShape) {
	lay := nemotronhLayoutOf(arch, size)
	k.add(p+"attn_norm.weight", k.f32, k.norm, s.hidden)
	switch lay.pattern[l] {
	case 'M':
		channels := lay.inner + 2*lay.groups*lay.state
		k.add(p+"ssm_in.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, channels+lay.inner+lay.heads)
		k.add(p+"ssm_conv1d.weight", k.f32, k.normal(k.inv(lay.kernel)), lay.kernel, channels)
		k.add(p+"ssm_conv1d.bias", k.f32, k.normal(0.1), channels)
		k.add(p+"ssm_dt.bias", k.f32, k.normal(0.5), lay.heads)
		// -exp(A_log): a decay per head, negative
		k.add(p+"ssm_a", k.f32, synthDist{gen: func(n int, r *rand.Rand) []float32 {
			out := make([]float32, n)
			for i := range out {
				out[i] = -(0.5 + float32(r.Float64()))
			}
			return out
		}}, 1, lay.heads)
		k.add(p+"ssm_d", k.f32, k.norm, 1, lay.heads)
		k.add(p+"ssm_norm.weight", k.f32, k.norm, lay.inner/lay.groups, lay.groups)
		k.add(p+"ssm_out.weight", k.mat, k.normal(k.inv(lay.inner)), lay.inner, s.hidden)
	case '*':
		q, kvd := s.heads*s.headDim, s.kvHeads*s.headDim
		k.add(p+"attn_q.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, q)
		k.add(p+"attn_k.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, kvd)
		k.add(p+"attn_v.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, kvd)
		k.add(p+"attn_output.weight", k.mat, k.normal(k.inv(q)), q, s.hidden)
	case '-':
		k.add(p+"ffn_up.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, s.ffn)
		k.add(p+"ffn_down.weight", k.mat, k.normal(k.inv(s.ffn)), s.ffn, s.hidden)
	case 'E':
		// the router (sigmoid scores; the bias only chooses), squared-ReLU
		// experts of up and down only, a shared expert of twice their size
		k.add(p+"ffn_gate_inp.weight", k.f32, k.normal(8*k.inv(s.hidden)), s.hidden, m.experts)
		k.add(p+"exp_probs_b.bias", k.f32, k.normal(0.1), m.experts)
		k.add(p+"ffn_up_exps.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, m.expertFFN, m.experts)
		k.add(p+"ffn_down_exps.weight", k.mat, k.normal(k.inv(m.expertFFN)), m.expertFFN, s.hidden, m.experts)
		k.add(p+"ffn_up_shexp.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, 2*m.expertFFN)
		k.add(p+"ffn_down_shexp.weight", k.mat, k.normal(k.inv(2*m.expertFFN)), 2*m.expertFFN, s.hidden)
	}
}
