package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// runBench implements `swarmd bench`: prefill and decode speed of one model
// file, median of several runs after a warm-up. Exit codes: 0 ok, 1 failure,
// 2 usage error.
func runBench(args []string, stdout, stderr io.Writer) int {
	const cmd = "swarmd bench"
	fs := newFlagSet(cmd, "--model FILE [flags]", stdout, stderr)
	path := fs.String("model", "", "GGUF model `FILE` (required, whole model)")
	threads := fs.Int("threads", runtime.NumCPU(), "ggml CPU threads")
	prompt := fs.Int("prompt", 32, "prompt tokens (prefill)")
	gen := fs.Int("gen", 64, "generated tokens (decode)")
	reps := fs.Int("reps", 3, "measured runs (after one warm-up)")
	flash := fs.Bool("flash", false, "ggml's fused flash-attention kernel (peers keep it off; compare)")
	noRepack := fs.Bool("no-repack", false, "keep Q4 weights in ggml's plain layout (compare with the repacked kernels)")
	noPool := fs.Bool("no-pool", false, "start ggml's worker threads for each graph, ggml's default (compare with the kept pool)")
	gpu := fs.Bool("gpu", false, "run every layer that fits on the GPU (--gpu-layers for fewer)")
	gpuLayers := fs.Int("gpu-layers", 0, "run at most `N` layers on the GPU (the last ones)")
	gpuLibs := fs.String("gpu-libs", "", "load GPU backends from `DIR` (ending in lib/ollama; default: lib/ollama beside the binary's folder)")
	pos, code, done := parseFlags(fs, args)
	if done {
		return code
	}
	switch {
	case len(pos) > 0:
		return usageErr(stderr, cmd, "unexpected argument %q", pos[0])
	case *path == "":
		return usageErr(stderr, cmd, "--model FILE is required")
	case *threads < 1:
		return usageErr(stderr, cmd, "--threads must be at least 1")
	case *prompt < 1 || *gen < 1 || *reps < 1:
		return usageErr(stderr, cmd, "--prompt, --gen and --reps must be at least 1")
	case *gpuLayers < 0:
		return usageErr(stderr, cmd, "--gpu-layers must not be negative")
	}
	layers := *gpuLayers
	if *gpu && layers == 0 {
		layers = engine.GPULayersAll
	}
	if why := cpuMissing(); why != "" {
		fmt.Fprintf(stderr, "%s: %s\n", cmd, why)
		return 1
	}
	feats, ok := engine.SIMD()
	if !ok {
		fmt.Fprintf(stderr, "%s: warning: ggml built without SIMD (%s); rebuild with CGO_CFLAGS='-O3 -march=x86-64-v3'\n", cmd, feats)
	}
	// ollama logs each load at info level through the default logger:
	// keep the report to the figures.
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx := context.Background()
	backends, err := engine.InitBackends(*gpuLibs)
	if err != nil {
		return usageErr(stderr, cmd, "--gpu-libs: %v", err)
	}
	if layers != 0 {
		for _, w := range backends.Warnings {
			fmt.Fprintf(stderr, "%s: warning: %s\n", cmd, w)
		}
		if len(backends.Devices) == 0 {
			fmt.Fprintf(stderr, "%s: warning: no GPU found in %v: running on the CPU (make build-vulkan builds the Vulkan backend)\n", cmd, backends.Dirs)
		}
	}
	m, err := engine.Load(ctx, *path, engine.Options{Threads: *threads, Slots: 1, Context: *prompt + *gen + 8, Batch: max(512, *prompt), PrefillChunk: max(512, *prompt), FlashAttention: *flash, NoRepack: *noRepack, NoPool: *noPool,
		GPULayers: layers})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	defer m.Close()
	info := m.Info()
	vocab := info.VocabSize
	r := rand.New(rand.NewPCG(1, 2))
	var pp, tg []float64
	var build, compute time.Duration // decode's, over the measured runs
	for rep := 0; rep <= *reps; rep++ {
		s, err := m.NewSession()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
			return 1
		}
		toks := make([]int32, *prompt)
		for i := range toks {
			toks[i] = int32(r.IntN(max(1, vocab*9/10)))
		}
		t0 := time.Now()
		logits, err := s.RunRange(ctx, 0, info.Layers, toks, nil)
		if err != nil {
			s.Close()
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
			return 1
		}
		dp := time.Since(t0)
		b0, c0 := m.Timing()
		t0 = time.Now()
		for range *gen {
			id := engine.Greedy(logits)
			if logits, err = s.RunRange(ctx, 0, info.Layers, []int32{id}, nil); err != nil {
				s.Close()
				fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
				return 1
			}
		}
		dg := time.Since(t0)
		b1, c1 := m.Timing()
		s.Close()
		if rep > 0 { // rep 0 warms up caches and ggml's allocator
			build, compute = build+b1-b0, compute+c1-c0
			pp = append(pp, float64(*prompt)/dp.Seconds())
			tg = append(tg, float64(*gen)/dg.Seconds())
		}
	}
	mem := m.Memory()
	fmt.Fprintf(stdout, "model:   %s (%s, %s, %d layers)\n", *path, info.Arch, info.Name, info.Layers)
	fmt.Fprintf(stdout, "engine:  %d threads, ggml SIMD: %s, weights %.1f MiB, %d tensors repacked\n", *threads, feats,
		float64(mem.Weights)/(1<<20), m.Repacked())
	if g := mem.GPU; g.Device != nil {
		fmt.Fprintf(stdout, "gpu:     %s on %s (%s), weights %.1f MiB there\n", m.Backend(), g.Device.Name, g.Device.Description,
			float64(g.Weights)/(1<<20))
	} else {
		fmt.Fprintf(stdout, "gpu:     none (CPU)\n")
	}
	fmt.Fprintf(stdout, "prefill: pp%-4d %8.1f tok/s  (median of %d; runs %s)\n", *prompt, median(pp), *reps, fmtRuns(pp))
	fmt.Fprintf(stdout, "decode:  tg%-4d %8.2f tok/s  (median of %d; runs %s)\n", *gen, median(tg), *reps, fmtRuns(tg))
	n := time.Duration(*gen * *reps)
	fmt.Fprintf(stdout, "token:   %.2f ms building the graph, %.2f ms computing it (means over decode)\n",
		float64(build/n)/1e6, float64(compute/n)/1e6)
	return 0
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtRuns(x []float64) string {
	out := ""
	for i, v := range x {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%.1f", v)
	}
	return out
}
