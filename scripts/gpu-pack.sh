#!/usr/bin/env bash
# Packs what the GPU machine needs for scripts/gpu-run.sh into DIR (an
# ignored folder of the repo, carried there: the device's 64 MiB limit
# holds it compressed, about 14 MiB): swarmd, stripped, and the Vulkan
# backend, xz-compressed; the Vulkan loader's Debian package (that machine
# may have none). Build first: make build build-vulkan.
#
#   scripts/gpu-pack.sh [DIR]   # default .gpu
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.gpu}
[ -x bin/swarmd ] && [ -f lib/ollama/libggml-vulkan.so ] || { echo "gpu-pack: run make build build-vulkan first" >&2; exit 1; }
mkdir -p "$DIR"
strip -o "$DIR/swarmd" bin/swarmd
xz -f -T0 -6 "$DIR/swarmd"
tar -C lib -cJf "$DIR/ollama.tar.xz" ollama
(cd "$DIR" && apt-get download libvulkan1 >/dev/null)
case "$DIR" in /*) ;; *) grep -qx "/$DIR/" .git/info/exclude 2>/dev/null || echo "/$DIR/" >>.git/info/exclude ;; esac
du -sh "$DIR"
