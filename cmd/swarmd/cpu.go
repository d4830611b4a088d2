package main

import (
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/cpu"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// cpuMissing says which instructions the ggml compiled into this binary
// uses that the CPU running it lacks ("" when none), and how to build for
// it. Without this check such a CPU dies with SIGILL at the first
// inference: a Raspberry Pi 4 (Cortex-A72, ARMv8.0) on the default arm64
// build, or an x86 machine older than Haswell on the x86-64-v3 one.
func cpuMissing() string {
	features, _ := engine.SIMD()
	has := func(f string) bool { return slices.Contains(strings.Fields(features), f) }
	switch {
	case runtime.GOARCH == "arm64" && has("DOTPROD") && !cpu.ARM64.HasASIMDDP:
		return "this swarmd's ggml was built for ARMv8.2 with the dot product (-march=armv8.2-a+dotprod), " +
			"which this CPU lacks (a Raspberry Pi 4, 3 or Zero 2 W?): build it with " +
			"ARM64_FLAGS='-O3 -mcpu=cortex-a72' (docs/install.md, \"On a Raspberry Pi\")"
	case runtime.GOARCH == "amd64" && has("AVX2") && !(cpu.X86.HasAVX2 && cpu.X86.HasFMA):
		return "this swarmd's ggml was built for x86-64-v3 (AVX2, FMA), which this CPU lacks: " +
			"build it with SIMD_FLAGS='-O3 -march=native' (make build)"
	}
	return ""
}
