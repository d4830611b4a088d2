#!/usr/bin/env bash
# GPU side by side (docs/gpu.md): prefill and decode tok/s of `swarmd bench`
# with every layer on the GPU, against swarmd on the CPU (THREADS threads)
# and, where LLAMA_BENCH names one, llama.cpp's llama-bench (its own GPU
# build, -ngl 99) on the same file. Prints a Markdown table with the
# ratios; each figure is the median of REPS runs. Meant for the GPU
# machine, as one prepared run under 10 minutes: build swarmd and the
# Vulkan backend here (make build build-vulkan), carry bin/ and lib/.
#
#   scripts/bench-gpu.sh [MODEL.gguf ...]  # default: synthetic qwen3 0.6b and 8b, q8_0 and q4_k
#   LLAMA_BENCH=PATH  llama-bench built with GGML_VULKAN (or GGML_CUDA)
#   GPU_LIBS=DIR      GPU backends (default lib/ollama)
#   THREADS=16 PROMPT=512 GEN=128 REPS=3
set -euo pipefail
cd "$(dirname "$0")/.."
SWARM_WORK_NAME=bench-gpu
. scripts/lib.sh
THREADS=${THREADS:-$(nproc)}
PROMPT=${PROMPT:-512}
GEN=${GEN:-128}
REPS=${REPS:-3}
GPU_LIBS=${GPU_LIBS:-$PWD/lib/ollama}
[ -x "$BIN/swarmd" ] || { echo "bench-gpu: no $BIN/swarmd: run make build" >&2; exit 1; }
[ -f "$GPU_LIBS/libggml-vulkan.so" ] || [ -f "$GPU_LIBS/libggml-cuda.so" ] ||
  { echo "bench-gpu: no GPU backend in $GPU_LIBS: run make build-vulkan (or set GPU_LIBS)" >&2; exit 1; }
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  for size in 0.6b 8b; do
    for q in q8_0 q4_k; do
      f=$WORK/qwen3-$size-$q.gguf
      [ -f "$f" ] || "$BIN/swarmd" model synth --arch qwen3 --size "$size" --type "$q" -o "$f" >/dev/null
      models+=("$f")
    done
  done
fi

# ours FILE [swarmd bench flags] -> "prefill decode backend"
ours() {
  "$BIN/swarmd" bench --model "$1" --threads "$THREADS" --prompt "$PROMPT" --gen "$GEN" --reps "$REPS" \
    --gpu-libs "$GPU_LIBS" "${@:2}" |
    awk '/^prefill:/ {p=$3} /^decode:/ {d=$3} /^gpu:/ {b=$2" "$3} END {print p, d, b}'
}
# llama FILE -> "prefill decode" (JSON lines: a GPU's name may hold a comma)
llama() {
  "$LLAMA_BENCH" -m "$1" -t "$THREADS" -ngl 99 -fa 0 -p "$PROMPT" -n "$GEN" -r "$REPS" -o jsonl 2>/dev/null |
    sed -n 's/.*"n_prompt": *\([0-9]*\).*"avg_ts": *\([0-9.e+-]*\).*/\1 \2/p' |
    awk '$1 > 0 {p=$2} $1 == 0 {d=$2} END {print p, d}'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}'; }

echo "| model | work | ours GPU tok/s | backend | ours CPU ($THREADS threads) | GPU/CPU | llama.cpp GPU | ours/llama.cpp |"
echo "|---|---|---|---|---|---|---|---|"
for m in "${models[@]}"; do
  name=$(basename "$m" .gguf)
  read -r gp gd gb1 gb2 < <(ours "$m" --gpu)
  read -r cp cd _ < <(ours "$m")
  lp=- ld=-
  if [ -n "${LLAMA_BENCH:-}" ]; then
    read -r lp ld < <(llama "$m")
  fi
  echo "| $name | pp$PROMPT | $gp | $gb1 $gb2 | $cp | $(ratio "$gp" "$cp") | $lp | $(ratio "$gp" "$lp") |"
  echo "| $name | tg$GEN | $gd | $gb1 $gb2 | $cd | $(ratio "$gd" "$cd") | $ld | $(ratio "$gd" "$ld") |"
done
