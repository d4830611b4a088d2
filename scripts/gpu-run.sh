#!/usr/bin/env bash
# The GPU machine's run (docs/gpu.md): unpacks what scripts/gpu-pack.sh put
# in DIR, finds the NVIDIA Vulkan driver, and runs scripts/bench-gpu.sh
# (every layer on the GPU against our CPU, and llama.cpp's GPU build where
# LLAMA_BENCH names one). Keep it under 10 minutes: MODELS, PROMPT, GEN and
# REPS trim it.
#
#   scripts/gpu-run.sh [DIR]   # default .gpu; results also in $OUT/gpu.md where OUT is set
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.gpu}
T=$(mktemp -d /tmp/gpu-run.XXXXXX)
mkdir -p "$T/bin" "$T/lib"
xz -dc "$DIR/swarmd.xz" >"$T/bin/swarmd"
chmod +x "$T/bin/swarmd"
tar -C "$T/lib" -xJf "$DIR/ollama.tar.xz"
if ! ldconfig -p | grep -q libvulkan.so.1; then
  for f in "$DIR"/libvulkan1_*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
  if [ -f "$icd" ] && [ -z "${VK_DRIVER_FILES:-}" ]; then export VK_DRIVER_FILES=$icd; fi
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
"$T/bin/swarmd" bench --help >/dev/null
if [ -f "$DIR/llama.tar.xz" ] && [ -z "${LLAMA_BENCH:-}" ]; then
  mkdir -p "$T/llama"
  tar -C "$T/llama" -xJf "$DIR/llama.tar.xz"
  printf '#!/bin/sh\nexec %s/llama/run-vulkan llama-bench "$@"\n' "$T" >"$T/llama-bench"
  chmod +x "$T/llama-bench"
  export LLAMA_BENCH=$T/llama-bench
fi
BIN=$T/bin GPU_LIBS=$T/lib/ollama scripts/bench-gpu.sh ${MODELS:-} | tee "${OUT:-$T}/gpu.md"
