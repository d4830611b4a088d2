package shards

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// ModelInfo is what the swarm announces about a model file.
type ModelInfo struct {
	Arch          string `json:"arch"`   // general.architecture
	Name          string `json:"name"`   // general.name
	Layers        int    `json:"layers"` // <arch>.block_count
	Hidden        int    `json:"hidden"` // <arch>.embedding_length
	Quant         string `json:"quant"`  // e.g. "Q8_0", "Q4_K_M", "F32" (general.file_type, else the dominant tensor type)
	ContextLength int    `json:"context_length"`
	VocabSize     int    `json:"vocab_size"`
	HeadCount     int    `json:"head_count"`
	HeadCountKV   int    `json:"head_count_kv"`
	// AttentionLayers, when the header gives KV heads per layer and some
	// layers have none (LFM2's convolutions, Qwen3-Next's linear attention,
	// Nemotron-H's Mamba layers), is how many layers attend and keep a KV
	// cache; HeadCount and HeadCountKV are then the most any layer has.
	AttentionLayers int    `json:"attention_layers,omitempty"`
	LayerRange      [2]int `json:"layer_range"` // layers [a,b) present (a slice holds fewer than Layers)
	HasEmbedding    bool   `json:"has_embedding"`
	HasHead         bool   `json:"has_head"`
	TensorBytes     int64  `json:"tensor_bytes"` // total tensor data bytes
	LayerBytes      int64  `json:"layer_bytes"`  // mean bytes of one blk.N (for the partitioner)
	// Experts and ExpertsUsed are a mixture-of-experts model's experts per
	// layer and those each token runs (<arch>.expert_count and
	// .expert_used_count; 0 for a dense model). LayerBytes counts every
	// expert: a stage holds them all.
	Experts     int `json:"experts,omitempty"`
	ExpertsUsed int `json:"experts_used,omitempty"`
}

// ReadModelInfo reads the metadata of the GGUF at path. Errors name the file
// and the problem (missing, not GGUF, truncated, unsupported version).
func ReadModelInfo(path string) (ModelInfo, error) {
	g, err := ReadGGUFFile(path)
	if err != nil {
		return ModelInfo{}, err
	}
	return g.ModelInfo(), nil
}

// layerOf returns N for a tensor named blk.N.*, or -1.
func layerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// ModelInfo summarises the header.
func (g *GGUF) ModelInfo() ModelInfo {
	arch := g.String("general.architecture")
	kvHeads := g.Uints(arch + ".attention.head_count_kv")
	mi := ModelInfo{
		Arch:          arch,
		Name:          g.String("general.name"),
		Layers:        int(min(g.Uint(arch+".block_count"), math.MaxInt32)),
		Hidden:        int(min(g.Uint(arch+".embedding_length"), math.MaxInt32)),
		ContextLength: int(min(g.Uint(arch+".context_length"), math.MaxInt32)),
		HeadCount:     maxInt(g.Uints(arch + ".attention.head_count")),
		HeadCountKV:   maxInt(kvHeads),
		VocabSize:     g.ArrayLen("tokenizer.ggml.tokens"),
		Experts:       int(min(g.Uint(arch+".expert_count"), math.MaxInt32)),
		ExpertsUsed:   int(min(g.Uint(arch+".expert_used_count"), math.MaxInt32)),
	}
	attn := 0
	for _, x := range kvHeads {
		if x > 0 {
			attn++
		}
	}
	if len(kvHeads) > 1 && attn < len(kvHeads) {
		mi.AttentionLayers = attn
	}
	byType := map[GGMLType]int64{}
	perLayer := map[int]int64{}
	first, last := -1, -1
	var embd, out, outNorm bool
	for _, t := range g.Tensors {
		mi.TensorBytes += int64(t.Size)
		byType[t.Type] += int64(t.Size)
		if l := layerOf(t.Name); l >= 0 {
			perLayer[l] += int64(t.Size)
			if first < 0 || l < first {
				first = l
			}
			last = max(last, l)
		}
		switch t.Name {
		case "token_embd.weight":
			embd = true
		case "output_norm.weight":
			outNorm = true
		case "output.weight":
			// a 1-row placeholder (first-stage slice) is not a head
			out = len(t.Dims) > 1 && t.Dims[1] > 1
		}
	}
	if first >= 0 {
		mi.LayerRange = [2]int{first, last + 1}
		var sum int64
		for _, b := range perLayer {
			sum += b
		}
		mi.LayerBytes = sum / int64(len(perLayer))
	}
	_, hasOutput := g.Tensor("output.weight")
	mi.HasEmbedding = embd
	mi.HasHead = outNorm && (out || (embd && !hasOutput))
	if v, ok := g.Get("general.file_type"); ok {
		if ft, ok := v.(uint32); ok {
			mi.Quant = fileTypeNames[ft]
		}
	}
	if mi.Quant == "" && len(byType) > 0 {
		types := make([]GGMLType, 0, len(byType))
		for t := range byType {
			types = append(types, t)
		}
		slices.Sort(types)
		best := types[0]
		for _, t := range types {
			if byType[t] > byType[best] {
				best = t
			}
		}
		mi.Quant = best.String()
	}
	return mi
}

// maxInt is the largest of xs as an int (0 for none), capped at MaxInt32.
func maxInt(xs []uint64) int {
	var m uint64
	for _, x := range xs {
		m = max(m, x)
	}
	return int(min(m, math.MaxInt32))
}
