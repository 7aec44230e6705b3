#!/usr/bin/env bash
# Requests that ask the server, through the mount: open+close of a sealed
# file (OPEN, FLUSH, RELEASE) and lookups of names that do not exist, one
# process; and lookups by 4 processes at once in one directory (plookup4:
# the kernel serializes them unless the mount granted parallel dirops). 3 s
# per cell, interleaved round by round, against one maru-server:
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
bench=meta
source bench/fio/mounts.sh
head -c 65536 /dev/zero >"${dir[ring]}/sealed"

# run MODE open|lookup|plookup4 -> operations per second (all processes)
run() {
  /usr/bin/python3 - "${dir[$1]}" "$2" <<'PY'
import os, sys, time
d, what = sys.argv[1], sys.argv[2]
procs = 4 if what == "plookup4" else 1
end = time.monotonic() + 3
def loop(salt):
    n = 0
    while time.monotonic() < end:
        if what == "open":
            os.close(os.open(d + "/sealed", os.O_RDONLY))
        else:
            try: os.stat("%s/missing-%s-%d" % (d, salt, n))
            except FileNotFoundError: pass
        n += 1
    return n
pipes = []
for _ in range(procs):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        os.write(w, str(loop(os.urandom(4).hex())).encode())
        os._exit(0)
    os.close(w)
    pipes.append(r)
total = 0
for r in pipes:
    total += int(os.read(r, 64) or b"0")
    os.close(r)
while True:
    try: os.wait()
    except ChildProcessError: break
print("%.0f" % (total / 3))
PY
}

echo "| round | workload | $(for m in $modes; do printf '%s | ' $m; done)"
for r in $(seq "$rounds"); do
  for w in open lookup plookup4; do
    line="| $r | $w |"
    for m in $modes; do line="$line $(run $m $w)/s |"; done
    echo "$line"
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
