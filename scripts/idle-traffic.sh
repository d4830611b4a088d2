#!/usr/bin/env bash
# What the control plane of an idle swarm costs each peer (issue 28, docs/scale.md):
# N swarmd daemons with no models, one private swarm over TCP on the loopback of a
# network namespace of this script's own (so only this swarm's packets count), all
# bootstrapped to the first. Once every daemon holds every other alive (or, past
# NEIGHBOURS + 1 daemons, a table as full as peer_table.neighbours) and WARMUP
# seconds have passed, it counts the bytes and packets sent on that loopback over
# SECONDS (whole frames: Ethernet, IP and TCP headers and TCP's pure ACKs included),
# and prints them per peer and second, with the daemons' mean resident memory.
#
#   scripts/idle-traffic.sh BIN_DIR N [SECONDS]    (root; BIN_DIR holds swarmd and swarmctl)
#
# Environment: WARMUP (s after settling, default 30: past the DHT's first lookups, as
# the simulation's SWARMSIM_WARMUP), SETTLE (s to wait for every daemon to see every
# other, default 120 + 2 a peer), WHITELIST (networks exempt from gossip's
# IP-colocation penalty, default 127.0.0.0/8: N daemons on one loopback address are
# otherwise penalised above 8 and graylisted at 20, and the figure is the penalty's;
# empty: none), NEIGHBOURS (the daemons' peer_table.neighbours, default 64, swarmd's),
# EXTRA (more swarmd flags).
set -euo pipefail

