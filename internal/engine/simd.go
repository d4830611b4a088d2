package engine

// The ggml CPU code is compiled into this binary by ollama's ml/backend/ggml
// packages; these compile-time feature probes are plain C functions there, so
// declaring them here links against the same objects.

/*
extern int ggml_cpu_has_sse3(void);
extern int ggml_cpu_has_avx(void);
extern int ggml_cpu_has_avx2(void);
extern int ggml_cpu_has_f16c(void);
extern int ggml_cpu_has_fma(void);
extern int ggml_cpu_has_avx512(void);
extern int ggml_cpu_has_neon(void);
extern int ggml_cpu_has_dotprod(void);
extern int ggml_cpu_has_fp16_va(void);
*/
import "C"

import (
	"log/slog"
	"runtime"
	"strings"

	"golang.org/x/sys/cpu"

	_ "github.com/ollama/ollama/ml/backend/ggml" // links ggml and its CPU backend
)

// SIMD reports the SIMD features the ggml compiled into this binary was built
// with (compile-time flags, not what the running CPU supports) and whether they
// are enough for usable speed: AVX2+FMA+F16C on amd64, NEON with dot product
// on arm64. Other architectures report ok=true with whatever is listed.
func SIMD() (features string, ok bool) {
	var fs []string
	add := func(name string, on C.int) {
		if on != 0 {
			fs = append(fs, name)
		}
	}
	add("SSE3", C.ggml_cpu_has_sse3())
	add("AVX", C.ggml_cpu_has_avx())
	add("AVX2", C.ggml_cpu_has_avx2())
	add("F16C", C.ggml_cpu_has_f16c())
	add("FMA", C.ggml_cpu_has_fma())
	add("AVX512", C.ggml_cpu_has_avx512())
	add("NEON", C.ggml_cpu_has_neon())
	add("DOTPROD", C.ggml_cpu_has_dotprod())
	add("FP16_VA", C.ggml_cpu_has_fp16_va())
	has := func(n string) bool {
		for _, f := range fs {
			if f == n {
				return true
			}
		}
		return false
	}
	switch runtime.GOARCH {
	case "amd64":
		ok = has("AVX2") && has("FMA") && has("F16C")
	case "arm64":
		ok = has("NEON") && has("DOTPROD")
	default:
		ok = true
	}
	return strings.Join(fs, " "), ok
}

// WarnIfNoSIMD logs a warning (and returns false) when the ggml compiled into
// this binary lacks the SIMD it needs for usable speed (and warns, without
// changing the result, when it lacks the repacked Q4 kernels). Daemons call
// it at start.
//
// It stays quiet where the CPU itself lacks that SIMD (a Raspberry Pi 4
// has no dot product): a build for it is the right one there.
func WarnIfNoSIMD(log *slog.Logger) bool {
	features, ok := SIMD()
	cpuHas := true
	switch runtime.GOARCH {
	case "amd64":
		cpuHas = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	case "arm64":
		cpuHas = cpu.ARM64.HasASIMDDP
	}
	if log != nil && !RepackAvailable() {
		log.Warn("ggml was built without its repacked CPU kernels: Q4_0/Q4_K/IQ4_NL models decode slower; build with make, or CGO_CPPFLAGS=-DGGML_USE_CPU_REPACK")
	}
	if !ok && cpuHas && log != nil {
		log.Warn("ggml was built without SIMD: inference will be about 3x slower; build with CGO_CFLAGS/CGO_CXXFLAGS='-O3 -march=x86-64-v3' (amd64) or NEON dot-product flags (arm64)",
			"features", features, "arch", runtime.GOARCH)
	}
	return ok
}
