# Shared by demo.sh and the bench scripts: loopback daemons in a temp dir,
# killed and removed on exit. Source it after `cd` to the repo root.
#   start_peer NAME [swarmd flags...]   (joins the swarm of the token $JOIN when set,
#                                        bootstraps to $BOOT when set; --threads 1
#                                        unless the flags say otherwise)
#   ctl NAME [swarmctl args...]
#   wait_covered NAME                   (until NAME sees every layer of a model held)
#   stage_bench NAME STAGES THREADS [MODEL]  (for the stage benchmarks: checks swarmd,
#                                        taskset and cores, sets MODEL (default: a
#                                        synthetic qwen3 0.6b q8_0) and LAYERS)
#   start_stages STAGES THREADS         (peers s0.. serving MODEL's layers in equal
#                                        shares, each pinned to THREADS cores of its own)
BIN=${BIN:-bin}
WORK=$(mktemp -d "/tmp/swarm-${SWARM_WORK_NAME:-run}.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

start_peer() {
  local name=$1
  shift
  local dir="$WORK/$name"
  mkdir -p "$dir"
  local args=(--data "$dir" --listen /ip4/127.0.0.1/tcp/0 --api 127.0.0.1:0 --no-mdns --threads 1 --log-level warn)
  [ -n "${JOIN:-}" ] && args+=(--join "$JOIN")
  [ -n "${BOOT:-}" ] && args+=(--bootstrap "$BOOT")
  "$BIN/swarmd" "${args[@]}" "$@" 2>"$dir/swarmd.log" &
  pids+=($!)
  for _ in $(seq 600); do [ -s "$dir/api.addr" ] && return 0; sleep 0.1; done
  echo "peer $name did not start:"; cat "$dir/swarmd.log"; exit 1
}
api() { cat "$WORK/$1/api.addr"; }
stage_bench() {
  local name=$1 stages=$2 threads=$3
  MODEL=${4:-}
  [ -x "$BIN/swarmd" ] || { echo "$name: no $BIN/swarmd: run make build" >&2; exit 1; }
  command -v taskset >/dev/null || { echo "$name: taskset missing (util-linux)" >&2; exit 1; }
  if [ $((stages * threads)) -gt "$(nproc)" ]; then
    echo "$name: $stages stages x $threads threads need $((stages * threads)) cores, this machine has $(nproc)" >&2
    exit 1
  fi
  if [ -z "$MODEL" ]; then
    MODEL=$WORK/qwen3-0.6b-q8_0.gguf
    "$BIN/swarmd" model synth --arch qwen3 --size 0.6b --type q8_0 -o "$MODEL" >/dev/null 2>&1
  fi
  LAYERS=$("$BIN/swarmd" model info "$MODEL" | awk '/^layers:/ {print $2}')
}
start_stages() {
  local stages=$1 threads=$2 i a b
  for i in $(seq 0 $((stages - 1))); do
    a=$((LAYERS * i / stages)); b=$((LAYERS * (i + 1) / stages))
    start_peer "s$i" --threads "$threads" --shard "$MODEL:$a-$b"
    taskset -a -cp "$((i * threads))-$(((i + 1) * threads - 1))" "${pids[-1]}" >/dev/null
  done
}
wait_covered() { for _ in $(seq 600); do ctl "$1" shards 2>/dev/null | grep -q ", covered" && return 0; sleep 0.1; done; echo "not covered"; exit 1; }
ctl() { local p=$1; shift; "$BIN/swarmctl" --api "$(api "$p")" "$@"; }
# stop_all kills every peer started so far (the work dir stays).
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
  BOOT=""
  JOIN=""
}