die() { echo "idle-traffic: $*" >&2; exit 1; }
[ $# -ge 2 ] && [ $# -le 3 ] || die "usage: $0 BIN_DIR N [SECONDS]"
BIN=$1 N=$2 S=${3:-30}
WARMUP=${WARMUP:-30}
[[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 2 ] && [ "$N" -le 1000 ] || die "N=$N: want a peer count from 2 to 1000"
[[ $S =~ ^[0-9]+$ ]] && [ "$S" -ge 1 ] || die "SECONDS=$S: want a whole number of seconds, at least 1"
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP=$WARMUP: want a whole number of seconds"
SETTLE=${SETTLE:-$((120 + 2 * N))}
NEIGHBOURS=${NEIGHBOURS:-64}
[[ $NEIGHBOURS =~ ^[0-9]+$ ]] && [ "$NEIGHBOURS" -ge 1 ] || die "NEIGHBOURS=$NEIGHBOURS: want the daemons' peer_table.neighbours, at least 1"
[[ $SETTLE =~ ^[0-9]+$ ]] || die "SETTLE=$SETTLE: want a whole number of seconds"
for b in swarmd swarmctl; do [ -x "$BIN/$b" ] || die "$BIN/$b: no such executable (go build -o $BIN/ ./cmd/swarmd ./cmd/swarmctl)"; done
[ "$(id -u)" -eq 0 ] || die "needs root (it makes a network namespace)"
command -v ip >/dev/null || die "needs ip (iproute2)"
command -v python3 >/dev/null || die "needs python3 (to read swarmctl's JSON)"
BIN=$(cd "$BIN" && pwd)

NS=idletraffic$$
W=$(mktemp -d /tmp/idle-traffic.XXXXXX)
cleanup() {
  local pids
  pids=$(ip netns pids "$NS" 2>/dev/null || true)
  [ -n "$pids" ] && kill $pids 2>/dev/null || true
  for _ in $(seq 50); do [ -z "$(ip netns pids "$NS" 2>/dev/null || true)" ] && break; sleep 0.1; done
  pids=$(ip netns pids "$NS" 2>/dev/null || true)
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
ip netns add "$NS" || die "cannot make network namespace $NS"
ip netns exec "$NS" ip link set lo up
in_ns() { ip netns exec "$NS" "$@"; }
ctl() { in_ns "$BIN/swarmctl" --api "127.0.0.1:$((7400 + $1))" "${@:2}"; }

# One private swarm whatever swarmd's default, gossip's colocation penalty off for loopback.
printf '/key/swarm/psk/1.0.0/\n/base16/\n%s\n' "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$W/swarm.key"
if [ -n "${WHITELIST-127.0.0.0/8}" ]; then
  python3 -c 'import json,sys; print(json.dumps({"gossip": {"ip_colocation_whitelist": sys.argv[1].split(",")}}))' \
    "${WHITELIST-127.0.0.0/8}" >"$W/config.json"
else
  echo '{}' >"$W/config.json"
fi
declare -a pid
start() { # start I [flags]
  local i=$1
  mkdir -p "$W/p$i"
  # shellcheck disable=SC2086 # EXTRA is a list of flags
  ip netns exec "$NS" "$BIN/swarmd" --data "$W/p$i" --config "$W/config.json" --listen "/ip4/127.0.0.1/tcp/$((4001 + i))" \
    --api "127.0.0.1:$((7400 + i))" --no-mdns --swarm-key "$W/swarm.key" --log-level warn "${@:2}" ${EXTRA:-} \
    >"$W/p$i.log" 2>&1 &
  pid[i]=$!
}
running() { # running I: dies naming the daemon and its log's end if it exited
  kill -0 "${pid[$1]}" 2>/dev/null && return 0
  echo "idle-traffic: daemon $1 exited; its log ends:" >&2
  tail -n 20 "$W/p$1.log" >&2
  exit 1
}

t0=$(date +%s.%N)
start 0
for _ in $(seq 300); do [ -s "$W/p0/api.addr" ] && break; running 0; sleep 0.1; done
[ -s "$W/p0/api.addr" ] || die "daemon 0 did not serve its API within 30 s (log: $(tail -n 5 "$W/p0.log"))"
ID=$(ctl 0 id --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["peer_id"])')
for i in $(seq 1 $((N - 1))); do start "$i" --bootstrap "/ip4/127.0.0.1/tcp/4001/p2p/$ID"; done
since() { python3 -c "import time; print(f'{time.time() - $t0:.1f}')"; }
deadline=$(($(date +%s) + SETTLE))
for i in $(seq 1 $((N - 1))); do
  until [ -s "$W/p$i/api.addr" ]; do
    running "$i"
    [ "$(date +%s)" -lt "$deadline" ] || die "after ${SETTLE} s, daemon $i does not serve its API"
    sleep 0.1
  done
done
up=$(since)

# Settled when every daemon holds every other alive, or as many as its bound of
# neighbours lets it (the first, every daemon's bootstrap peer, beyond them), as the
# simulation's Settle. One
# poller asks every daemon's API in turn (a swarmctl process a daemon took over a second
# on a loaded machine, which was the measurement's own granularity).
settled=$(in_ns python3 - "$N" "$((deadline - $(date +%s)))" "$t0" "$NEIGHBOURS" "${pid[@]}" <<'PY'
import json, os, sys, time, urllib.request
n, limit, t0, nb, pids = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), [int(p) for p in sys.argv[5:]]
want = min(n - 1, nb)
deadline, done = time.time() + limit, set()
def alive(i):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{7400 + i}/v1/swarm/peers", timeout=5) as r:
            return sum(1 for p in json.load(r).get("peers", []) if p.get("alive") and not p.get("self"))
    except Exception:
        return 0
while len(done) < n:
    for i in range(n):
        if i in done:
            continue
        try:
            os.kill(pids[i], 0)
        except OSError:
            sys.exit(f"daemon {i} exited (its log: p{i}.log)")
        if alive(i) >= want:
            done.add(i)
    if len(done) == n:
        break
    if time.time() > deadline:
        i = min(set(range(n)) - done)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{7400 + i}/v1/swarm/peers", timeout=5) as r:
                rows = [p for p in json.load(r).get("peers", []) if not p.get("self")]
        except Exception as e:
            rows = []
        dead = [f"{p['peer_id'][-8:]} (last seen {p.get('last_seen_ms_ago', 0) / 1000:.0f} s ago)" for p in rows if not p.get("alive")]
        sys.exit(f"after {limit:.0f} s, {n - len(done)} of {n} daemons do not hold {want} others alive: daemon {i} holds "
                 f"{alive(i)} of {n - 1} alive, {len(rows)} in its table; dead there: {', '.join(dead) or 'none'}")
    time.sleep(0.2)
print(f"{time.time() - t0:.1f}")
PY
) || {
  for i in $(seq 0 $((N - 1))); do running "$i"; done
  die "the swarm did not settle"
}
echo "N=$N settled: every daemon served its API ${up} s and held $((N - 1 < NEIGHBOURS ? N - 1 : NEIGHBOURS)) others alive ${settled} s after the first started"
sleep "$WARMUP"
read_lo() { in_ns cat "/sys/class/net/lo/statistics/$1"; }
b0=$(read_lo tx_bytes) p0=$(read_lo tx_packets)
sleep "$S"
b1=$(read_lo tx_bytes) p1=$(read_lo tx_packets)
for i in $(seq 0 $((N - 1))); do running "$i"; done
rss=0
for i in $(seq 0 $((N - 1))); do rss=$((rss + $(awk '/VmRSS/{print $2}' "/proc/${pid[i]}/status"))); done
python3 -c "
n, s = $N, $S
b, p = ($b1 - $b0) / s / n, ($p1 - $p0) / s / n
print(f'N={n} per-peer sent {b / 1024:.1f} KiB/s, {p:.0f} packets/s (loopback, idle swarm, {s} s after a {$WARMUP} s warm-up); RSS {$rss / n / 1024:.0f} MiB per daemon')"
