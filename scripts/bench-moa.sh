#!/usr/bin/env bash
# MoA fan-out overhead on loopback (issue figure): an originator holding no
# model and 5 role daemons; `swarmctl bench moa` runs 20 queries and reports
# the median of end-to-end latency minus aggregation minus the slowest agent's
# own time.
#
#   scripts/bench-moa.sh [MODEL.gguf]   # default: synthetic qwen3 small q8_0
set -euo pipefail
cd "$(dirname "$0")/.."
SWARM_WORK_NAME=bench
. scripts/lib.sh
MODEL=${1:-}
if [ -z "$MODEL" ]; then
  MODEL=$WORK/small.gguf
  "$BIN/swarmd" model synth --arch qwen3 --size small --type q8_0 -o "$MODEL" >/dev/null
fi
JOIN=""
start_peer origin
JOIN=$(ctl origin invite 2>/dev/null)
start_peer r1 --role reasoner="$MODEL"
start_peer r2 --role writer="$MODEL"
start_peer r3 --role critic="$MODEL"
start_peer r4 --role factchecker="$MODEL"
start_peer r5 --role drafter="$MODEL" --role aggregator="$MODEL"
for _ in $(seq 200); do
  [ "$(ctl origin peers --json | grep -c '"alive": true')" -ge 6 ] && break
  sleep 0.1
done
ctl origin bench moa --n "${N:-20}" --max-tokens "${GEN:-16}" "Explain why the sky is blue and compare it with sunsets"
