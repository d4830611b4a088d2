#!/usr/bin/env bash
# Cross-builds swarmd and swarmctl for linux/arm64 (Raspberry Pi 3/4/5,
# arm64 boards and servers) on an amd64 Debian machine:
#   scripts/cross-arm64.sh [OUTDIR [swarmd|swarmctl ...]]
# OUTDIR defaults to bin/linux-arm64, the commands to both. Needs Debian's cross compilers
# (gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu: scripts/install-deps.sh).
#
# The engine is ggml compiled through cgo, so CC/CXX are the cross
# compilers and ARM64_FLAGS its SIMD flags:
#   default  -O3 -march=armv8.2-a+dotprod  Pi 5 (Cortex-A76), phones, Graviton2+
#   Pi 4     ARM64_FLAGS='-O3 -mcpu=cortex-a72'   (also Pi 3 / Zero 2 W)
# A Pi 4's Cortex-A72 is ARMv8.0: the default build dies there with SIGILL
# on its first compute (the LSE atomics of ARMv8.1 in ggml's thread pool,
# and the dot-product instructions). See docs/install.md, "On a Raspberry Pi".
# swarmctl is cgo-free.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin/linux-arm64}
shift || true
cmds=("$@")
[ ${#cmds[@]} -gt 0 ] || cmds=(swarmd swarmctl)
flags=${ARM64_FLAGS:--O3 -march=armv8.2-a+dotprod}
for tool in aarch64-linux-gnu-gcc aarch64-linux-gnu-g++; do
  command -v "$tool" >/dev/null || {
    echo "cross-arm64: $tool missing: run scripts/install-deps.sh (apt: gcc-aarch64-linux-gnu g++-aarch64-linux-gnu)" >&2
    exit 1
  }
done
mkdir -p "$out"
for c in "${cmds[@]}"; do
  case "$c" in
    swarmd)
      GOOS=linux GOARCH=arm64 CGO_ENABLED=1 CC=aarch64-linux-gnu-gcc CXX=aarch64-linux-gnu-g++ \
        CGO_CFLAGS="$flags -Wno-stringop-overflow" CGO_CXXFLAGS="$flags -Wno-stringop-overflow" CGO_CPPFLAGS=-DGGML_USE_CPU_REPACK go build -o "$out/swarmd" ./cmd/swarmd
      echo "cross-arm64: $out/swarmd (linux/arm64, ggml built with $flags)" ;;
    swarmctl)
      GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -o "$out/swarmctl" ./cmd/swarmctl
      echo "cross-arm64: $out/swarmctl (linux/arm64, no cgo)" ;;
    *) echo "cross-arm64: unknown command $c (swarmd, swarmctl)" >&2; exit 2 ;;
  esac
done
