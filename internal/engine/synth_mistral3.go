package engine

import fsggml "github.com/ollama/ollama/fs/ggml"

// Mistral 3 (Ministral 3, Mistral Small 3.1) files: a byte-level BPE
// vocabulary (Tekken) whose control tokens are <unk>, <s>, </s>, [INST]...
// and <SPECIAL_n> up to 1000; YaRN rope with Llama 4's per-position query
// scale from rope.scaling.original_context_length.

var mistralSpecials = []string{"<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]",
	"[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>",
	"[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]",
	"[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"}

// mistral3Template is the shape of Mistral 3's chat template: a system
// prompt in [SYSTEM_PROMPT], user turns in [INST], answers closed by </s>
// (the published one adds tools, images and a default system prompt).
const mistral3Template = "{{- bos_token }}{%- for message in messages %}" +
	"{%- if message['role'] == 'system' %}{{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}" +
	"{%- elif message['role'] == 'user' %}{{- '[INST]' + message['content'] + '[/INST]' }}" +
	"{%- elif message['role'] == 'assistant' %}{{- message['content'] + eos_token }}{%- endif %}{%- endfor %}"

// mistral3KV sets Mistral 3's metadata and returns its vocabulary. tiny and
// small scale queries from position 8 on, so that the identity tests'
// positions cross several of the scale's steps (the real 3b: 16384).
func mistral3KV(kv fsggml.KV, s synthShape, size string) (*synthVocab, error) {
	voc, err := buildVocab(s.vocab, s.normal, mistralSpecials, "<SPECIAL_%d>")
	if err != nil {
		return nil, err
	}
	for _, sp := range mistralSpecials {
		voc.types[voc.ids[sp]] = tokControl
	}
	orig := uint32(16384)
	if size == "tiny" || size == "small" {
		orig = 8
	}
	kv["rope.freq_base"] = float32(1000000)
	kv["rope.dimension_count"] = uint32(s.headDim)
	kv["attention.key_length"] = uint32(s.headDim)
	kv["attention.value_length"] = uint32(s.headDim)
	kv["rope.scaling.type"] = "yarn"
	kv["rope.scaling.factor"] = float32(16)
	kv["rope.scaling.original_context_length"] = orig
	kv["rope.scaling.beta_fast"] = float32(32)
	kv["rope.scaling.beta_slow"] = float32(1)
	kv["rope.scaling.mscale"] = float32(1)
	kv["rope.scaling.mscale_all_dim"] = float32(1)
	kv["rope.scaling_beta"] = float32(0.1)
	kv["tokenizer.ggml.pre"] = "tekken"
	kv["tokenizer.ggml.bos_token_id"] = uint32(voc.ids["<s>"])
	kv["tokenizer.ggml.eos_token_id"] = uint32(voc.ids["</s>"])
	kv["tokenizer.ggml.unknown_token_id"] = uint32(voc.ids["<unk>"])
	kv["tokenizer.ggml.padding_token_id"] = uint32(voc.ids["<pad>"])
	kv["tokenizer.ggml.add_bos_token"] = true
	kv["tokenizer.ggml.add_eos_token"] = false
	kv["tokenizer.chat_template"] = mistral3Template
	return voc, nil
}
