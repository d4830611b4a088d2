package engine

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ollama/ollama/fs"
	fsggml "github.com/ollama/ollama/fs/ggml"
)

// Estimate is the memory Load(path, opts) will take, read from the file's
// header without loading it: the bytes of its weight tensors and the KV
// cache one session takes (opts.Slots sessions take Slots times that), in
// the host's memory and on a GPU (Memory.GPU, as Load would place them
// now: opts.GPULayers), and opts with Load's defaults applied. The compute graph's buffers
// (25-40 MiB measured on the 0.6b shape) are not counted. Errors are
// Load's.
func Estimate(path string, opts Options) (Memory, Options, error) {
	meta, err := checkFile(path, false)
	if err != nil {
		return Memory{}, opts, err
	}
	kv := meta.KV()
	opts.defaults(int(kv.ContextLength()))
	var mem Memory
	layers := map[int]bool{}
	var embed int64
	head := false
	for _, t := range meta.Tensors().Items() {
		// Each tensor ends inside the file (checkFile), but tensors may
		// overlap: a header can declare far more than the file holds.
		if mem.Weights, err = addBytes(mem.Weights, t.Size()); err != nil {
			return Memory{}, opts, &FileError{path, fmt.Errorf("%w: tensor %s: %v", ErrNotGGUF, t.Name, err)}
		}
		if i, ok := blockOf(t.Name); ok {
			layers[i] = true
		}
		switch {
		case t.Name == "token_embd.weight":
			embed = int64(t.Size())
		case strings.HasPrefix(t.Name, "output."):
			head = true
		}
	}
	if !head {
		// A tied head: the backend loads the embedding a second time as
		// the output matrix.
		if mem.Weights, err = addBytes(mem.Weights, uint64(embed)); err != nil {
			return Memory{}, opts, &FileError{path, fmt.Errorf("%w: tied output head: %v", ErrNotGGUF, err)}
		}
	}
	mem.GPU = planOffload(meta, opts, Devices())
	mem.Weights -= mem.GPU.Weights
	var ok bool
	if mem.KVPerSession, ok = kvPerSession(kv, int64(kv.Uint("embedding_length")), int64(len(layers)-len(mem.GPU.Layers)), opts.Context); !ok {
		return Memory{}, opts, &FileError{path, fmt.Errorf("%w: its KV cache (%d layers of %d tokens, as the header shapes attention) is too large to count",
			ErrNotGGUF, len(layers), opts.Context)}
	}
	return mem, opts, nil
}

// addBytes is a+b, or an error where the sum does not fit an int64.
func addBytes(a int64, b uint64) (int64, error) {
	if b > math.MaxInt64 || a > math.MaxInt64-int64(b) {
		return 0, fmt.Errorf("more bytes than an int64 counts")
	}
	return a + int64(b), nil
}

// kvShape is the header's attention shape: KV heads, key and value sizes.
func kvShape(cfg fs.Config, hidden int64) (kvHeads, hk, hv int64) {
	if cfg.Architecture() == "glm4moelite" {
		// Absorbed latent attention: the cache holds one head, the
		// compressed key with its rotary part, and the compressed key
		// again as the value (the header's lengths are a query head's).
		lora, rope := int64(cfg.Uint("attention.kv_lora_rank")), int64(cfg.Uint("rope.dimension_count"))
		return 1, lora + rope, lora
	}
	kvHeads = int64(cfg.Uint("attention.head_count_kv"))
	heads := int64(cfg.Uint("attention.head_count"))
	hk, hv = int64(cfg.Uint("attention.key_length")), int64(cfg.Uint("attention.value_length"))
	if hk == 0 && heads > 0 {
		hk = hidden / heads
	}
	if hv == 0 {
		hv = hk
	}
	return kvHeads, hk, hv
}

// kvPerSession is the KV cache bytes of one session of ctx tokens over
// layers layers, in f16 as the engine keeps it; false where a header's
// numbers multiply past an int64.
func kvPerSession(cfg fs.Config, hidden, layers int64, ctx int) (int64, bool) {
	kvHeads, hk, hv := kvShape(cfg, hidden)
	if s := int64(sharedKVLayers(cfg)); s > 0 && s < layers {
		// gemma3n: its last layers read earlier layers' KV and keep none
		// (a whole model: its slices are refused)
		layers -= s
	}
	if hc, ok := cfg.(interface {
		UintOrArrayValueAsArray(key string, def uint32) []uint32
	}); ok && kvHeads == 0 {
		// KV heads per layer (LFM2: none in its convolution layers): every
		// layer counted at the most, an overestimate. (ollama's
		// HeadCountKVMax panics on an empty array.)
		for _, h := range hc.UintOrArrayValueAsArray("attention.head_count_kv", 1) {
			kvHeads = max(kvHeads, int64(h))
		}
	}
	ctxCells := int64((ctx + 255) / 256 * 256) // ggml pads the cache to 256 cells
	kv, ok := mulBytes(layers, ctxCells, kvHeads, hk+hv, 2)
	stateOf := map[string]func(fs.Config) (int64, bool){
		"qwen3next":  qwen3nextState,
		"nemotron_h": nemotronhState,

		"nemotron_h_moe": nemotronhState,
	}[cfg.Architecture()]
	if !ok || stateOf == nil {
		return kv, ok
	}
	per, ok := stateOf(cfg)
	if !ok {
		return 0, false
	}
	st, ok := mulBytes(layers, per, 4)
	if !ok || st > math.MaxInt64-kv {
		return 0, false
	}
	return kv + st, true
}

