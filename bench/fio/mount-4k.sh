#!/usr/bin/env bash
# One fio job (psync) on tmpfs and on three mounts of one maru-server,
# interleaved round by round: 4 KiB random reads and 1 MiB sequential reads
# of a 256 MiB file, cold (invalidate=1; the default mount keeps sealed
# files out of the page cache anyway). Also the daemon's CPU time per I/O
# (its /proc utime+stime over fio's I/O count).
#   ring      this build, default options (FUSE over io_uring where the
#             kernel offers it: this script turns fuse.enable_uring on)
#   devfuse   this build, -o uring=0 (/dev/fuse, as before)
#   prev      PREV_FUSE (default: /work/main/build/src/fs/maru-fuse), if it exists
#   bench/fio/mount-4k.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
rounds=${2:-3}
prev=${PREV_FUSE:-/work/main/build/src/fs/maru-fuse}
scripts/build.sh "$build" >/dev/null

param=/sys/module/fuse/parameters/enable_uring
[ -w $param ] && echo Y >$param
echo "fuse.enable_uring: $(cat $param 2>/dev/null || echo absent)"

work=$(mktemp -d /tmp/maru-bench-4k.XXXXXX)
pool=/dev/shm/maru-bench-4k-$$.pool
tmpfs=$(mktemp -d /dev/shm/maru-bench-4k-tmpfs.XXXXXX)
sock=unix://$work/maru.sock
server_pid=
declare -A dir=([tmpfs]=$tmpfs [ring]=$work/ring [devfuse]=$work/devfuse [prev]=$work/prev)
declare -A pid=()
cleanup() {
  for m in ring devfuse prev; do
    mountpoint -q "${dir[$m]}" 2>/dev/null && { fusermount3 -u "${dir[$m]}" || fusermount3 -uz "${dir[$m]}"; }
  done
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$tmpfs" "$work"
  rm -f "$pool"
}
trap cleanup EXIT

$build/tools/maructl mkpool "$pool" --size 1G >/dev/null
$build/src/meta/maru-server --pool "$pool" --db "$work/db" --listen "$sock" --log-level warn >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do $build/tools/maructl df --server "$sock" >/dev/null 2>&1 && break; sleep 0.05; done

# mount NAME BINARY [OPTIONS...]: in the foreground, so that $! is the daemon.
mount_one() {
  local name=$1 bin=$2
  shift 2
  mkdir "${dir[$name]}"
  "$bin" "$sock" "${dir[$name]}" -f "$@" >"$work/$name.log" 2>&1 &
  pid[$name]=$!
  for _ in $(seq 200); do mountpoint -q "${dir[$name]}" && return; sleep 0.05; done
  echo "$name did not mount" >&2
  exit 1
}
mount_one ring "$build/src/fs/maru-fuse"
mount_one devfuse "$build/src/fs/maru-fuse" -o uring=0
modes="tmpfs ring devfuse"
if [ -x "$prev" ]; then
  mount_one prev "$prev"
  modes="$modes prev"
fi

# The file, once for the mounts (one namespace) and once on tmpfs.
fio --name=lay --filename="${dir[ring]}/data" --rw=write --bs=1M --size=256M --ioengine=psync >/dev/null
fio --name=lay --filename="$tmpfs/data" --rw=write --bs=1M --size=256M --ioengine=psync >/dev/null

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# run MODE BS RW -> "IOPS us-per-io"
run() {
  local m=$1 p=${pid[$1]:-} c0=0 c1=0 out
  [ -n "$p" ] && c0=$(cpu_ticks "$p")
  out=$(fio --name=r --filename="${dir[$m]}/data" --rw="$3" --bs="$2" --ioengine=psync --size=256M \
    --runtime=5 --time_based --invalidate=1 --output-format=json |
    jq -r '.jobs[0].read | "\(.iops) \(.total_ios)"')
  [ -n "$p" ] && c1=$(cpu_ticks "$p")
  read -r iops ios <<<"$out"
  echo "$iops $(echo "($c1 - $c0) * 1000000 / $(getconf CLK_TCK) / $ios" | bc -l)"
}

echo "| round | workload | tmpfs | $(for m in ${modes#tmpfs }; do printf '%s (×tmpfs, daemon µs/I/O) | ' $m; done)"
for r in $(seq "$rounds"); do
  for w in "4k randread" "1M read"; do
    read -r t_iops _ < <(run tmpfs $w)
    line="| $r | $w | $(printf '%.0f IOPS' "$t_iops") |"
    for m in ${modes#tmpfs }; do
      read -r iops us < <(run $m $w)
      line="$line $(printf '%.0f IOPS (%.3f×, %.1f µs)' "$iops" "$(echo "$iops / $t_iops" | bc -l)" "$us") |"
    done
    echo "$line"
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
