#!/usr/bin/env bash
# The main job (the trace replay, then the tiny model) from three hosts
# sharing one pool, emulated on
# this machine: each host is a network namespace with its own address on a
# private bridge and a mount namespace of its own, and all of them map the
# one pool file in /dev/shm, as hosts behind a CXL switch map one device.
# maru-server runs on host 0 and listens on TCP (with a token) at host 0's
# address; every host mounts fuse.maru at the same path (each sees its own
# mount only) and replays the trace with its own clients over the network,
# into one directory, so that the blocks one host stores are the others'
# hits. Needs root (ip netns, nsenter). Leaves nothing behind.
#
#   scripts/run-hosts.sh [TRACE]
#     MARU_HOSTS_LIMIT   requests each host replays (default 300; 0: all)
#     MARU_HOSTS_CLIENTS client processes per host (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "run-hosts.sh: needs root (network and mount namespaces)" >&2
  exit 1
fi
scripts/build.sh build >/dev/null
bin=$PWD/build
trace=${1:-${MARU_TRACE:-bench/traces/mooncake_conversation_trace.jsonl}}
limit=${MARU_HOSTS_LIMIT:-300}
clients=${MARU_HOSTS_CLIENTS:-2}
[ -r "$trace" ] || { echo "run-hosts.sh: no trace at $trace" >&2; exit 1; }
trace=$(readlink -f "$trace")  # a host's commands start in its root directory

work=$(mktemp -d /tmp/maru-hosts.XXXXXX)
pool=/dev/shm/maru-hosts-$$.pool
server_pid=
. scripts/lib/hosts.sh
cleanup() {
  set +e
  for i in "${!holders[@]}"; do
    nsenter -t "${holders[$i]}" -m sh -c "mountpoint -q $work/mnt && fusermount3 -u $work/mnt"
  done
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  hosts_down
  rm -f "$pool" "$pool.index"
  rm -rf "$work"
}
trap cleanup EXIT

echo "== three hosts: network namespaces on one bridge, each with its own mount namespace"
hosts_up hosts 3 10.213.0
for i in 0 1 2; do
  echo "   host $i: ${ips[$i]}, namespaces held by pid ${holders[$i]} (nsenter -t ${holders[$i]} -n -m CMD)"
done

echo
echo "== a 1 GiB pool in /dev/shm; maru-server on host 0 at tcp://${ips[0]}:7070"
"$bin"/tools/maructl mkpool "$pool" --size 1G --label hosts >/dev/null
addr=tcp://${ips[0]}:7070
echo "hosts-demo-$RANDOM$RANDOM$RANDOM 0:0" >"$work/tokens"
chmod 600 "$work/tokens"
cut -d' ' -f1 "$work/tokens" >"$work/token"
export MARU_TOKEN_FILE=$work/token
# Not through on(): a function in the background is a subshell, and $!
# would be its pid, not the server's (nsenter becomes the server).
nsenter -t "${holders[0]}" -n -m "$bin"/src/meta/maru-server --pool "$pool" --db "$work/db" \
  --listen "unix://$work/maru.sock" --listen "$addr" --token-file "$work/tokens" \
  --log-level warn >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 400); do
  on 1 "$bin"/tools/maructl df --server "$addr" >/dev/null 2>&1 && break
  sleep 0.05
done
on 1 "$bin"/tools/maructl df --server "$addr" >/dev/null || { cat "$work/server.log"; exit 1; }

echo
echo "== each host mounts fuse.maru at $work/mnt (the machine itself sees no mount there)"
mkdir "$work/mnt"
for i in 0 1 2; do on "$i" "$bin"/src/fs/maru-fuse "$addr" "$work/mnt"; done
mountpoint -q "$work/mnt" && { echo "the machine sees a host's mount" >&2; exit 1; }

echo
echo "== the trace from all three hosts at once, $clients clients each, into /mooncake"
echo "   ${limit/#0/all} requests of $trace per host"
pids=()
for i in 0 1 2; do
  on "$i" "$bin"/tools/maru-bench replay --trace "$trace" --server "$addr" --clients "$clients" \
    --dir /mooncake --limit "$limit" >"$work/replay-$i.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in 0 1 2; do
  wait "${pids[$i]}" || rc=1
  echo "-- host $i (${ips[$i]})"
  sed 's/^/   /' "$work/replay-$i.log"
done
[ $rc = 0 ] || exit 1

echo
echo "== the tiny model: instance i on host i, each turn served by the next host"
echo "   a host maps in place the blocks the other hosts stored, computes the rest"
if /usr/bin/python3 -c 'import torch' 2>/dev/null && [ -d "$bin/python/maru" ]; then
  PYTHONPATH=$bin/python /usr/bin/python3 examples/tiny_llm/demo.py --server "$addr" \
    --dir /tiny_llm_hosts --host "nsenter -t ${holders[0]} -n -m" \
    --host "nsenter -t ${holders[1]} -n -m" --host "nsenter -t ${holders[2]} -n -m"
else
  echo "(needs Debian's python3-torch and the maru package in $bin/python)"
fi

echo
echo "== what host 2 sees through its own mount"
on 2 ls -l "$work/mnt/mooncake" | sed -n 2,4p
echo
on 1 "$bin"/tools/maructl df --server "$addr"
