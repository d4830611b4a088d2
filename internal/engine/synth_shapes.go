package engine

type synthShape struct {
	hidden, layers, heads, kvHeads, headDim, ffn, vocab, normal, ctx int
	// tied: no output.weight, the head is token_embd (as in the real
	// model's tie_word_embeddings).
	tied bool
	// ropeFreqs: a rope_freqs.weight (Llama-3.1+ long-context rope
	// scaling); Llama-3-8B has none.
	ropeFreqs bool
}

// synthShapes: tiny and small are for tests; the others are the real shapes
// (from each model's config.json) of
//
//	qwen3: 0.6b Qwen3-0.6B, 1.7b Qwen3-1.7B, 4b Qwen3-4B, 8b Qwen3-8B
//	qwen2: 0.6b Qwen2.5-0.5B, 1.5b Qwen2.5-1.5B, 7b Qwen2.5-7B
//	llama: 0.6b a Llama-3-style model of that size, 1b Llama-3.2-1B, 8b Llama-3-8B,
//	70b Llama-3-70B (about 40 GB at q4_k: a model for a route of several peers)
//	gemma3: 1b Gemma-3-1B, 4b Gemma-3-4B (text model); tiny and small have
//	six and twelve layers, so that one in six is global (arch_gemma3.go)
//	mistral3: 3b Ministral-3-3B (text model)
//	lfm2: tiny and small only (synth_lfm2.go: which layers are attention)
//	lfm2moe: tiny and small only (LFM2-8B-A1B's layer pattern is not one
//	this table is sure of; synth_lfm2.go, synth_moe.go)
//	qwen3moe: 30b Qwen3-30B-A3B (its experts: synth_moe.go)
//	gptoss: 20b gpt-oss-20b (synth_gptoss.go)
//	gemma2: 2b Gemma-2-2B, 9b Gemma-2-9B
//	olmo3: 7b Olmo-3-7B (synth_olmo3.go)
//	deepseek2, glm4moelite: tiny and small only (synth_deepseek2.go)
//	llama4: 109b Llama-4-Scout-17B-16E (text model; synth_llama4.go)
//	gemma3n: tiny and small only (synth_gemma3n.go)
//	qwen3next: 80b Qwen3-Next-80B-A3B (text model; synth_qwen3next.go)
//	nemotron_h: 8b Nemotron-H-8B-Base-8K (synth_nemotronh.go)
var synthShapes = map[string]map[string]synthShape{
	//        hidden layers heads kv headDim ffn vocab normal ctx tied ropeFreqs
	"qwen3": {
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, true, false},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, true, false},
		"0.6b":  {1024, 28, 16, 8, 128, 3072, 151936, 151643, 40960, true, false},
		"1.7b":  {2048, 28, 16, 8, 128, 6144, 151936, 151643, 40960, true, false},
		"4b":    {2560, 36, 32, 8, 128, 9728, 151936, 151643, 40960, true, false},
		"8b":    {4096, 36, 32, 8, 128, 12288, 151936, 151643, 40960, false, false},
	},
	"qwen2": {
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, true, false},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, true, false},
		"0.6b":  {896, 24, 14, 2, 64, 4864, 151936, 151643, 32768, true, false},
		"1.5b":  {1536, 28, 12, 2, 128, 8960, 151936, 151643, 32768, true, false},
		"7b":    {3584, 28, 28, 4, 128, 18944, 152064, 151643, 32768, false, false},
	},
	"llama": {
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, false, true},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, false, true},
		"0.6b":  {1024, 16, 16, 8, 64, 4096, 128256, 128000, 131072, false, true},
		"1b":    {2048, 16, 32, 8, 64, 8192, 128256, 128000, 131072, true, true},
		"8b":    {4096, 32, 32, 8, 128, 14336, 128256, 128000, 8192, false, false},
		"70b":   {8192, 80, 64, 8, 128, 28672, 128256, 128000, 8192, false, false},
	},
	"gemma3": {
		"tiny":  {64, 6, 4, 2, 16, 128, 512, 0, 4096, true, false},
		"small": {256, 12, 8, 4, 32, 768, 4096, 0, 8192, true, false},
		"1b":    {1152, 26, 4, 1, 256, 6912, 262144, 0, 32768, true, false},
		"4b":    {2560, 34, 8, 4, 256, 10240, 262208, 0, 131072, true, false},
	},
	"mistral3": {
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, true, false},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, true, false},
		"3b":    {3072, 26, 32, 8, 128, 9216, 131072, 130072, 262144, true, false},
	},
	"lfm2": {
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, true, false},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, true, false},
	},
	"lfm2moe": { // ffn: the leading dense layers' (the experts' in synthExperts)
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, true, false},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, true, false},
	},
	"qwen3moe": { // ffn: a dense layer's width (unused); the experts' in synthExperts
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, true, false},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, true, false},
		"30b":   {2048, 48, 32, 4, 128, 6144, 151936, 151643, 40960, false, false},
	},
	"gemma2": {
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, true, false},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, true, false},
		"2b":    {2304, 26, 8, 4, 256, 9216, 256000, 0, 8192, true, false},
		"9b":    {3584, 42, 16, 8, 256, 14336, 256000, 0, 8192, true, false},
	},
	"olmo3": {
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, false, false},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, false, false},
		"7b":    {4096, 32, 32, 32, 128, 11008, 100278, 100273, 65536, false, false},
	},
	"deepseek2": { // heads = KV heads, as in latent attention; ffn: the leading dense layer's
		"tiny":  {64, 4, 4, 4, 16, 128, 512, 0, 4096, false, false},
		"small": {256, 8, 8, 8, 32, 768, 4096, 0, 8192, false, false},
	},
	"glm4moelite": {
		"tiny":  {64, 4, 4, 4, 16, 128, 512, 0, 4096, false, false},
		"small": {256, 8, 8, 8, 32, 768, 4096, 0, 8192, false, false},
	},
	"gptoss": { // ffn unused, as qwen3moe's
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, false, false},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, false, false},
		"20b":   {2880, 24, 64, 8, 64, 2880, 201088, 199998, 131072, false, false},
	},
	"qwen3next": { // ffn unused (every layer experts: synthExperts)
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, false, false},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, false, false},
		"80b":   {2048, 48, 16, 2, 256, 5120, 151936, 151643, 262144, false, false},
	},
	"gemma3n": { // AltUp, per-layer inputs, KV sharing: synth_gemma3n.go
		"tiny":  {64, 6, 4, 2, 16, 128, 512, 0, 4096, true, false},
		"small": {256, 10, 8, 4, 32, 768, 4096, 0, 8192, true, false},
	},
	"nemotron_h": { // ffn: the feed-forward layers' (nemotronhLayouts)
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, false, false},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, false, false},
		"8b":    {4096, 52, 32, 8, 128, 21504, 131072, 0, 8192, false, false},
	},
	"nemotron_h_moe": { // ffn unused (its feed-forwards experts: synthExperts)
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, false, false},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, false, false},
	},
	"llama4": { // ffn: the dense layers' (intermediate_size_mlp); ctx: Scout's max_position_embeddings
		"tiny":  {64, 4, 4, 2, 16, 128, 512, 0, 4096, false, false},
		"small": {256, 8, 8, 4, 32, 768, 4096, 0, 8192, false, false},
		"109b":  {5120, 48, 40, 8, 128, 16384, 202048, 200000, 10485760, false, false},
	},
}

// synthArch is the shape table's name for arch: llama.cpp writes GPT-OSS
// as "gpt-oss", ollama as "gptoss".
func synthArch(arch string) string {
	if arch == "gpt-oss" {
		return "gptoss"
	}
	return arch
}

// SynthSizesFor lists the sizes Synth writes for arch, smallest first (nil
// for an unknown arch).
func SynthSizesFor(arch string) []string {
	var out []string
	for _, size := range SynthSizes {
		if _, ok := synthShapes[synthArch(arch)][size]; ok {
			out = append(out, size)
		}
	}
	return out
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
