package engine

import (
	"slices"

	fsggml "github.com/ollama/ollama/fs/ggml"
)

// LFM2 files: attention layers among short-convolution ones (the layers
// whose attention.head_count_kv is 0), a gpt2-style vocabulary with
// ChatML's specials and <|startoftext|> as BOS.

// lfm2AttnLayers lists each synth shape's attention layers; the others are
// short convolutions (LFM2-350M: 6 of 16).
var lfm2AttnLayers = map[string][]int{"tiny": {1, 3}, "small": {2, 5, 7}}

var lfm2Specials = []string{"<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"}

// lfm2Template is ChatML after a BOS, the shape of LFM2's template (the
// published one adds tools and thinking).
const lfm2Template = "{{- bos_token -}}{%- for message in messages -%}" +
	"{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}{%- endfor -%}" +
	"{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"

// lfm2LCache is shortconv.l_cache: the convolution spans this many positions.
const lfm2LCache = 3

// lfm2DenseLeading is how many leading layers of an LFM2-MoE (lfm2moe)
// synth shape have a dense feed-forward, the others experts (LFM2-8B-A1B:
// num_dense_layers 2); the layers' operators are lfm2's (lfm2AttnLayers).
var lfm2DenseLeading = map[string]int{"tiny": 1, "small": 2}

// lfm2MoE reports whether layer l of an lfm2moe synth shape has experts.
func lfm2MoE(size string, l int) bool { return l >= lfm2DenseLeading[size] }

// lfm2KV sets LFM2's metadata (LFM2-MoE's too: the leading dense layers
// and sigmoid router scores, as LFM2-8B-A1B's files) and returns its
// vocabulary.
func lfm2KV(kv fsggml.KV, s synthShape, size string) (*synthVocab, error) {
	voc, err := buildVocab(s.vocab, s.normal, lfm2Specials, "")
	if err != nil {
		return nil, err
	}
	kvHeads := make([]uint32, s.layers)
	for _, l := range lfm2AttnLayers[size] {
		kvHeads[l] = uint32(s.kvHeads)
	}
	kv["attention.head_count_kv"] = kvHeads
	kv["attention.key_length"] = uint32(s.headDim)
	kv["attention.value_length"] = uint32(s.headDim)
	kv["shortconv.l_cache"] = uint32(lfm2LCache)
	kv["rope.freq_base"] = float32(1000000)
	kv["tokenizer.ggml.pre"] = "lfm2"
	kv["tokenizer.ggml.bos_token_id"] = uint32(voc.ids["<|startoftext|>"])
	kv["tokenizer.ggml.eos_token_id"] = uint32(voc.ids["<|im_end|>"])
	kv["tokenizer.ggml.padding_token_id"] = uint32(voc.ids["<|pad|>"])
	kv["tokenizer.ggml.add_bos_token"] = true
	kv["tokenizer.chat_template"] = lfm2Template
	if kv["general.architecture"] == "lfm2moe" {
		kv["leading_dense_block_count"] = uint32(lfm2DenseLeading[size])
		kv["expert_gating_func"] = uint32(2) // sigmoid
	}
	return voc, nil
}

// lfm2Conv reports whether layer l of an LFM2 synth shape is a short
// convolution.
func lfm2Conv(size string, l int) bool { return !slices.Contains(lfm2AttnLayers[size], l) }
