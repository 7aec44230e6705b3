# Sourced by the mount benchmarks (mount-4k.sh, mount-meta.sh) after they set
# `build` and `bench` (a name for temporary files): one maru-server on a
# fresh pool of ${pool_size:-256M}, and maru-fuse mounted from it as
#   ring      this build, default options (FUSE over io_uring where the
#             kernel offers it: fuse.enable_uring is turned on here)
#   devfuse   this build, -o uring=0 (/dev/fuse)
#   nopoll    this build, -o idle_poll=0 (idle CPUs sleep while it serves)
#   prev      PREV_FUSE (default: /work/main/build/src/fs/maru-fuse), if it
#             exists, default options
# Leaves `work`, `dir[MODE]`, `pid[MODE]` (the daemons) and `modes`; at exit
# unmounts, stops the server and removes everything, and also runs
# `extra_cleanup` if the script set one.
prev=${PREV_FUSE:-/work/main/build/src/fs/maru-fuse}
scripts/build.sh "$build" >/dev/null

param=/sys/module/fuse/parameters/enable_uring
[ -w $param ] && echo Y >$param
echo "fuse.enable_uring: $(cat $param 2>/dev/null || echo absent)"

work=$(mktemp -d /tmp/maru-bench-$bench.XXXXXX)
pool=/dev/shm/maru-bench-$bench-$$.pool
sock=unix://$work/maru.sock
server_pid=
extra_cleanup=${extra_cleanup:-}
declare -A dir=([ring]=$work/ring [devfuse]=$work/devfuse [nopoll]=$work/nopoll [prev]=$work/prev)
declare -A pid=()
cleanup() {
  for m in ring devfuse nopoll prev; do
    mountpoint -q "${dir[$m]}" 2>/dev/null && { fusermount3 -u "${dir[$m]}" || fusermount3 -uz "${dir[$m]}"; }
  done
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
  rm -f "$pool"
  if [ -n "$extra_cleanup" ]; then $extra_cleanup; fi
}
trap cleanup EXIT

$build/tools/maructl mkpool "$pool" --size "${pool_size:-256M}" >/dev/null
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
mount_one nopoll "$build/src/fs/maru-fuse" -o idle_poll=0
modes="ring devfuse nopoll"
if [ -x "$prev" ]; then
  mount_one prev "$prev"
  modes="$modes prev"
fi
