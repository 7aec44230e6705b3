#!/usr/bin/env bash
# fio on the Maru mount and on tmpfs (/dev/shm), side by side in one run:
# sequential write and read with 1 MiB blocks, random read with 4 KiB
# blocks, numjobs 1 and 4, on the default mount (sealed files read around
# the page cache) and on one with -o cached_reads (through it, as before
# 2026-12). Prints a markdown table of ratios to tmpfs.
#   scripts/bench-fuse.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
scripts/install-deps.sh
scripts/build.sh "$build" >/dev/null

work=$(mktemp -d /tmp/maru-bench-fuse.XXXXXX)
pool=/dev/shm/maru-bench-fuse-$$.pool
tmpfs=$(mktemp -d /dev/shm/maru-bench-tmpfs.XXXXXX)
sock=unix://$work/maru.sock
server_pid=
cleanup() {
  for m in "$work/mnt" "$work/cached"; do
    mountpoint -q "$m" 2>/dev/null && { fusermount3 -u "$m" || fusermount3 -uz "$m"; }
  done
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$tmpfs" "$work"
  rm -f "$pool"
}
trap cleanup EXIT

$build/tools/maructl mkpool "$pool" --size 3G >/dev/null
$build/src/meta/maru-server --pool "$pool" --db "$work/db" --listen "$sock" --log-level warn >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do $build/tools/maructl df --server "$sock" >/dev/null 2>&1 && break; sleep 0.05; done
mkdir "$work/mnt" "$work/cached"
$build/src/fs/maru-fuse "$sock" "$work/mnt"
$build/src/fs/maru-fuse "$sock" "$work/cached" -o cached_reads

# fio_run DIR NUMJOBS SECTION -> "MB/s IOPS"
fio_run() {
  DIR=$1 NUMJOBS=$2 fio bench/fio/maru.fio --section="$3" --output-format=json |
    jq -r '.jobs[0] | if .write.bw_bytes > 0 then "\(.write.bw_bytes/1e6) \(.write.iops)" else "\(.read.bw_bytes/1e6) \(.read.iops)" end'
}

echo "| workload | numjobs | tmpfs | maru mount | ratio | maru -o cached_reads | ratio |"
echo "|---|---|---|---|---|---|---|"
for jobs in 1 4; do
  for section in seqwrite seqread warmread randread; do
    read -r t_bw t_iops < <(fio_run "$tmpfs" $jobs $section)
    read -r m_bw m_iops < <(fio_run "$work/mnt" $jobs $section)
    read -r d_bw d_iops < <(fio_run "$work/cached" $jobs $section)
    if [ $section = randread ]; then
      printf "| %s 4k | %d | %.0f IOPS | %.0f IOPS | %.3f | %.0f IOPS | %.3f |\n" $section $jobs \
        "$t_iops" "$m_iops" "$(echo "$m_iops / $t_iops" | bc -l)" "$d_iops" "$(echo "$d_iops / $t_iops" | bc -l)"
    else
      printf "| %s 1M | %d | %.0f MB/s | %.0f MB/s | %.3f | %.0f MB/s | %.3f |\n" $section $jobs \
        "$t_bw" "$m_bw" "$(echo "$m_bw / $t_bw" | bc -l)" "$d_bw" "$(echo "$d_bw / $t_bw" | bc -l)"
    fi
  done
  rm -f "$tmpfs"/* "$work/mnt"/*
done
