package engine

import (
	"fmt"

	fsggml "github.com/ollama/ollama/fs/ggml"
)

// Gemma 3 files as llama.cpp's converter writes them: a SentencePiece
// vocabulary (tokenizer.ggml.model "llama") with scores, <bos> 2, <eos> 1,
// <end_of_turn> 106 ending a turn; every sixth layer global, the others over
// a sliding window.

// synthWindows is attention.sliding_window per synth shape: tiny's is short
// enough that the identity tests' 29 positions go past it.
var synthWindows = map[string]map[string]int{
	"gemma3":  {"tiny": 8, "small": 64, "1b": 512, "4b": 1024},
	"gemma2":  {"tiny": 8, "small": 64, "2b": 4096, "9b": 4096},
	"gptoss":  {"tiny": 8, "small": 64, "20b": 128},
	"olmo3":   {"tiny": 8, "small": 64, "7b": 4096},
	"gemma3n": {"tiny": 8, "small": 64},
}

// gemmaTemplate is Gemma 3's tokenizer.chat_template (instruction-tuned
// models; the same for 1B to 27B).
const gemmaTemplate = `{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '

' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '

' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
`

// SentencePiece token types beyond synth_vocab.go's.
const (
	tokUnknown = 2
	tokByte    = 6
)

// buildSPMVocab makes a Gemma-style SentencePiece vocabulary of exactly size
// tokens: the specials at Gemma's ids (<pad> 0, <eos> 1, <bos> 2, <unk> 3,
// <mask> 4, <unused0..98> 5-104... then <start_of_turn> 105, <end_of_turn>
// 106), the 256 byte-fallback tokens <0xNN>, then pieces scored so that
// common ASCII merges first: "▁", single characters, "▁" + a character,
// then two- and three-character pieces, then "▁" words of four letters.
func buildSPMVocab(size int) (*synthVocab, error) {
	v := &synthVocab{ids: map[string]int32{}}
	add := func(s string, t int32) bool {
		if _, dup := v.ids[s]; dup || len(v.tokens) >= size {
			return false
		}
		v.ids[s] = int32(len(v.tokens))
		v.tokens = append(v.tokens, s)
		v.types = append(v.types, t)
		v.scores = append(v.scores, -float32(len(v.tokens)))
		return true
	}
	for _, s := range []string{"<pad>", "<eos>", "<bos>"} {
		add(s, tokControl)
	}
	add("<unk>", tokUnknown)
	add("<mask>", tokUserDefined)
	for i := 0; len(v.tokens) < 105; i++ {
		add(fmt.Sprintf("<unused%d>", i), tokUserDefined)
	}
	add("<start_of_turn>", tokControl)
	add("<end_of_turn>", tokControl)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), tokByte)
	}
	if len(v.tokens) != 107+256 {
		return nil, fmt.Errorf("engine: SentencePiece vocabulary of %d cannot hold the 107 specials and 256 bytes", size)
	}
	const common = "etaoinsrhldcumfpgwybvkxjqzETAOINSRHLDCUMFPGWYBVKXJQZ0123456789.,\n!?'\"-:;()"
	const sp = "▁"
	add(sp, tokNormal)
	for _, c := range common {
		add(string(c), tokNormal)
	}
	for _, c := range common {
		add(sp+string(c), tokNormal)
	}
	for _, a := range common {
		for _, b := range common {
			add(string(a)+string(b), tokNormal)
			add(sp+string(a)+string(b), tokNormal)
		}
	}
	const lower = "etaoinsrhldcumfpgwybvkxjqz"
	for _, a := range lower {
		for _, b := range lower {
			for _, c := range lower {
				add(string(a)+string(b)+string(c), tokNormal)
				add(sp+string(a)+string(b)+string(c), tokNormal)
			}
		}
	}
	for _, a := range lower {
		for _, b := range lower {
			for _, c := range lower {
				for _, d := range lower {
					if len(v.tokens) >= size {
						return v, nil
					}
					add(sp+string(a)+string(b)+string(c)+string(d), tokNormal)
				}
			}
		}
	}
	for len(v.tokens) < size {
		add(fmt.Sprintf("<unused%d>", len(v.tokens)), tokUnused)
	}
	return v, nil
}

// gemma3KV sets Gemma 3's metadata and returns its vocabulary.
func gemma3KV(kv fsggml.KV, s synthShape, size string) (*synthVocab, error) {
	voc, err := buildSPMVocab(s.vocab)
	if err != nil {
		return nil, err
	}
	kv["attention.key_length"] = uint32(s.headDim)
	kv["attention.value_length"] = uint32(s.headDim)
	kv["attention.sliding_window"] = uint32(synthWindows["gemma3"][size])
	kv["rope.freq_base"] = float32(1000000)
	kv["rope.local.freq_base"] = float32(10000)
	if s.layers != 26 {
		// Gemma 3 4B and up: the global layers' rope scaled for 128K.
		kv["rope.scaling.type"] = "linear"
		kv["rope.scaling.factor"] = float32(8)
	}
	// Gemma 2's softcap; a Gemma 3 file may still carry it (ollama drops
	// it for 1B), and tiny and small run the path.
	if size == "tiny" || size == "small" {
		kv["final_logit_softcapping"] = float32(30)
	}
	kv["tokenizer.ggml.model"] = "llama"
	kv["tokenizer.ggml.pre"] = "default"
	kv["tokenizer.ggml.scores"] = voc.scores
	kv["tokenizer.ggml.bos_token_id"] = uint32(voc.ids["<bos>"])
	kv["tokenizer.ggml.eos_token_id"] = uint32(voc.ids["<eos>"])
	kv["tokenizer.ggml.eot_token_id"] = uint32(voc.ids["<end_of_turn>"])
	kv["tokenizer.ggml.unknown_token_id"] = uint32(voc.ids["<unk>"])
	kv["tokenizer.ggml.padding_token_id"] = uint32(voc.ids["<pad>"])
	kv["tokenizer.ggml.add_bos_token"] = true
	kv["tokenizer.ggml.add_eos_token"] = false
	kv["tokenizer.chat_template"] = gemmaTemplate
	return voc, nil
}

// gemma2KV sets Gemma 2's metadata (Gemma 3's vocabulary and template;
// one rope base, no scaling; attention logits soft-capped at 50, the
// head's at 30; <end_of_turn> ends an answer) and returns its vocabulary.
func gemma2KV(kv fsggml.KV, s synthShape, size string) (*synthVocab, error) {
	voc, err := gemma3KV(kv, s, size)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"rope.local.freq_base", "rope.scaling.type", "rope.scaling.factor"} {
		delete(kv, k)
	}
	kv["rope.freq_base"] = float32(10000)
	kv["attention.sliding_window"] = uint32(synthWindows["gemma2"][size])
	kv["attn_logit_softcapping"] = float32(50)
	kv["final_logit_softcapping"] = float32(30)
	kv["tokenizer.ggml.eos_token_ids"] = []int32{voc.ids["<end_of_turn>"]}
	return voc, nil
}
