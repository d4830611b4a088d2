#!/usr/bin/env bash
# make demo: a local swarm on loopback. Starts 3 peers (mDNS off, so nothing
# leaves this machine; peers 2 and 3 bootstrap to peer 1) and shows the
# swarm as one of them sees it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
WORK=$(mktemp -d /tmp/swarm-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

start_peer() { # start_peer N [bootstrap]
  local dir="$WORK/peer$1"
  mkdir -p "$dir"
  local args=(--data "$dir" --listen /ip4/127.0.0.1/tcp/0 --api 127.0.0.1:0 --no-mdns --log-level warn)
  [ -n "${2:-}" ] && args+=(--bootstrap "$2")
  "$BIN/swarmd" "${args[@]}" 2>"$dir/swarmd.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$dir/api.addr" ] && return 0; sleep 0.1; done
  echo "peer $1 did not start:"; cat "$dir/swarmd.log"; exit 1
}
api() { cat "$WORK/peer$1/api.addr"; }

start_peer 1
boot=$("$BIN/swarmctl" --api "$(api 1)" id --json | sed -n 's/.*"peer_id": "\(.*\)".*/\1/p')
addr=$("$BIN/swarmctl" --api "$(api 1)" id | sed -n 2p | tr -d ' ')
echo "peer 1: $boot"
start_peer 2 "$addr"
start_peer 3 "$addr"

start=$(date +%s%N)
for _ in $(seq 200); do
  alive=$("$BIN/swarmctl" --api "$(api 3)" peers --json | grep -c '"alive": true' || true)
  [ "$alive" -ge 3 ] && break
  sleep 0.05
done
took=$(( ($(date +%s%N) - start) / 1000000 ))
echo "3 peers see each other after ${took} ms. The swarm as peer 3 sees it:"
echo
"$BIN/swarmctl" --api "$(api 3)" peers
