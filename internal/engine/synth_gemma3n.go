package engine

import (
	"fmt"

	fsggml "github.com/ollama/ollama/fs/ggml"
)

// Gemma 3n text models (google/gemma-3n-E2B-it, E4B-it) as ollama's
// gemma3n reads them (model/models/gemma3n: the tensor names of its struct
// tags, the metadata keys of newTextModel): Gemma 3's SentencePiece
// vocabulary and specials, Gemma 3n's chat template; AltUp over
// altup.num_inputs streams, a laurel low-rank branch, per-layer inputs
// (per_layer_token_embd, per_layer_model_proj), activation sparsity in the
// first layers, and the last attention.shared_kv_layers layers reading the
// KV of the two layers before them. Only tiny and small are written: no
// real shape, whose config values (E2B's feed-forward width, the
// per-layer embedding's vocabulary beside the text vocabulary) were not
// checked here. The metadata keys are those ollama's converter writes
// (convert/convert_gemma3n.go); as ollama runs the model, the head is not
// soft-capped (the converter writes no final_logit_softcapping), and
// altup.correct_scale, which newTextModel does not read, does not scale
// the corrected stream (TextOptions.altupCorrectScale stays false).

// gemma3nLayout is a size's Gemma 3n specifics: every period-th layer
// global, the others over the sliding window (Gemma 3n: 4 local, 1
// global); the last shared layers KV-shared (so that the two before them
// are a local and a global layer, which ollama's forward pass takes as
// their sources); the first sparse layers with activation sparsity;
// perLayer is embedding_length_per_layer_input, laurel the laurel rank.
type gemma3nLayout struct {
	period, shared, sparse, perLayer, laurel int
}

var gemma3nLayouts = map[string]gemma3nLayout{
	"tiny":  {3, 3, 2, 16, 8},
	"small": {5, 5, 3, 32, 32},
}

const (
	gemma3nAltup = 4 // altup.num_inputs, as Gemma 3n's
	// gemma3nSparsity is the activation sparsity scale of a 0.95 target
	// (the standard normal's 0.95 quantile), as the converter writes it
	gemma3nSparsity = 1.6448536
)

// gemma3nKV sets Gemma 3n's metadata and returns its vocabulary.
func gemma3nKV(kv fsggml.KV, s synthShape, size string) (*synthVocab, error) {
	lay, ok := gemma3nLayouts[size]
	if !ok {
		return nil, fmt.Errorf("%w: synth gemma3n has no layout for %q", ErrBadInput, size)
	}
	voc, err := gemma3KV(kv, s, size)
	if err != nil {
		return nil, err
	}
	// the keys ollama's converter writes (convert/convert_gemma3n.go):
	// head_dim, not key_length and value_length, which newTextModel reads
	// (it falls back to embedding_length / head_count, the same in every
	// Gemma 3n); no soft-capping, no rope scaling
	for _, k := range []string{"rope.local.freq_base", "rope.scaling.type", "rope.scaling.factor", "final_logit_softcapping",
		"attention.key_length", "attention.value_length"} {
		delete(kv, k)
	}
	kv["head_dim"] = uint32(s.headDim)
	kv["rope.freq_base_local"] = float32(10000)
	kv["altup.correct_scale"] = true
	kv["altup.lr_multiplier"] = float32(1)
	kv["attention.sliding_window"] = uint32(synthWindows["gemma3n"][size])
	kv["embedding_length_per_layer_input"] = uint32(lay.perLayer)
	kv["altup.active_idx"] = uint32(0)
	kv["altup.num_inputs"] = uint32(gemma3nAltup)
	// fewer layers (SynthSpec.Layers) share fewer, down to none
	kv["attention.shared_kv_layers"] = uint32(max(min(lay.shared, s.layers-lay.period), 0))
	pattern := make([]bool, s.layers)
	sparse := make([]float32, s.layers)
	for l := range s.layers {
		pattern[l] = (l+1)%lay.period != 0
		if l < lay.sparse {
			sparse[l] = gemma3nSparsity
		}
	}
	kv["attention.sliding_window_pattern"] = pattern
	kv["activation_sparsity_scale"] = sparse
	kv["tokenizer.chat_template"] = gemma3nTemplate
	return voc, nil
}

