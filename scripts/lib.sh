# Shared by demo.sh and the bench scripts: loopback daemons in a temp dir,
# killed and removed on exit. Source it after `cd` to the repo root.
#   start_peer NAME [swarmd flags...]   (joins the swarm of the token $JOIN when set,
#                                        bootstraps to $BOOT when set; --threads 1
#                                        unless the flags say otherwise)
#   ctl NAME [swarmctl args...]
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
ctl() { local p=$1; shift; "$BIN/swarmctl" --api "$(api "$p")" "$@"; }
# stop_all kills every peer started so far (the work dir stays).
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
  BOOT=""
  JOIN=""
}
