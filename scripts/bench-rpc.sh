#!/usr/bin/env bash
# Our pipeline against llama.cpp's RPC on one machine: STAGES stages of ours
# (swarmd --shard, an originator holding no layers) and STAGES
# ggml-rpc-server processes for llama-bench, each with THREADS threads,
# each pinned to cores of its own (taskset), on the same GGUF. Prints the
# decode rate of one stream for both, the ratio, and ours with STAGES
# streams at once (llama-bench runs one).
#
#   scripts/bench-rpc.sh [MODEL.gguf]   # default: synthetic qwen3 0.6b q8_0
#   STAGES=2 THREADS=1 GEN=64 N=3 LLAMA=DIR (ggml-rpc-server and llama-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
SWARM_WORK_NAME=bench-rpc
. scripts/lib.sh
LLAMA=${LLAMA:-../shared/tools/llama.cpp}
STAGES=${STAGES:-2}
THREADS=${THREADS:-1}
GEN=${GEN:-64}
N=${N:-3}
for t in ggml-rpc-server llama-bench; do
  [ -x "$LLAMA/$t" ] || { echo "bench-rpc: no $LLAMA/$t (set LLAMA=DIR)" >&2; exit 1; }
done
stage_bench bench-rpc "$STAGES" "$THREADS" "${1:-}"
cores() { echo "$(($1 * THREADS))-$((($1 + 1) * THREADS - 1))"; }

# ours
start_peer origin
JOIN=$(ctl origin invite 2>/dev/null)
start_stages "$STAGES" "$THREADS"
wait_covered origin
ours1=$(ctl origin bench pipeline --n "$N" --max-tokens "$GEN" | awk '/decode/ {print $3}')
oursS=$(ctl origin bench pipeline --n "$N" --max-tokens "$GEN" --concurrency "$STAGES" | awk '/aggregate/ {print $3}')
stop_all

# llama.cpp RPC
servers=""
for i in $(seq 0 $((STAGES - 1))); do
  port=$((50052 + i))
  taskset -c "$(cores "$i")" "$LLAMA/ggml-rpc-server" -H 127.0.0.1 -p "$port" -t "$THREADS" >"$WORK/rpc$i.log" 2>&1 &
  pids+=($!)
  servers="$servers${servers:+,}127.0.0.1:$port"
done
sleep 2
# The markdown table (the CSV quotes the server list, commas and all): the
# last column of the tg row is "RATE ± SD".
rpc=$("$LLAMA/llama-bench" -m "$MODEL" --rpc "$servers" -ngl 99 -n "$GEN" -p 0 -r "$N" -o md 2>/dev/null |
  awk -F'|' -v t="tg$GEN" '$0 ~ t {split($(NF-1), v, " "); print v[1]}' | tail -1)
[ -n "$rpc" ] || { echo "bench-rpc: llama-bench over RPC gave no rate (logs in $WORK)" >&2; exit 1; }
stop_all

echo "| work | ours tok/s | llama.cpp RPC tok/s | ratio |"
echo "|---|---|---|---|"
printf '| %d stages x %d threads, 1 stream | %.1f | %.1f | %.2f |\n' "$STAGES" "$THREADS" "$ours1" "$rpc" "$(echo "$ours1 $rpc" | awk '{print $1/$2}')"
printf '| %d stages x %d threads, %d streams (ours; aggregate, prefill included) | %.1f | | %.2f x one stream |\n' \
  "$STAGES" "$THREADS" "$STAGES" "$oursS" "$(echo "$oursS $ours1" | awk '{print $1/$2}')"
