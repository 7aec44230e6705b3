#!/usr/bin/env bash
# Lookups through the index in the pool's region, from a second host, side
# by side with the message path and with the server's own host, in one run.
# Two hosts (network namespaces on one bridge, as scripts/run-hosts.sh makes
# them) map one pool file in /dev/shm; maru-server runs on host 0, at a Unix
# socket and at TCP with a token. On each host maru-bench measures 1-key
# open + release (`ops`) and a 128-key prefix lookup (`lookup`) through the
# index and by message: host 0 over its Unix socket, host 1 over TCP.
# Needs root (ip netns, nsenter). Leaves nothing behind.
#
#   scripts/bench-pool-index.sh [SECONDS]   (each run; default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "bench-pool-index.sh: needs root (network namespaces)" >&2
  exit 1
fi
bin=$PWD/build
seconds=${1:-3}
work=$(mktemp -d /tmp/maru-pool-index.XXXXXX)
pool=/dev/shm/maru-pool-index-$$.pool
server_pid=
. scripts/lib/hosts.sh
cleanup() {
  set +e
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  hosts_down
  rm -f "$pool" "$pool.index"
  rm -rf "$work"
}
trap cleanup EXIT
hosts_up pix 2 10.213.7

# mkpool's default --index-size: the region the server's defaults need.
"$bin"/tools/maructl mkpool "$pool" --size 1G --label pool-index >/dev/null
tcp=tcp://${ips[0]}:7072
unix=unix://$work/maru.sock
echo "pool-index-bench-$RANDOM$RANDOM$RANDOM 0:0" >"$work/tokens"
chmod 600 "$work/tokens"
cut -d' ' -f1 "$work/tokens" >"$work/token"
export MARU_TOKEN_FILE=$work/token
nsenter -t "${holders[0]}" -n -m "$bin"/src/meta/maru-server --pool "$pool" --db "$work/db" \
  --listen "$unix" --listen "$tcp" --token-file "$work/tokens" --log-level warn \
  >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 400); do
  on 1 "$bin"/tools/maructl df --server "$tcp" >/dev/null 2>&1 && break
  sleep 0.05
done
on 1 "$bin"/tools/maructl df --server "$tcp" >/dev/null || { cat "$work/server.log"; exit 1; }

run() {  # HOST NAME ADDRESS BENCH ARGS...
  local h=$1 name=$2 addr=$3
  shift 3
  on "$h" "$bin"/tools/maru-bench "$@" --server "$addr" --threads 1 --seconds "$seconds" \
    --json >"$work/$name.json"
}
# Taking turns, so that both hosts see the same machine.
run 0 ops0 "$unix" ops --processes 1
run 1 ops1 "$tcp" ops --processes 1
run 0 look0 "$unix" lookup --keys 128 --processes 0
run 1 look1 "$tcp" lookup --keys 128 --processes 0

/usr/bin/python3 - "$work" <<'EOF'
import json, sys
w = sys.argv[1]
def p50(name, path):
    doc = json.loads(open(f"{w}/{name}.json").read().strip().splitlines()[-1])
    return doc["runs"][0][f"{path}_p50_us"]
print("| p50, µs | host 0 (Unix) index | host 0 message | host 1 (TCP) index | host 1 message "
      "| host 1: index ÷ message | host 1 index ÷ host 0 index |")
print("|---|---|---|---|---|---|---|")
for label, a, b in (("1-key open + release", "ops0", "ops1"),
                    ("128-key prefix lookup", "look0", "look1")):
    i0, m0, i1, m1 = p50(a, "index"), p50(a, "message"), p50(b, "index"), p50(b, "message")
    print(f"| {label} | {i0:.2f} | {m0:.1f} | {i1:.2f} | {m1:.1f} | {i1 / m1:.4f}× "
          f"({m1 / i1:.0f}× faster) | {i1 / i0:.2f}× |")
EOF
