#!/usr/bin/env bash
# The core benchmarks, side by side in one run: chunk store/load against
# memcpy, batched prefix lookups, the same loads through maru-agent (UCX over
# TCP on loopback), and the Mooncake trace replay under lru and prefix.
#   scripts/bench-core.sh [BUILD_DIR] [TRACE]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
trace=${2:-bench/traces/mooncake_conversation_trace.jsonl}
scripts/install-deps.sh
scripts/build.sh "$build" >/dev/null

work=$(mktemp -d /tmp/maru-bench.XXXXXX)
pids=()
pools=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -f "${pools[@]}"
  rm -rf "$work"
}
trap cleanup EXIT

# start_server NAME SIZE [ARGS...]: sets $addr
start_server() {
  local name=$1 size=$2
  shift 2
  local pool=/dev/shm/maru-bench-$name-$$.pool
  pools+=("$pool")
  $build/tools/maructl mkpool "$pool" --size "$size" >/dev/null
  $build/src/meta/maru-server --pool "$pool" --db "$work/$name.db" --listen "unix://$work/$name.sock" \
    --log-level warn "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  addr=unix://$work/$name.sock
  for _ in $(seq 200); do $build/tools/maructl df --server "$addr" >/dev/null 2>&1 && break; sleep 0.05; done
}

echo "## chunks (32 MiB) and lookups (128 keys)"
start_server core 4G
$build/tools/maru-bench chunks --server "$addr" --iterations 60
$build/tools/maru-bench lookup --server "$addr" --keys 128 --threads 1,4 --seconds 5

echo
echo "## the same chunks through maru-agent (UCX over TCP, loopback)"
export UCX_TLS=tcp
$build/src/rdma/maru-agent --pool "${pools[0]}" --server "$addr" --listen tcp://127.0.0.1:0 --log-level warn \
  >"$work/agent.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do $build/tools/maructl df --json --server "$addr" | grep -q '"agent"' && break; sleep 0.05; done
MARU_DATA=remote $build/tools/maru-bench chunks --server "$addr" --iterations 20 --dir /maru-bench/remote

if [ -f "$trace" ]; then
  for policy in frequency lru prefix; do
    echo
    echo "## replay, eviction $policy"
    start_server "replay-$policy" 1G --eviction "$policy" --high-watermark 1 --low-watermark 1
    $build/tools/maru-bench replay --trace "$trace" --server "$addr" --clients 4 --policy "$policy" --json
  done
  echo
  echo "## replay, eviction lru, one client (for the comparison with the offline LRU)"
  start_server replay-lru1 1G --eviction lru --high-watermark 1 --low-watermark 1
  $build/tools/maru-bench replay --trace "$trace" --server "$addr" --clients 1 --json
fi
