#!/usr/bin/env bash
# Side by side with llama.cpp on the same GGUF files: prefill and decode
# tok/s of `swarmd bench` (as built, and with ALT's flags) against
# `llama-bench`, at each thread count, and the ratio ours / llama.cpp.
# Prints a Markdown table. Runs alternate (ours, plain, llama.cpp) so that
# noise from a shared machine falls on all three alike; each figure is the
# median of REPS runs.
#
#   scripts/bench-llama.sh [MODEL.gguf ...]  # default: synthetic qwen3 0.6b, q8_0 and q4_k
#   LLAMA=DIR      llama-bench's directory (default ../shared/tools/llama.cpp)
#   THREADS="1 2"  thread counts (default: 1, 2, 4, ... up to nproc, and nproc)
#   ALT=--no-repack  flags of the second column (--no-pool: ggml's per-graph
#                  workers; --no-repack: Q4 weights in the plain layout)
#   PROMPT=512 GEN=64 REPS=3 ROUNDS=1
#     ROUNDS > 1 repeats the whole alternation and reports medians over all
set -euo pipefail
cd "$(dirname "$0")/.."
SWARM_WORK_NAME=bench-llama
. scripts/lib.sh
LLAMA=${LLAMA:-../shared/tools/llama.cpp}
PROMPT=${PROMPT:-512}
GEN=${GEN:-64}
REPS=${REPS:-3}
ALT=${ALT:---no-repack}
ROUNDS=${ROUNDS:-1}
[ -x "$LLAMA/llama-bench" ] || { echo "bench-llama: no $LLAMA/llama-bench (set LLAMA=DIR)" >&2; exit 1; }
[ -x "$BIN/swarmd" ] || { echo "bench-llama: no $BIN/swarmd: run make build" >&2; exit 1; }
if [ -z "${THREADS:-}" ]; then
  THREADS=""; t=1; n=$(nproc)
  while [ "$t" -lt "$n" ]; do THREADS="$THREADS $t"; t=$((t * 2)); done
  THREADS="$THREADS $n"
fi
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  for q in q8_0 q4_k; do
    f=$WORK/qwen3-0.6b-$q.gguf
    "$BIN/swarmd" model synth --arch qwen3 --size 0.6b --type "$q" -o "$f" >/dev/null 2>&1
    models+=("$f")
  done
fi

# ours FILE THREADS [swarmd bench flags] -> "prefill decode"
ours() {
  "$BIN/swarmd" bench --model "$1" --threads "$2" --prompt "$PROMPT" --gen "$GEN" --reps "$REPS" "${@:3}" |
    awk '/^prefill:/ {p=$3} /^decode:/ {d=$3} END {print p, d}'
}
# llama FILE THREADS -> "prefill decode"
llama() {
  "$LLAMA/llama-bench" -m "$1" -t "$2" -p "$PROMPT" -n "$GEN" -r "$REPS" -o csv 2>/dev/null |
    awk -F, 'NR==1 {for (i=1;i<=NF;i++) {gsub(/"/,"",$i); col[$i]=i}; next}
             {gsub(/"/,""); if ($col["n_prompt"]>0) p=$col["avg_ts"]; else d=$col["avg_ts"]}
             END {print p, d}'
}
med() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

echo "| model | threads | work | ours tok/s | ours $ALT | llama.cpp | ratio |"
echo "|---|---|---|---|---|---|---|"
for m in "${models[@]}"; do
  name=$(basename "$m" .gguf)
  for t in $THREADS; do
    : >"$WORK/o" ; : >"$WORK/p"; : >"$WORK/l"
    for _ in $(seq "$ROUNDS"); do
      ours "$m" "$t" >>"$WORK/o"
      # shellcheck disable=SC2086 # ALT is a list of flags
      ours "$m" "$t" $ALT >>"$WORK/p"
      llama "$m" "$t" >>"$WORK/l"
    done
    for w in 1 2; do
      work=$([ $w = 1 ] && echo "prefill $PROMPT" || echo "decode $GEN")
      o=$(cut -d' ' -f$w "$WORK/o" | med); p=$(cut -d' ' -f$w "$WORK/p" | med); l=$(cut -d' ' -f$w "$WORK/l" | med)
      printf '| %s | %s | %s | %.1f | %.1f | %.1f | %.2f |\n' "$name" "$t" "$work" "$o" "$p" "$l" "$(echo "$o $l" | awk '{print $1/$2}')"
    done
  done
done
