package engine

import fsggml "github.com/ollama/ollama/fs/ggml"

// Mixture-of-experts shapes. A layer's feed-forward block is a router
// (ffn_gate_inp, F32 as in the real files) over `experts` SwiGLU experts
// of width expertFFN, each stored as one 3-D tensor per projection
// (ffn_gate_exps, ffn_up_exps, ffn_down_exps: [hidden, expertFFN,
// experts] and [expertFFN, hidden, experts]); each token runs `used` of
// them, weighted by the router's softmax renormalised over those chosen.
type moeShape struct {
	experts, used, expertFFN int
}

// synthExperts: tiny and small are for tests (small's expert width, but
// gptoss's, keeps the down projections' rows off the k-quants' 256, so a
// q4_k file mixes Q4_K and Q8_0 as real Q4_K_M files do); 30b is Qwen3-30B-A3B
// (config.json: 128 experts of 768, 8 per token), 20b gpt-oss-20b (32 of
// 2880, 4 per token).
var synthExperts = map[string]map[string]moeShape{
	"qwen3moe": {
		"tiny":  {4, 2, 32},
		"small": {8, 2, 128},
		"30b":   {128, 8, 768},
	},
	"deepseek2": {
		"tiny":  {4, 2, 32},
		"small": {8, 2, 128},
	},
	"glm4moelite": {
		"tiny":  {4, 2, 32},
		"small": {8, 2, 128},
	},
	"lfm2moe": {
		"tiny":  {4, 2, 32},
		"small": {8, 2, 128},
	},
	"gptoss": { // an expert as wide as the model, as in gpt-oss
		"tiny":  {4, 2, 64},
		"small": {8, 2, 256},
		"20b":   {32, 4, 2880},
	},
	"qwen3next": { // 80b: Qwen3-Next-80B-A3B's 512 experts of 512, 10 per token
		"tiny":  {4, 2, 32},
		"small": {8, 2, 128},
		"80b":   {512, 10, 512},
	},
	"nemotron_h_moe": { // its E layers' (nemotronhLayoutOf)
		"tiny":  {4, 2, 32},
		"small": {8, 2, 128},
	},
	"llama4": { // top-1, as Llama 4; 109b: Scout's 16 experts of 8192
		"tiny":  {4, 1, 32},
		"small": {8, 1, 128},
		"109b":  {16, 1, 8192},
	},
}

// synthKit is what an architecture's layer writer needs of synthShaped:
// add a tensor, the weight distributions, and the weight types.
type synthKit struct {
	add      func(name string, typ fsggml.TensorType, dist synthDist, dims ...int)
	normal   func(std float32) synthDist
	norm     synthDist
	inv      func(fanIn int) float32
	f32, mat fsggml.TensorType
}

// moeKV sets the experts' metadata.
func moeKV(kv map[string]any, m moeShape) {
	kv["expert_count"] = uint32(m.experts)
	kv["expert_used_count"] = uint32(m.used)
	kv["expert_feed_forward_length"] = uint32(m.expertFFN)
}
