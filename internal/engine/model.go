package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	fsggml "github.com/ollama/ollama/fs/ggml"
	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model"

	// register the ggml backend and the architectures we run
	_ "github.com/ollama/ollama/ml/backend/ggml"
	_ "github.com/ollama/ollama/model/models/gemma3"
	_ "github.com/ollama/ollama/model/models/gemma3n"
	_ "github.com/ollama/ollama/model/models/lfm2"
	_ "github.com/ollama/ollama/model/models/llama"
	_ "github.com/ollama/ollama/model/models/mistral3"
	_ "github.com/ollama/ollama/model/models/qwen2"
	_ "github.com/ollama/ollama/model/models/qwen3"
)

// DefaultPrefillChunk is Options.PrefillChunk's default: a pipeline
// originator cuts a long prompt into parts of multiples of it, which run
// the same graphs as the whole prompt.
const DefaultPrefillChunk = 128

// computeMu serializes all graph computation in the process: ollama's ggml
// backend shares one CPU backend object (with one work buffer) between every
// loaded model.
var computeMu sync.Mutex

// Options configure Load. The zero value is usable.
type Options struct {
	// Threads is the number of ggml CPU threads this model's graphs run
	// on (default: runtime.NumCPU()). The workers are kept between graphs
	// in one pool for the process (see threads.go).
	Threads int
	// Slots is the number of concurrent sessions (default 4). A slot's KV
	// cache is allocated on first use, per layer run, and kept for reuse until
	// Close: at most Slots * Memory().KVPerSession bytes.
	Slots int
	// Context is the KV capacity of one session, in tokens (default: the
	// model's context length, at most 4096).
	Context int
	// Batch is the most positions put in one compute graph, over all the
	// sessions batched in it (default 512).
	Batch int
	// PrefillChunk is the most positions of one session's input run in
	// one graph; a longer prompt is run in chunks, between which the
	// sessions decoding beside it take their steps (default 128, at most
	// Batch). Pipeline stages must use the same PrefillChunk to be
	// bit-identical to a whole-model run.
	PrefillChunk int
	// Queue is how many requests may wait for a slot when all are busy
	// (AcquireSession; default 16; negative: none, busy at once).
	Queue int
	// TTL is how long a session may stay idle before it expires and frees its
	// slot (default 10 minutes; negative: never).
	TTL time.Duration
	// FlashAttention selects ggml's fused attention kernel. It is a little
	// faster (0.6b q8_0 decode at 16 threads: 76 against 70 tok/s) but
	// rounds differently per CPU architecture: an arm64 stage then drifts
	// from amd64 ones by more than the spot checks' tolerances were
	// measured for (e2e TestArm64StageInAmd64Swarm), so peers keep it off.
	FlashAttention bool
	// Isolated gives each session a KV cache of its own and runs its steps
	// alone: no batching (see batch.go), and a session's results are
	// bit-identical to its run alone whatever else runs on the model, as a
	// pipeline's replays and spot checks assume.
	Isolated bool
	// NoRepack keeps Q4_0/Q4_K/IQ4_NL matrix weights in ggml's plain
	// layout instead of moving them to its repacked one (see repack.go):
	// for comparisons; the repacked kernels give the same tokens, faster.
	NoRepack bool
	// NoPool runs each graph on worker threads started for it alone, as
	// ggml does by default, instead of the process's pool: for comparisons.
	NoPool bool
	// GPULayers is how many of the file's layers run on a GPU, where a
	// loaded backend found one (InitBackends): 0 none, GPULayersAll as
	// many as fit, n at most n; the last layers go first, the head with
	// them when every layer fits (planOffload). The rest, the embedding
	// and the inputs run on the CPU; each layer's KV is on its device.
	GPULayers int
	// GPUMemory bounds what the process's models take on a GPU, in
	// bytes (0: the device's free memory, less a reserve for compute).
	GPUMemory int64
	// Logger receives load and session events (nil: discard).
	Logger *slog.Logger
	// LoadProgress, when set, sees Load's progress reading the weights, as
	// the fraction done (0..1).
	LoadProgress func(fraction float32)
}

