# ggml (inside the engine) must be compiled with SIMD: default cgo flags make
# decode 3x slower. x86-64-v3 (AVX2, FMA, F16C) is portable across every
# x86 machine from 2015 on; arm64 gets the dot-product extension.
ARCH := $(shell go env GOARCH)
ifeq ($(ARCH),arm64)
SIMD_FLAGS ?= -O3 -march=armv8.2-a+dotprod
else
SIMD_FLAGS ?= -O3 -march=x86-64-v3
endif
# ggml's own compiler warnings (repack.cpp's -Wstringop-overflow at -O3) are
# not ours to fix, and a newcomer's first build should print nothing: GCC's
# are silenced (clang, on macOS, does not raise them and knows no such flag).
ifeq ($(shell go env GOOS),linux)
QUIET_FLAGS ?= -Wno-stringop-overflow
endif
export CGO_CFLAGS := $(SIMD_FLAGS) $(QUIET_FLAGS)
export CGO_CXXFLAGS := $(SIMD_FLAGS) $(QUIET_FLAGS)
# ggml's repacked CPU kernels for Q4_0/Q4_K/IQ4_NL weights (internal/engine/repack.go):
# ollama's build of ggml leaves them out; this define puts them back.
REPACK_FLAGS ?= -DGGML_USE_CPU_REPACK
export CGO_CPPFLAGS := $(REPACK_FLAGS)

.PHONY: build build-vulkan test demo deps clean arm64

build:
	go build -o bin/swarmd ./cmd/swarmd
	CGO_ENABLED=0 go build -o bin/swarmctl ./cmd/swarmctl

deps:
	scripts/install-deps.sh

# ggml's Vulkan backend into lib/ollama, where bin/swarmd loads it from
# (docs/gpu.md): about 7 minutes on 2 cores, once.
build-vulkan:
	scripts/build-vulkan.sh

# Cross-build for linux/arm64 into bin/linux-arm64 (docs/install.md, "On a
# Raspberry Pi"). ARM64_FLAGS is ggml's: the default needs ARMv8.2 with the dot
# product (Pi 5, phones); a Pi 4 or 3 needs ARM64_FLAGS='-O3 -mcpu=cortex-a72'.
ARM64_FLAGS ?= -O3 -march=armv8.2-a+dotprod
arm64:
	ARM64_FLAGS='$(ARM64_FLAGS)' scripts/cross-arm64.sh bin/linux-arm64

test:
	scripts/test.sh

demo: build
	scripts/demo.sh

clean:
	rm -rf bin
