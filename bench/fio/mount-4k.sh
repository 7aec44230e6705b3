#!/usr/bin/env bash
# One fio job (psync) on tmpfs and on three mounts of one maru-server,
# interleaved round by round: 4 KiB random reads and 1 MiB sequential reads
# of a 256 MiB file, cold (invalidate=1; the default mount keeps sealed
# files out of the page cache anyway). Also the daemon's CPU time per I/O
# (its /proc utime+stime over fio's I/O count).
# The mounts (ring, devfuse, prev): bench/fio/mounts.sh.
#   bench/fio/mount-4k.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
rounds=${2:-3}
bench=4k
pool_size=1G
remove_tmpfs() { if [ -n "${tmpfs:-}" ]; then rm -rf "$tmpfs"; fi; }
extra_cleanup=remove_tmpfs
source bench/fio/mounts.sh
tmpfs=$(mktemp -d /dev/shm/maru-bench-4k-tmpfs.XXXXXX)
dir[tmpfs]=$tmpfs
modes="tmpfs $modes"

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