// qwen3nextState is the floats of one session's recurrent state in a
// Qwen3-Next DeltaNet layer (F32, as ollama keeps it): the convolution's
// last ssm.conv_kernel-1 inputs over its channels, and a head_v_dim²
// matrix per value head. Counted for every layer, as the KV is (an
// overestimate); the checkpoints ollama's cache takes of it on long
// sessions are not counted. false where the header's numbers multiply
// past an int64.
func qwen3nextState(cfg fs.Config) (int64, bool) {
	inner, groups, state := int64(cfg.Uint("ssm.inner_size")), int64(cfg.Uint("ssm.group_count")), int64(cfg.Uint("ssm.state_size"))
	vHeads, conv := int64(cfg.Uint("ssm.time_step_rank")), int64(cfg.Uint("ssm.conv_kernel"))
	if vHeads <= 0 {
		return 0, true
	}
	headV := inner / vHeads
	channels, ok1 := mulBytes(2, groups, state)
	convFloats, ok2 := mulBytes(max(0, conv-1), inner+channels)
	delta, ok3 := mulBytes(headV, headV, vHeads)
	if !ok1 || !ok2 || !ok3 || delta > math.MaxInt64-convFloats {
		return 0, false
	}
	return convFloats + delta, true
}

// nemotronhState is the floats of one session's recurrent state in a
// Nemotron-H Mamba-2 layer (F32, as ollama keeps it): the convolution's
// last ssm.conv_kernel-1 inputs over its channels (x, B and C), and a
// state_size × head dim matrix per SSM head. Counted for every layer, as
// the KV is (an overestimate); checkpoints not counted, as qwen3next's.
func nemotronhState(cfg fs.Config) (int64, bool) {
	inner, groups, state := int64(cfg.Uint("ssm.inner_size")), int64(cfg.Uint("ssm.group_count")), int64(cfg.Uint("ssm.state_size"))
	conv := int64(cfg.Uint("ssm.conv_kernel"))
	bc, ok1 := mulBytes(2, groups, state)
	convFloats, ok2 := mulBytes(max(0, conv-1), inner+bc)
	ssm, ok3 := mulBytes(state, inner)
	if !ok1 || !ok2 || !ok3 || inner+bc < 0 || ssm > math.MaxInt64-convFloats {
		return 0, false
	}
	return convFloats + ssm, true
}

// mulBytes is the product of non-negative xs; false where it overflows.
func mulBytes(xs ...int64) (int64, bool) {
	p := int64(1)
	for _, x := range xs {
		if x < 0 || (x != 0 && p > math.MaxInt64/x) {
			return 0, false
		}
		p *= x
	}
	return p, true
}

// checkKVShape refuses a header whose attention shape is not its tensors':
// the engine sizes the KV cache by the header and reshapes the key and
// value projections into it, and where they disagree ggml aborts the
// process (GGML_ASSERT) at the first compute, after Load succeeded.
func checkKVShape(meta *fsggml.GGML) error {
	kv := meta.KV()
	kvHeads, hk, hv := kvShape(kv, int64(kv.Uint("embedding_length")))
	if kvHeads == 0 {
		return nil // per layer (an array) or absent: not this check's
	}
	for _, t := range meta.Tensors().Items() {
		var want uint64
		switch {
		case strings.HasSuffix(t.Name, ".attn_k.weight"):
			want = uint64(kvHeads) * uint64(hk) // each below 2^32
		case strings.HasSuffix(t.Name, ".attn_v.weight"):
			want = uint64(kvHeads) * uint64(hv)
		default:
			continue
		}
		if len(t.Shape) != 2 || t.Shape[1] != want {
			return fmt.Errorf("%w: tensor %s has shape %v, but the header's attention (%d KV heads of %d key and %d value dims) wants %d outputs",
				ErrNotGGUF, t.Name, t.Shape, kvHeads, hk, hv, want)
		}
	}
	return nil
}

// blockOf is N of a tensor named "blk.N.…".
func blockOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(num)
	return i, err == nil && i >= 0
}
