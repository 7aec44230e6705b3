#!/usr/bin/env bash
# Requests that ask the server, through the mount: open+close of a sealed
# file (OPEN, FLUSH, RELEASE) and lookups of names that do not exist, for
# 3 s per cell, one process, interleaved round by round, against one
# maru-server:
#   ring      this build, default options (FUSE over io_uring; the ring's
#             threads hand these requests to the workers)
#   devfuse   this build, -o uring=0
#   prev      PREV_FUSE (default: /work/main/build/src/fs/maru-fuse), if it
#             exists, default options (its ring threads served them)
#   bench/fio/mount-meta.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
rounds=${2:-3}
prev=${PREV_FUSE:-/work/main/build/src/fs/maru-fuse}
scripts/build.sh "$build" >/dev/null

param=/sys/module/fuse/parameters/enable_uring
[ -w $param ] && echo Y >$param
echo "fuse.enable_uring: $(cat $param 2>/dev/null || echo absent)"

work=$(mktemp -d /tmp/maru-bench-meta.XXXXXX)
pool=/dev/shm/maru-bench-meta-$$.pool
sock=unix://$work/maru.sock
server_pid=
declare -A dir=([ring]=$work/ring [devfuse]=$work/devfuse [prev]=$work/prev)
cleanup() {
  for m in ring devfuse prev; do
    mountpoint -q "${dir[$m]}" 2>/dev/null && { fusermount3 -u "${dir[$m]}" || fusermount3 -uz "${dir[$m]}"; }
  done
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
  rm -f "$pool"
}
trap cleanup EXIT

$build/tools/maructl mkpool "$pool" --size 256M >/dev/null
$build/src/meta/maru-server --pool "$pool" --db "$work/db" --listen "$sock" --log-level warn >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do $build/tools/maructl df --server "$sock" >/dev/null 2>&1 && break; sleep 0.05; done

mount_one() {
  local name=$1 bin=$2
  shift 2
  mkdir "${dir[$name]}"
  "$bin" "$sock" "${dir[$name]}" -f "$@" >"$work/$name.log" 2>&1 &
  for _ in $(seq 200); do mountpoint -q "${dir[$name]}" && return; sleep 0.05; done
  echo "$name did not mount" >&2
  exit 1
}
mount_one ring "$build/src/fs/maru-fuse"
mount_one devfuse "$build/src/fs/maru-fuse" -o uring=0
modes="ring devfuse"
if [ -x "$prev" ]; then
  mount_one prev "$prev"
  modes="$modes prev"
fi
head -c 65536 /dev/zero >"${dir[ring]}/sealed"

# run MODE open|lookup -> operations per second
run() {
  /usr/bin/python3 - "${dir[$1]}" "$2" <<'PY'
import os, sys, time
d, what = sys.argv[1], sys.argv[2]
n, end, salt = 0, time.monotonic() + 3, os.urandom(4).hex()
while time.monotonic() < end:
    if what == "open":
        os.close(os.open(d + "/sealed", os.O_RDONLY))
    else:
        try: os.stat("%s/missing-%s-%d" % (d, salt, n))
        except FileNotFoundError: pass
    n += 1
print("%.0f" % (n / 3))
PY
}

echo "| round | workload | $(for m in $modes; do printf '%s | ' $m; done)"
for r in $(seq "$rounds"); do
  for w in open lookup; do
    line="| $r | $w |"
    for m in $modes; do line="$line $(run $m $w)/s |"; done
    echo "$line"
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
