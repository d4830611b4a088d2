#!/usr/bin/env bash
# Pipeline benchmark on loopback (issue figures): single-node decode, a
# 1-stage daemon, a 2-stage pipeline, per-hop overhead beyond compute, and
# aggregate tok/s with 2 concurrent sequences.
#
#   scripts/bench-pipeline.sh [MODEL.gguf]   # default: synthetic qwen3 0.6b-shape q8_0
#   STAGE_THREADS=N scripts/bench-pipeline.sh  # threads per stage for the single-sequence run
#                                              # (default: all cores; the stages of one
#                                              # sequence never compute at once)
set -euo pipefail
cd "$(dirname "$0")/.."
SWARM_WORK_NAME=bench
. scripts/lib.sh
N=${N:-5}
GEN=${GEN:-64}
MODEL=${1:-}
if [ -z "$MODEL" ]; then
  MODEL=$WORK/qwen3-0.6b-q8_0.gguf
  "$BIN/swarmd" model synth --arch qwen3 --size 0.6b --type q8_0 -o "$MODEL" >/dev/null
fi
LAYERS=$("$BIN/swarmd" model info "$MODEL" | awk '/^layers:/ {print $2}')
HALF=$(( LAYERS / 2 ))
CORES=$(nproc)
ST=${STAGE_THREADS:-$CORES}


echo "== engine, single node, $CORES threads (swarmd bench)"
"$BIN/swarmd" bench --model "$MODEL" --threads "$CORES" --gen "$GEN" --reps "$N"

echo "== 1-stage daemon, $CORES threads, through the stage protocol"
JOIN=""; start_peer one --threads "$CORES" --shard "$MODEL:0-$LAYERS"
wait_covered one
ctl one bench pipeline --n "$N" --max-tokens "$GEN"
stop_all

echo "== 2-stage pipeline on loopback, $ST thread(s) per stage, originator holds no layers"
start_peer origin
JOIN=$(ctl origin invite 2>/dev/null)
start_peer s1 --threads "$ST" --shard "$MODEL:0-$HALF"
start_peer s2 --threads "$ST" --shard "$MODEL:$HALF-$LAYERS"
wait_covered origin
ctl origin bench pipeline --n "$N" --max-tokens "$GEN"
stop_all

# Two sequences at once keep both stages computing at the same time: on one
# machine each stage then gets its share of the cores (as two devices would
# bring their own); more threads than cores make ggml's spinning barriers crawl.
HT=$(( CORES / 2 > 0 ? CORES / 2 : 1 ))
echo "== 2-stage pipeline, $HT thread(s) per stage: 1 sequence, then 2 concurrent sequences"
start_peer origin
JOIN=$(ctl origin invite 2>/dev/null)
start_peer s1 --threads "$HT" --shard "$MODEL:0-$HALF"
start_peer s2 --threads "$HT" --shard "$MODEL:$HALF-$LAYERS"
wait_covered origin
ctl origin bench pipeline --n "$N" --max-tokens "$GEN"
ctl origin bench pipeline --n "$N" --max-tokens "$GEN" --concurrency 2