// gemma3nTop adds the model-wide tensors beside the embedding and head.
func gemma3nTop(k synthKit, s synthShape, size string) {
	lay := gemma3nLayouts[size]
	all := lay.perLayer * s.layers
	k.add("per_layer_token_embd.weight", k.mat, k.normal(0.5), all, s.vocab)
	k.add("per_layer_model_proj.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, all)
	k.add("per_layer_proj_norm.weight", k.f32, k.norm, lay.perLayer)
	k.add("altup_proj.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, s.hidden, gemma3nAltup-1)
	k.add("altup_unembd_proj.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, s.hidden, gemma3nAltup-1)
}

// gemma3nLayer adds layer p's tensors (a KV-shared layer has its key and
// value projections too, unused, as ollama's struct wants them).
func gemma3nLayer(k synthKit, p string, s synthShape, size string) {
	lay := gemma3nLayouts[size]
	q, kvd := s.heads*s.headDim, s.kvHeads*s.headDim
	k.add(p+"altup_correct_scale.weight", k.f32, k.norm, s.hidden)
	k.add(p+"altup_predict_coef.weight", k.f32, k.normal(0.1), gemma3nAltup, gemma3nAltup*gemma3nAltup)
	k.add(p+"altup_correct_coef.weight", k.f32, k.normal(0.1), gemma3nAltup, gemma3nAltup)
	k.add(p+"altup_router.weight", k.f32, k.normal(k.inv(s.hidden)), s.hidden, gemma3nAltup)
	k.add(p+"altup_router_norm.weight", k.f32, k.norm, s.hidden)
	k.add(p+"laurel_l.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, lay.laurel)
	k.add(p+"laurel_r.weight", k.mat, k.normal(k.inv(lay.laurel)), lay.laurel, s.hidden)
	k.add(p+"laurel_post_norm.weight", k.f32, k.norm, s.hidden)
	k.add(p+"attn_norm.weight", k.f32, k.norm, s.hidden)
	k.add(p+"attn_q.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, q)
	k.add(p+"attn_k.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, kvd)
	k.add(p+"attn_v.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, kvd)
	k.add(p+"attn_output.weight", k.mat, k.normal(k.inv(q)), q, s.hidden)
	k.add(p+"attn_q_norm.weight", k.f32, k.norm, s.headDim)
	k.add(p+"attn_k_norm.weight", k.f32, k.norm, s.headDim)
	k.add(p+"post_attention_norm.weight", k.f32, k.norm, s.hidden)
	k.add(p+"ffn_norm.weight", k.f32, k.norm, s.hidden)
	k.add(p+"ffn_gate.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, s.ffn)
	k.add(p+"ffn_up.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, s.ffn)
	k.add(p+"ffn_down.weight", k.mat, k.normal(k.inv(s.ffn)), s.ffn, s.hidden)
	k.add(p+"post_ffw_norm.weight", k.f32, k.norm, s.hidden)
	k.add(p+"inp_gate.weight", k.mat, k.normal(k.inv(s.hidden)), s.hidden, lay.perLayer)
	k.add(p+"proj.weight", k.mat, k.normal(k.inv(lay.perLayer)), lay.perLayer, s.hidden)
	k.add(p+"post_norm.weight", k.f32, k.norm, s.hidden)
}

// gemma3nTemplate is Gemma 3n's tokenizer.chat_template
// (testdata/templates/gemma3n.jinja: Gemma 3's, with audio and image soft
// tokens).
const gemma3nTemplate = `{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
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
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'audio' -%}
                {{ '<audio_soft_token>' }}
            {%- elif item['type'] == 'image' -%}
                {{ '<image_soft_token>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
`
