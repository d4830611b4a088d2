package engine

import (
	"strconv"
	"strings"

	"github.com/ollama/ollama/fs"
)

// Estimate is the memory Load(path, opts) will take, read from the file's
// header without loading it: the bytes of its weight tensors and the KV
// cache one session takes (opts.Slots sessions take Slots times that),
// and opts with Load's defaults applied. The compute graph's buffers
// (25-40 MiB measured on the 0.6b shape) are not counted. Errors are
// Load's.
func Estimate(path string, opts Options) (Memory, Options, error) {
	meta, err := checkFile(path)
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
		mem.Weights += int64(t.Size())
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
		mem.Weights += embed
	}
	mem.KVPerSession = kvPerSession(kv, int64(kv.Uint("embedding_length")), int64(len(layers)), opts.Context)
	return mem, opts, nil
}

// kvPerSession is the KV cache bytes of one session of ctx tokens over
// layers layers, in f16 as the engine keeps it.
func kvPerSession(cfg fs.Config, hidden, layers int64, ctx int) int64 {
	kvHeads := int64(cfg.Uint("attention.head_count_kv"))
	heads := int64(cfg.Uint("attention.head_count"))
	hk, hv := int64(cfg.Uint("attention.key_length")), int64(cfg.Uint("attention.value_length"))
	if hk == 0 && heads > 0 {
		hk = hidden / heads
	}
	if hv == 0 {
		hv = hk
	}
	ctxCells := int64((ctx + 255) / 256 * 256) // ggml pads the cache to 256 cells
	return layers * ctxCells * kvHeads * (hk + hv) * 2
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
