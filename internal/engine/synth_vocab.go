package engine

import "fmt"

// Token types as GGUF stores them (tokenizer.ggml.token_type).
const (
	tokNormal      = 1
	tokControl     = 3
	tokUserDefined = 4
	tokUnused      = 5
)

var qwenSpecials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
	"<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
	"<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
	"<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
	"</tool_response>", "<think>", "</think>"}

var llamaSpecials = []string{"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
	"<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
	"<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"}

// bytesToUnicode is GPT-2's byte-level BPE byte -> rune table.
func bytesToUnicode() []rune {
	table := make([]rune, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			table[b] = rune(b)
		} else {
			table[b] = rune(256 + n)
			n++
		}
	}
	return table
}

type synthVocab struct {
	tokens []string
	types  []int32
	merges []string
	scores []float32 // SentencePiece only
	ids    map[string]int32
}

// buildVocab makes a gpt2-style byte-level BPE vocabulary of exactly size
// tokens: 256 byte tokens, merges making 2- then 3-byte tokens from common
// ASCII first, then specials, then (for real-size vocabularies) reserved
// padding. Specials of the form <|...|> are control tokens, others
// (<think>, <tool_call>) user-defined, as in the real Qwen and Llama files.
func buildVocab(size, normal int, specials []string, reserved string) (*synthVocab, error) {
	if normal <= 0 {
		normal = size - len(specials)
	}
	if normal < 256 || normal+len(specials) > size {
		return nil, fmt.Errorf("engine: vocabulary of %d cannot hold 256 bytes and %d specials", size, len(specials))
	}
	v := &synthVocab{ids: map[string]int32{}}
	add := func(s string, t int32) {
		v.ids[s] = int32(len(v.tokens))
		v.tokens = append(v.tokens, s)
		v.types = append(v.types, t)
	}
	b2u := bytesToUnicode()
	base := make([]string, 256)
	for b := range 256 {
		base[b] = string(b2u[b])
		add(base[b], tokNormal)
	}
	var order []int
	inOrder := map[int]bool{}
	for _, c := range "etaoinsrhldcumfpgwybvkxjqzETAOINSRHLDCUMFPGWYBVKXJQZ 0123456789.,\n!?'\"-:;()" {
		order = append(order, int(c))
		inOrder[int(c)] = true
	}
	for b := range 256 {
		if !inOrder[b] {
			order = append(order, b)
		}
	}
	var two []string
	for _, a := range order {
		for _, b := range order {
			if len(v.tokens) >= normal {
				break
			}
			s := base[a] + base[b]
			add(s, tokNormal)
			v.merges = append(v.merges, base[a]+" "+base[b])
			two = append(two, s)
		}
	}
	for _, t := range two {
		for _, b := range order {
			if len(v.tokens) >= normal {
				break
			}
			if _, dup := v.ids[t+base[b]]; dup {
				continue
			}
			add(t+base[b], tokNormal)
			v.merges = append(v.merges, t+" "+base[b])
		}
		if len(v.tokens) >= normal {
			break
		}
	}
	for _, s := range specials {
		if len(s) > 2 && s[:2] == "<|" {
			add(s, tokControl)
		} else {
			add(s, tokUserDefined)
		}
	}
	for i := 0; len(v.tokens) < size; i++ {
		if reserved != "" {
			add(fmt.Sprintf(reserved, i+len(specials)), tokControl)
		} else {
			add(fmt.Sprintf("[PAD%d]", len(v.tokens)), tokUnused)
		}
	}
	return v, nil
}
