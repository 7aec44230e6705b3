#!/usr/bin/env bash
# Metadata over TCP loopback, side by side in one run: a 1-key lookup
# (p50) and the lookups per second of 4 processes, through maru-server's
# fast lane over TCP, its gRPC over TCP (MARU_FAST_LANE=0), and the
# original Maru's Python/ZMQ server (its own RPC client, lookup_kv).
#   bench/tcp-vs-original.sh BUILD_DIR ORIGINAL_CHECKOUT [SECONDS]
# ORIGINAL_CHECKOUT: a checkout of the original (maru_server, maru_handler);
# it needs Debian's python3-zmq, python3-msgpack and python3-dacite. Its
# resource manager (C++, not built here) is stood in for by a listening
# socket: the server only checks that one answers, and a lookup never asks it.
set -euo pipefail
build=$(cd "$1" && pwd)
original=$(cd "$2" && pwd)
seconds=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/maru-tcp-bench.XXXXXX)
pool=/dev/shm/maru-tcp-bench-$$.pool
pids=()
original_pid=
cleanup() {
  set +e  # a killed child's status must not end the cleanup
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  # The original's server does not exit on SIGTERM while a client socket
  # lingers: it is killed outright.
  if [ -n "$original_pid" ]; then kill -KILL "$original_pid" 2>/dev/null || true; fi
  rm -f "$pool" "$pool.index"
  rm -rf "$work"
}
trap cleanup EXIT
py=/usr/bin/python3
port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- ours: a token client over TCP ----------------------------------------------
echo "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n') 0:0" > "$work/tokens"
chmod 600 "$work/tokens"
cut -d' ' -f1 "$work/tokens" > "$work/token"
"$build/tools/maructl" mkpool "$pool" --size 256M >/dev/null
tcp=tcp://127.0.0.1:$(port)
"$build/src/meta/maru-server" --pool "$pool" --db "$work/db" --listen "unix://$work/s.sock" \
  --listen "$tcp" --token-file "$work/tokens" 2>"$work/server.log" &
pids+=($!)
for _ in $(seq 200); do
  "$build/tools/maructl" df --server "unix://$work/s.sock" >/dev/null 2>&1 && break
  sleep 0.05
done
ours() {  # ours LABEL [ENV...]: maru-bench lookup, 1 key, the message rows
  local label=$1
  shift
  env MARU_TOKEN_FILE="$work/token" "$@" "$build/tools/maru-bench" lookup --server "$tcp" \
    --keys 1 --threads 1 --processes 4 --seconds "$seconds" >"$work/$label.out" 2>&1 ||
    { cat "$work/$label.out"; exit 1; }
}
ours lane
ours grpc MARU_FAST_LANE=0
fast_tcp=$("$build/tools/maructl" stats --server "unix://$work/s.sock" | awk '$1=="FastLaneTcp"{print $2}')

# --- the original's server ---------------------------------------------------------
rm_port=$(port)
$py -c "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',$rm_port)); s.listen(64); time.sleep(1e6)" &
pids+=($!)
orig_port=$(port)
PYTHONPATH=$original $py -m maru_server --host 127.0.0.1 --port "$orig_port" \
  --rm-address "127.0.0.1:$rm_port" --log-level WARNING 2>"$work/original.log" &
original_pid=$!
sleep 0.2
for _ in $(seq 100); do
  $py -c "import socket; socket.create_connection(('127.0.0.1',$orig_port)).close()" 2>/dev/null && break
  sleep 0.1
done
PYTHONPATH=$original $py "$here/original_lookup.py" "tcp://127.0.0.1:$orig_port" \
  --seconds "$seconds" --processes 4 >"$work/original.out" 2>&1 ||
  { cat "$work/original.out" "$work/original.log"; exit 1; }

echo "== maru-bench lookup over TCP, fast lane (index / message columns) =="
cat "$work/lane.out"
echo "== the same with MARU_FAST_LANE=0 (gRPC over TCP) =="
cat "$work/grpc.out"
echo "== the original's server =="
grep original "$work/original.out"
echo "requests the server served on the TCP fast lane: ${fast_tcp:-0}"