func (o *Options) defaults(ctxLen int) {
	if o.Threads <= 0 {
		o.Threads = runtime.NumCPU()
	}
	if o.Slots <= 0 {
		o.Slots = 4
	}
	if o.Context <= 0 {
		o.Context = 4096
		if ctxLen > 0 && ctxLen < o.Context {
			o.Context = ctxLen
		}
	}
	if o.Batch <= 0 {
		o.Batch = 512
	}
	if o.PrefillChunk <= 0 {
		o.PrefillChunk = DefaultPrefillChunk
	}
	o.PrefillChunk = min(o.PrefillChunk, o.Batch)
	if o.Queue == 0 {
		o.Queue = 16
	}
	if o.TTL == 0 {
		o.TTL = 10 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Info describes a loaded model file.
type Info struct {
	Path          string
	Arch          string
	Name          string
	Layers        int    // block_count of the whole model
	LayerRange    [2]int // layers [a,b) present in this file
	Hidden        int
	VocabSize     int
	ContextLength int
	HasEmbedding  bool
	HasHead       bool
}

// Memory is what a loaded model holds.
type Memory struct {
	// Weights is the bytes of weight tensors held in the host's memory
	// (ggml buffers).
	Weights int64
	// KVPerSession is the KV cache bytes one session takes in the host's
	// memory once it has run every layer present in the file.
	KVPerSession int64
	// GPU is what the model holds on a GPU, and which layers.
	GPU Offload
}

// Model is a loaded GGUF (whole model or stage slice). It is safe for
// concurrent use; each sequence runs in its own Session.
type Model struct {
	path string
	opts Options
	log  *slog.Logger
	m    model.Model
	b    ml.Backend // m's (a model the engine builds holds none of its own)
	a    arch
	tok  *Tokenizer
	info Info
	mem  Memory

	mu     sync.Mutex // guards slots, closed, session bookkeeping
	slots  []*slot
	closed bool
	dead   atomic.Bool // set before the backend is freed; checked under computeMu
	// cache holds every session's KV, one sequence per slot; created with
	// the first session, used under computeMu.
	cache kvcache.Cache

	// the batching queue (batch.go)
	bmu     sync.Mutex
	pending []*step
	leading bool
	arrived chan struct{} // a step was queued (buffered 1)
	// the last round's size and time: the leader's alone (see gather)
	lastRound int
	lastTook  time.Duration
	// rounds run and steps run in them, for Batching; steps queued
	rounds, batched, queued atomic.Int64
	// cmu guards released: the sequences of sessions closed since the
	// last round, whose cells the next round drops
	cmu      sync.Mutex
	released []int

	// time spent building graphs in Go vs computing them in ggml (ns), for
	// benchmarks
	statBuild, statCompute atomic.Int64
	nextID                 uint64
	now                    func() time.Time
	queue                  QueueStats    // guarded by mu
	freed                  chan struct{} // closed when a slot frees; guarded by mu
	waiters                []*waiter     // requests waiting for a slot, guarded by mu
	closeErr               error
	repacked               *repacked        // nil: not repacked
	gpuTaken               int64            // bytes counted in gpuHeld for GPU.Device
	reserveOnce            bool             // the first round reserves the largest graph (batch.go); under computeMu
	cpu                    []unsafe.Pointer // the backend's CPU backends, for the thread pool (threads.go)
}

// Load loads a whole GGUF model or a stage slice for the CPU. Errors name the
// file; they wrap ErrNotGGUF, ErrTruncated, ErrUnsupportedArch, fs errors
// (os.ErrNotExist) or ErrInternal.
func Load(ctx context.Context, path string, opts Options) (m *Model, err error) {
	meta, err := checkFile(path, true)
	if err != nil {
		return nil, err
	}
	kv := meta.KV()
	opts.defaults(int(kv.ContextLength()))
	devs := Devices()
	off := planOffload(meta, opts, devs)
	if opts.GPULayers != 0 && len(devs) > 0 && off.Device == nil {
		opts.Logger.Warn("no layer fits on a GPU: the model runs on the CPU", "model", path, "gpus", fmt.Sprint(devs),
			"reserve_bytes", gpuReserve(opts, int64(kv.Uint("embedding_length")), 0, int64(kv.Uint("attention.head_count"))),
			"gpu_memory", opts.GPUMemory)
	}
	fa := ml.FlashAttentionDisabled
	if opts.FlashAttention {
		fa = ml.FlashAttentionEnabled
	}
	var om model.Model
	var b ml.Backend // om's; a model the engine builds has it apart (sliceLoaders)
	func() {
		defer recoverErr(&err, "loading model")
		params := ml.BackendParams{AllocMemory: true, NumThreads: opts.Threads, FlashAttention: fa,
			GPULayers: off.gpuLayers(int(kv.BlockCount()))}
		if load := sliceLoaders[kv.Architecture()]; load != nil && !wholeFile(meta) {
			om, b, err = load(path, meta, params)
			return
		}
		if om, err = model.New(path, params); err == nil {
			b = om.Backend()
		}
	}()
	if err != nil {
		return nil, &FileError{path, err}
	}
	var rp *repacked // the repacked weights' buffer, freed after the backend
	fail := func(e error) (*Model, error) {
		func() {
			defer func() { _ = recover() }()
			b.Close()
		}()
		rp.free()
		return nil, &FileError{path, e}
	}
	names := make([]string, 0, len(meta.Tensors().Items())+1)
	for _, t := range meta.Tensors().Items() {
		names = append(names, t.Name)
	}
	names = append(names, "output.weight") // a tied head is a copy of the embedding
	hugePages(b, names)
	func() {
		defer recoverErr(&err, "loading weights")
		err = b.Load(ctx, opts.LoadProgress)
	}()
	if err != nil {
		return fail(err)
	}
	if !opts.NoRepack {
		func() {
			defer recoverErr(&err, "repacking weights")
			rp, err = repackWeights(b, names)
		}()
		switch {
		case errors.Is(err, errNoRepack):
			opts.Logger.Debug("weights not repacked", "model", path, "why", err)
			err = nil
		case err != nil:
			return fail(err)
		}
	}
	cfg := b.Config()
	a, err := newArch(om, cfg)
	if err != nil {
		return fail(err)
	}
	if _, ok := a.(isolatedArch); ok {
		opts.Isolated = true
	}
	tok, err := newTokenizer(om, cfg)
	if err != nil {
		return fail(err)
	}
	m = &Model{path: path, opts: opts, log: opts.Logger, m: om, b: b, a: a, tok: tok, now: time.Now, repacked: rp,
		cpu:         cpuBackends(b),
		reserveOnce: off.Device != nil,
		arrived:     make(chan struct{}, 1)}
	m.info = Info{
		Path:          path,
		Arch:          cfg.Architecture(),
		Name:          cfg.String("general.name"),
		Layers:        int(cfg.Uint("block_count")),
		Hidden:        int(cfg.Uint("embedding_length")),
		VocabSize:     tok.VocabSize(),
		ContextLength: int(cfg.Uint("context_length")),
	}
	func() {
		defer recoverErr(&err, "inspecting tensors")
		m.info.HasEmbedding = a.hasEmbed()
		m.info.HasHead = a.hasHead()
		first, last := -1, -1
		for i := 0; i < m.info.Layers; i++ {
			if a.hasLayer(i) {
				if first < 0 {
					first = i
				}
				last = i
			}
		}
		if first >= 0 {
			m.info.LayerRange = [2]int{first, last + 1}
		}
	}()
	if err != nil {
		return fail(err)
	}
	bm := b.BackendMemory()
	m.mem.Weights = int64(bm.InputWeights)
	for _, w := range bm.CPU.Weights {
		m.mem.Weights += int64(w)
	}
	m.mem.GPU = off
	if off.Device != nil {
		m.mem.GPU.Weights = 0
		for _, g := range bm.GPUs {
			for _, w := range g.Weights {
				m.mem.GPU.Weights += int64(w)
			}
		}
		m.gpuTaken = m.mem.GPU.Weights + m.mem.GPU.KVPerSession*int64(opts.Slots)
		gpuTake(off.Device.Name, m.gpuTaken)
	}
	present := int64(m.info.LayerRange[1]-m.info.LayerRange[0]) - int64(len(off.Layers))
	kvBytes, ok := kvPerSession(cfg, int64(m.info.Hidden), present, opts.Context)
	if !ok {
		kvBytes = math.MaxInt64 // checkFile refused what would abort; this is but a count
	}
	m.mem.KVPerSession = kvBytes
	m.slots = make([]*slot, opts.Slots)
	m.log.Info("model loaded", "model", path, "arch", m.info.Arch, "layers", fmt.Sprintf("%d-%d", m.info.LayerRange[0], m.info.LayerRange[1]),
		"weights_bytes", m.mem.Weights, "repacked_tensors", m.Repacked(), "threads", opts.Threads, "slots", opts.Slots, "context", opts.Context,
		"backend", off.Backend(int(present)+len(off.Layers)), "gpu_weights_bytes", m.mem.GPU.Weights)
	if ct := tok.ChatTemplate(); ct.Note != "" {
		m.log.Warn("chat template", "model", path, "source", ct.Source, "why", ct.Note)
	} else {
		m.log.Info("chat template", "model", path, "source", ct.Source)
	}
	return m, nil
}

// layerArrays is the most values of a metadata array checkFile without
// vocab reads: the per-layer ones (LFM2's attention.head_count_kv, which
// the KV estimate needs), not a vocabulary's.
const layerArrays = 4096

// checkFile reads the GGUF header to give clear errors before ollama
// allocates anything: missing file, not GGUF, truncated, unsupported
// architecture; with vocab, the arrays too, and a vocabulary ollama's
// tokenizers would index past (checkVocab); without, no large array
// (layerArrays).
func checkFile(path string, vocab bool) (meta *fsggml.GGML, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &FileError{path, err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &FileError{path, err}
	}
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || string(magic[:]) != "GGUF" {
		return nil, &FileError{path, fmt.Errorf("%w: bad magic", ErrNotGGUF)}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, &FileError{path, err}
	}
	probe := &endProbe{ReadSeeker: f}
	func() {
		defer recoverErr(&err, "decoding GGUF header")
		arrays := layerArrays
		if vocab {
			arrays = -1
		}
		meta, err = fsggml.Decode(probe, arrays)
	}()
	if err != nil {
		// ollama asks for the file's size only once the header and every
		// tensor's description have decoded; what fails after that is a
		// tensor reaching past the end (its error is untyped text).
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || probe.sizeAsked {
			return nil, &FileError{path, fmt.Errorf("%w: %v", ErrTruncated, err)}
		}
		return nil, &FileError{path, fmt.Errorf("%w: %v", ErrNotGGUF, err)}
	}
	if meta.Length > st.Size() {
		return nil, &FileError{path, fmt.Errorf("%w: %d bytes, tensor data needs %d", ErrTruncated, st.Size(), meta.Length)}
	}
	if arch := meta.KV().Architecture(); !slices.Contains(Architectures, arch) {
		return nil, &FileError{path, fmt.Errorf("%w %q (supported: %s)", ErrUnsupportedArch, arch, strings.Join(Architectures, ", "))}
	}
	if err := checkKVShape(meta); err != nil {
		return nil, &FileError{path, err}
	}
	if err := checkLlama4(meta); err != nil {
		return nil, &FileError{path, err}
	}
	if vocab {
		if err := checkVocab(meta.KV()); err != nil {
			return nil, &FileError{path, err}
		}
	}
	if err := checkWhole(meta); err != nil {
		return nil, &FileError{path, err}
	}
	if err := checkGemma3n(meta); err != nil {
		return nil, &FileError{path, err}
	}
	return meta, nil
}

// Info describes the loaded file.
func (m *Model) Info() Info { return m.info }

// Memory reports the weight bytes held and the KV bytes one session takes.
func (m *Model) Memory() Memory { return m.mem }

// Tokenizer returns the model's tokenizer and chat template.
func (m *Model) Tokenizer() *Tokenizer { return m.tok }

// Repacked is how many weight tensors run on ggml's repacked kernels.
func (m *Model) Repacked() int {
	if m.repacked == nil {
		return 0
	}
	return m.repacked.tensors
}

// Options returns the options in effect (defaults applied).
func (m *Model) Options() Options { return m.opts }

// Close frees the model's memory. Sessions still open fail afterwards with
// ErrClosed. Close is idempotent.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return m.closeErr
	}
	m.closed = true
	m.dead.Store(true)
	computeMu.Lock()
	defer computeMu.Unlock()
	func() {
		defer recoverErr(&m.closeErr, "closing model")
		// ollama's Close frees the weights and caches as they are; a GPU
		// may still be running the last graph on them (its compute is
		// asynchronous).
		syncBackends(m.b)
		for _, s := range m.slots {
			if s != nil && s.sess != nil {
				s.sess.closed = true
			}
			if s != nil && s.cache != nil {
				s.cache.Close()
			}
		}
		if m.cache != nil {
			m.cache.Close()
		}
		m.b.Close()
		m.repacked.free()
		if m.gpuTaken > 0 {
			gpuTake(m.mem.GPU.Device.Name, -m.gpuTaken)
		}
	}()
	return m.closeErr
}

// Timing is the time spent building graphs in Go and computing them in
// ggml, summed over every round the model has run.
func (m *Model) Timing() (build, compute time.Duration) {
	return time.Duration(m.statBuild.Load()), time.Duration(m.statCompute.Load())
}

// Batching reports how many graphs sessions' steps have run in, and how
// many steps: steps/rounds is the mean batch.
func (m *Model) Batching() (rounds, steps int64) { return m.rounds.Load(), m.batched.Load() }

// endProbe notes whether the GGUF decoder asked for the file's size (a
// seek to its end), which it does only after the header has decoded.
type endProbe struct {
	io.ReadSeeker
	sizeAsked bool
}

func (p *endProbe) Seek(offset int64, whence int) (int64, error) {
	if whence == io.SeekEnd {
		p.sizeAsked = true
	}
	return p.ReadSeeker.Seek(offset, whence)
}
