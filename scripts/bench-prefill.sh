#!/usr/bin/env bash
# Time to first token of a long prompt on a STAGES-stage route, the prompt
# sent whole (a stage at a time) and in parts (pipelined prefill), side by
# side: two originators holding no layers, one with pipeline.prefill_chunk
# -1, one with the default (sized per route), asking in turn over the same
# stages (STAGES daemons of THREADS threads, each pinned to cores of its
# own). Prints each originator's median time to first token and the ratio.
#
#   scripts/bench-prefill.sh [MODEL.gguf]   # default: synthetic qwen3 0.6b q8_0
#   STAGES=2 THREADS=1 LINES=40 (prompt length) N=5 CHUNK=0 (the parts' originator's prefill_chunk)
set -euo pipefail
cd "$(dirname "$0")/.."
SWARM_WORK_NAME=bench-prefill
. scripts/lib.sh
STAGES=${STAGES:-2}
THREADS=${THREADS:-1}
LINES=${LINES:-40}
N=${N:-5}
CHUNK=${CHUNK:-0}
stage_bench bench-prefill "$STAGES" "$THREADS" "${1:-}"
PROMPT=$(for i in $(seq "$LINES"); do
  echo "Line $i of the ledger: peer $((i * 7 % 13)) served $((40 + i * 3)) tokens to peer $((i * 5 % 11)) and took $((17 + i)) back."
done)

echo '{"pipeline": {"prefill_chunk": -1}}' >"$WORK/whole.json"
echo "{\"pipeline\": {\"prefill_chunk\": $CHUNK}}" >"$WORK/parts.json"
start_peer whole --config "$WORK/whole.json"
JOIN=$(ctl whole invite 2>/dev/null)
start_peer parts --config "$WORK/parts.json"
start_stages "$STAGES" "$THREADS"
wait_covered whole
wait_covered parts
# One answer each first: the stages load, and the parts' originator
# measures the hops it sizes the parts by.
ctl whole bench pipeline --n 1 --max-tokens 2 "$PROMPT" >/dev/null
ctl parts bench pipeline --n 1 --max-tokens 2 "$PROMPT" >/dev/null
w=(); p=(); parts=0; toks=0
for _ in $(seq "$N"); do
  w+=("$(ctl whole --json bench pipeline --n 1 --max-tokens 2 "$PROMPT" | awk -F: '/"median_ttft_ms"/ {gsub(/[ ,]/, "", $2); print $2}')")
  out=$(ctl parts --json bench pipeline --n 1 --max-tokens 2 "$PROMPT")
  p+=("$(echo "$out" | awk -F: '/"median_ttft_ms"/ {gsub(/[ ,]/, "", $2); print $2}')")
  parts=$(echo "$out" | awk -F: '/"median_prefill_parts"/ {gsub(/[ ,]/, "", $2); print $2}')
  toks=$(echo "$out" | awk -F: '/"prompt_tokens"/ {gsub(/[ ,]/, "", $2); print $2}')
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mw=$(median "${w[@]}"); mp=$(median "${p[@]}")
echo "prefill: $STAGES stages x $THREADS threads, prompt of $toks tokens, $N answers each, in turn"
echo "  whole          first token median $mw ms   (${w[*]})"
echo "  $parts parts       first token median $mp ms   (${p[*]})"
awk -v a="$mp" -v b="$mw" 'BEGIN {printf "  ratio parts/whole %.2f\n", a / b}'
