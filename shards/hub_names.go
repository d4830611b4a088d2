package shards

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// shortNames map the names people know from ollama to GGUF repos on
// Hugging Face, of the architectures the engine runs whose hub files
// (written by llama.cpp's converter) carry the names ollama's Go models
// read: Qwen3 and its mixture of experts, Qwen2.5, Llama 3, Mistral Small
// 3.2 (a llama file), Gemma 2, 3 and 3n, GPT-OSS, LFM2 and its mixture of
// experts, Nemotron-H and its mixture of experts. Families the engine runs
// but whose hub files it cannot, and why: docs/models.md.
var shortNames = map[string]string{
	"qwen3:0.6b":    "unsloth/Qwen3-0.6B-GGUF",
	"qwen3:1.7b":    "unsloth/Qwen3-1.7B-GGUF",
	"qwen3:4b":      "unsloth/Qwen3-4B-GGUF",
	"qwen3:8b":      "unsloth/Qwen3-8B-GGUF",
	"qwen3:14b":     "unsloth/Qwen3-14B-GGUF",
	"qwen3:30b-a3b": "unsloth/Qwen3-30B-A3B-GGUF",
	"qwen2.5:0.5b":  "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
	"qwen2.5:1.5b":  "Qwen/Qwen2.5-1.5B-Instruct-GGUF",
	"qwen2.5:3b":    "Qwen/Qwen2.5-3B-Instruct-GGUF",
	"llama3.2:1b":   "unsloth/Llama-3.2-1B-Instruct-GGUF",
	"llama3.2:3b":   "unsloth/Llama-3.2-3B-Instruct-GGUF",
	"llama3.1:8b":   "unsloth/Llama-3.1-8B-Instruct-GGUF",
	"gemma2:2b":     "bartowski/gemma-2-2b-it-GGUF",
	"gemma2:9b":     "bartowski/gemma-2-9b-it-GGUF",
	"gemma3:270m":   "unsloth/gemma-3-270m-it-GGUF",
	"gemma3:1b":     "unsloth/gemma-3-1b-it-GGUF",
	"gemma3:4b":     "unsloth/gemma-3-4b-it-GGUF",
	"gemma3:12b":    "unsloth/gemma-3-12b-it-GGUF",
	"lfm2:350m":     "LiquidAI/LFM2-350M-GGUF",
	"lfm2:700m":     "LiquidAI/LFM2-700M-GGUF",
	"lfm2:1.2b":     "LiquidAI/LFM2-1.2B-GGUF",
	"lfm2:8b-a1b":   "LiquidAI/LFM2-8B-A1B-GGUF",
	"gpt-oss:20b":   "unsloth/gpt-oss-20b-GGUF",
	"gemma3n:e2b":   "unsloth/gemma-3n-E2B-it-GGUF",
	"gemma3n:e4b":   "unsloth/gemma-3n-E4B-it-GGUF",

	"mistral-small3.2:24b": "unsloth/Mistral-Small-3.2-24B-Instruct-2506-GGUF",
	"nemotron-nano:9b":     "bartowski/nvidia_NVIDIA-Nemotron-Nano-9B-v2-GGUF",
	"nemotron-3-nano:30b":  "unsloth/Nemotron-3-Nano-30B-A3B-GGUF",
}

// ShortNames lists the short names ParseModelRef knows, sorted.
func ShortNames() []string {
	out := make([]string, 0, len(shortNames))
	for n := range shortNames {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ParseModelRef reads what `swarmctl pull` takes: a hub reference
// (ParseHubRef) or a short name, "qwen3:0.6b", optionally with a quant,
// "qwen3:0.6b-q4_k_m". short reports a short name without a quant: the
// quant is then the best that fits (PickFitting).
func ParseModelRef(s string) (ref HubRef, short bool, err error) {
	if strings.Contains(s, "/") {
		ref, err = ParseHubRef(s)
		return ref, false, err
	}
	name := strings.ToLower(s)
	if repo, ok := shortNames[name]; ok {
		return HubRef{Repo: repo}, true, nil
	}
	for n, repo := range shortNames {
		if q, ok := strings.CutPrefix(name, n+"-"); ok && quantRE.MatchString(q) {
			return HubRef{Repo: repo, Quant: strings.ToUpper(q)}, false, nil
		}
	}
	return HubRef{}, false, fmt.Errorf("model %q: not a short name (%s) nor hf.co/OWNER/REPO[:QUANT]", s, strings.Join(ShortNames(), ", "))
}

// quantPreference is the order PickFitting tries quants in: the best that
// fits wins. It follows the device tiers of REVIVE: 8-bit where memory
// allows, Q4_K_M on a standard phone or Pi, down to Q2_K on e-waste.
var quantPreference = []string{"Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_K_S", "Q3_K_M", "Q3_K_S", "Q2_K"}

// fitHeadroom is what a model takes beyond its file when loaded (KV cache
// and compute buffers), as a fraction of the file.
const fitHeadroom = 0.15

// PickFitting chooses, among a repo's GGUFs, the best quant of
// quantPreference whose file with headroom fits in free bytes (free <= 0:
// no limit). The error names what each candidate needs.
func PickFitting(files []HubFile, r HubRef, free int64) (HubFile, error) {
	ggufs := GGUFs(files)
	var tried []string
	for _, q := range quantPreference {
		i := slices.IndexFunc(ggufs, func(f HubFile) bool { return QuantOf(f.Path) == q })
		if i < 0 {
			continue
		}
		f := ggufs[i]
		need := f.Size + int64(float64(f.Size)*fitHeadroom)
		if free <= 0 || need <= free {
			return f, nil
		}
		tried = append(tried, fmt.Sprintf("%s needs about %s", q, byteString(need)))
	}
	if len(tried) == 0 {
		return HubFile{}, fmt.Errorf("hub %s: %w: none of the quants %s (quants: %s); name one with :QUANT",
			r.Repo, ErrHubNotFound, strings.Join(quantPreference, ", "), quantList(ggufs))
	}
	return HubFile{}, fmt.Errorf("hub %s: %w the %s of memory left to this peer (%s): raise max_memory, or pick a smaller model",
		r.Repo, ErrHubTooBig, byteString(free), strings.Join(tried, ", "))
}

func byteString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}
