#!/usr/bin/env bash
# The main job: installs what is missing, builds, starts maru-server on an
# emulated pool in /dev/shm, lets several worker processes share KV chunks
# through it (prefill stores, decode reads in place), then shows what is
# cached, and lets instances of a tiny transformer reuse each other's KV
# (examples/tiny_llm). Leaves nothing behind.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build >/dev/null

work=$(mktemp -d /tmp/maru-demo.XXXXXX)
pool=/dev/shm/maru-demo-$$.pool
sock=unix://$work/maru.sock
server_pid=
cleanup() {
  mountpoint -q "$work/mnt" 2>/dev/null && { fusermount3 -u "$work/mnt" || fusermount3 -uz "$work/mnt"; }
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -f "$pool"
  rm -rf "$work"
}
trap cleanup EXIT

bin=build
echo "== format a 1 GiB pool in /dev/shm and start maru-server"
$bin/tools/maructl mkpool "$pool" --size 1G --label demo
$bin/src/meta/maru-server --pool "$pool" --db "$work/db" --listen "$sock" --log-level warn >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do
  $bin/tools/maructl df --server "$sock" >/dev/null 2>&1 && break
  sleep 0.05
done

chunk=$((16 << 20))  # 128 tokens of Llama-3.1-8B KV cache
echo
echo "== prefill: four workers compute prompts at once; two share a prompt"
pids=()
for prompt in chat-alpha chat-beta chat-alpha chat-gamma; do
  $bin/examples/kv_share "$sock" prefill llama-3.1-8b "$prompt" 6 $chunk &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

echo
echo "== decode: other workers find the prompts' chunks and read them in place"
for prompt in chat-alpha chat-beta chat-gamma chat-delta; do
  $bin/examples/kv_share "$sock" decode llama-3.1-8b "$prompt" 6 $chunk
done

echo
echo "== what is cached"
$bin/tools/maructl ls /llama-3.1-8b --server "$sock"

echo
echo "== the same chunks as files: mount -t fuse.maru"
mkdir "$work/mnt"
$bin/src/fs/maru-fuse "$sock" "$work/mnt"
ls -l "$work/mnt/llama-3.1-8b" | head -4
getfattr -d -m user.maru "$work/mnt/llama-3.1-8b/chat-alpha@0001" 2>/dev/null | sed 's/^/  /' || true

trace=${MARU_TRACE:-bench/traces/mooncake_conversation_trace.jsonl}
if [ -r "$trace" ]; then
  echo
  echo "== a production trace (Mooncake conversation): four inference instances share KV"
  echo "   each request looks up its cached prefix, reads it in place, stores what was missing"
  # --progress redraws in place on a terminal and prints one line in a log.
  echo "   replaying ${MARU_DEMO_LIMIT:+the first $MARU_DEMO_LIMIT requests of }$trace with 4 clients ..."
  $bin/tools/maru-bench replay --trace "$trace" --server "$sock" --clients 4 \
    --dir /mooncake --progress ${MARU_DEMO_LIMIT:+--limit "$MARU_DEMO_LIMIT"}
else
  echo
  echo "(no trace at $trace: set MARU_TRACE to replay one)"
fi
if [ -d "$work/mnt/mooncake" ]; then
  echo
  echo "   cached prefixes of the trace (each block names the block before it):"
  ls -l "$work/mnt/mooncake" | sed -n 2,6p || true
  for f in $(ls "$work/mnt/mooncake" | head -3); do
    parent=$(getfattr --only-values -n user.maru.parent "$work/mnt/mooncake/$f" 2>/dev/null || true)
    printf '   %s <- %s\n' "$f" "${parent:-(the first block of its prompt)}"
  done
fi

echo
echo "== a real model: tiny transformer instances (processes) share KV through Maru"
echo "   each turn goes to the next instance: it maps the blocks others stored, computes the rest"
if /usr/bin/python3 -c 'import torch' 2>/dev/null && [ -d "$bin/python/maru" ]; then
  PYTHONPATH=$bin/python /usr/bin/python3 examples/tiny_llm/demo.py --server "$sock" --dir /tiny_llm
  echo "   the model's blocks on the mount (one chunk per 32-token block, all layers' K and V):"
  ls -l "$work/mnt/tiny_llm" | sed -n 2,4p || true
else
  echo "(needs Debian's python3-torch and the maru package in $bin/python)"
fi
fusermount3 -u "$work/mnt"
echo
$bin/tools/maructl df --server "$sock"
echo
$bin/tools/maructl stats --server "$sock"
