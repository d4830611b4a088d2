#!/usr/bin/env bash
# make demo: a local swarm on loopback answering questions.
#
#   MODEL=path/to/model.gguf make demo   # a real GGUF (qwen3, qwen2 or llama)
#   make demo                            # a built-in synthetic model (random weights:
#                                        # the answers are gibberish, the mechanics are real)
#
# It starts peers on 127.0.0.1 (mDNS off, so nothing leaves this machine).
# The first makes a private swarm (a new key in its data dir); every other
# joins it with the first's invitation (swarmd --join $(swarmctl invite)),
# as machines of a real swarm do. Then:
#   1. shows the swarm as a peer that holds no model sees it;
#   2. answers a question by Mixture-of-Agents from that peer, with the trace;
#   3. answers a question through a pipeline of 3 peers holding a third of the
#      model's layers each, with the trace.
# KEEP=1 leaves the swarm running (its dashboard in a browser) until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
SWARM_WORK_NAME=demo
. scripts/lib.sh

MODEL=${MODEL:-}
if [ -z "$MODEL" ]; then
  MODEL="$WORK/synthetic-qwen3-small.gguf"
  "$BIN/swarmd" model synth --arch qwen3 --size small --type q8_0 -o "$MODEL" >/dev/null
  echo "no MODEL given: using a synthetic qwen3 model (random weights) at $MODEL"
fi
LAYERS=$("$BIN/swarmd" model info "$MODEL" | awk '/^layers:/ {print $2}')


JOIN=""
start_peer hub
JOIN=$(ctl hub invite 2>/dev/null)
echo "the hub is a private swarm of its own (swarm $(ctl hub status --json | sed -n 's/.*"swarm_id": *"\([0-9a-f]*\)".*/\1/p')); the other peers join it with its invitation (swarmd --join ${JOIN:0:20}...)"
start_peer thinker --role reasoner="$MODEL" --role concise="$MODEL" --role aggregator="$MODEL"
start_peer scribe --role writer="$MODEL" --role critic="$MODEL" --role factchecker="$MODEL" --role drafter="$MODEL"

ROLES="reasoner concise aggregator writer critic factchecker drafter"

start=$(date +%s%N)
for _ in $(seq 200); do
  alive=$(ctl hub peers --json | grep -c '"alive": true' || true)
  [ "$alive" -ge 3 ] && break
  sleep 0.05
done
ms=$(( ($(date +%s%N) - start) / 1000000 ))
# A peer is alive before its roles are announced (they load first): ask
# only once the hub sees every role, or the mixture answers with fewer.
missing=$ROLES
for _ in $(seq 600); do
  seen=$(ctl hub peers --json | grep -o '"role": *"[a-z]*"' | sed 's/.*"\([a-z]*\)"$/\1/' | sort -u || true)
  missing=""
  for r in $ROLES; do
    grep -qx "$r" <<<"$seen" || missing="$missing $r"
  done
  [ -z "$missing" ] && break
  sleep 0.1
done
if [ -n "$missing" ]; then
  echo "the hub does not see these roles after 60 s:$missing (see $WORK/*/swarmd.log)"
  exit 1
fi
echo
echo "== 1. 3 peers see each other after $ms ms, and the hub sees all $(wc -w <<<"$ROLES") roles after $(( ($(date +%s%N) - start) / 1000000 )) ms. The swarm as the hub (no model) sees it:"
ctl hub peers

echo
echo "== 2. Mixture-of-Agents, asked from the hub, which holds no model:"
echo '$ swarmctl ask --trace "Explain why the sky is blue."'
ctl hub ask --trace --max-tokens 24 "Explain why the sky is blue."

a=$(( (LAYERS + 1) / 3 )); b=$(( (2 * LAYERS + 1) / 3 ))
r1="0-$a"; r2="$a-$b"; r3="$b-$LAYERS"
start_peer stage1 --shard "$MODEL:$r1"
start_peer stage2 --shard "$MODEL:$r2"
start_peer stage3 --shard "$MODEL:$r3"
for _ in $(seq 200); do
  ctl hub shards 2>/dev/null | grep -q ", covered" && break
  sleep 0.1
done
echo
echo "== 3. Pipeline: $LAYERS layers split over 3 peers ([${r1/-/,}), [${r2/-/,}), [${r3/-/,}))):"
ctl hub shards
echo
echo '$ swarmctl ask --mode pipeline --trace "Tell me about the swarm."'
ctl hub ask --mode pipeline --trace --max-tokens 24 --repeat-penalty 1.3 "Tell me about the swarm."

echo
if [ -n "${KEEP:-}" ]; then
  echo "== The swarm keeps running: its dashboard is at http://$(api hub)/ (every peer serves one). Ctrl-C stops it."
  wait
else
  echo "== Dashboard: KEEP=1 make demo keeps this swarm running and prints the address of its web dashboard."
fi
