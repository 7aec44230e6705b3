#!/usr/bin/env bash
# The main job's throughput with a standby following the leader through the
# pool's replication log, against the same server on a pool without one:
# two pools, two servers (and a standby on the logged one), the trace
# replayed on each in turn, the order alternating by round, in one run.
#   bench/replication-cost.sh BUILD_DIR [ROUNDS] [LIMIT] [CLIENTS] [STANDBYS]
# STANDBYS: 1 (default) or 0 (the log alone: what the leader pays).
set -euo pipefail
build=${1:?build directory}; rounds=${2:-4}; limit=${3:-400}; clients=${4:-4}; standbys=${5:-1}
trace=$(dirname "$0")/traces/mooncake_conversation_trace.jsonl
work=$(mktemp -d /tmp/repl-cost.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -f /dev/shm/"$(basename "$work")".{plain,logged}.pool{,.index}
  rm -rf "$work"
}
trap cleanup EXIT
server() {  # POOL NAME [FLAGS...]
  local pool=$1 name=$2; shift 2
  "$build"/src/meta/maru-server --pool "$pool" --db "$work/$name.db" \
    --listen "unix://$work/$name.sock" --log-level warn --high-watermark 1 --low-watermark 1 "$@" &
  pids+=($!)
}
for kind in plain logged; do
  pool=/dev/shm/$(basename "$work").$kind.pool
  extra=(); [ $kind = logged ] && extra=(--log-size 64M)
  "$build"/tools/maructl mkpool "$pool" --size 1G "${extra[@]}" >/dev/null
  server "$pool" $kind
done
[ "$standbys" = 1 ] && server /dev/shm/$(basename "$work").logged.pool standby --standby
for kind in plain logged; do  # wait until each answers
  until "$build"/tests/direct_client "unix://$work/$kind.sock" count 0 /x >/dev/null 2>&1; do sleep 0.1; done
done
rate() {  # NAME ROUND -> requests a second
  "$build"/tools/maru-bench replay --server "unix://$work/$1.sock" --trace "$trace" \
    --clients "$clients" --limit "$limit" --dir "/r$2" --json | tail -1 |
    /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["requests_per_s"])'
}
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then p=$(rate plain "$r"); l=$(rate logged "$r")
  else l=$(rate logged "$r"); p=$(rate plain "$r"); fi
  echo "round $r: without log $p req/s, with log ($standbys standby) $l req/s, ratio $(/usr/bin/python3 -c "print(round($l/$p,3))")"
done
[ "$standbys" = 1 ] && echo "standby: $(cat "$work/standby.db/STANDBY")"
exit 0
