#!/usr/bin/env bash
# Packs what the GPU machine needs for scripts/gpu-run.sh into DIR (an
# ignored folder of the repo, carried there: the device's 64 MiB limit
# holds it compressed, about 14 MiB): swarmd, stripped, and the Vulkan
# backend, xz-compressed; the Vulkan loader's Debian package (that machine
# may have none); and llama.cpp's Vulkan build, Debian's, for the side by
# side (VULKAN=1 scripts/llama-cpp-debian.sh; 20 MiB more). Build first:
# make build build-vulkan.
#
#   scripts/gpu-pack.sh [DIR]   # default .gpu
#   LLAMA=none                  # leave llama.cpp out
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.gpu}
[ -x bin/swarmd ] && [ -f lib/ollama/libggml-vulkan.so ] || { echo "gpu-pack: run make build build-vulkan first" >&2; exit 1; }
mkdir -p "$DIR"
strip -o "$DIR/swarmd" bin/swarmd
xz -f -T0 -6 "$DIR/swarmd"
tar -C lib -cJf "$DIR/ollama.tar.xz" ollama
(cd "$DIR" && apt-get download libvulkan1 >/dev/null)
if [ "${LLAMA:-}" != none ]; then
  L=$(VULKAN=1 scripts/llama-cpp-debian.sh "${LLAMA:-/tmp/llama.cpp-debian-vulkan}")
  tar -C "$L" -cJf "$DIR/llama.tar.xz" run-vulkan root
fi
case "$DIR" in /*) ;; *) grep -qx "/$DIR/" .git/info/exclude 2>/dev/null || echo "/$DIR/" >>.git/info/exclude ;; esac
du -sh "$DIR"
