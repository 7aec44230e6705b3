#!/usr/bin/env bash
# Builds the multi-threaded tests with ThreadSanitizer (gcc) in build-tsan
# and runs them; every process they start (maru-server, maru-fuse,
# direct_client, ...) is instrumented too. Reports go to
# build-tsan/tsan-logs/report.PID, not to the processes' stderr, so that
# tests reading a server's log are not disturbed; the script fails if any
# report is left after tests/tsan.supp (reports inside the uninstrumented
# gRPC, protobuf, Abseil, RocksDB and libfuse libraries only).
#   scripts/tsan.sh [TEST...]      (default: the tests below)
#
# Not run: the python and model suites (the extension would load into an
# uninstrumented /usr/bin/python3, which TSan cannot run), rdma (UCX is
# uninstrumented and its progress threads would be all false reports), ops
# and suite (shell scripts over the same binaries as lifecycle and fuse).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-tsan
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(engine frame lease_table identity direct batch lifecycle fuse)
if [ ! -f "$dir/build.ninja" ]; then
  # No -Werror: gcc warns (-Wtsan) about atomic_thread_fence in library headers.
  # -O1 -g1: a much lighter build than -O2 -g (it is a whole second tree),
  # and reports keep their file:line.
  meson setup "$dir" -Doptimization=1 -Ddebug=false -Dcpp_args=-g1 -Dc_args=-g1 \
    -Db_sanitize=thread -Db_lundef=false >/dev/null
fi
targets=(maru-server maructl maru-fuse maru-bench direct_client probe_client)
for t in "${tests[@]}"; do targets+=("${t}_test"); done
meson compile -C "$dir" "${targets[@]}" >/dev/null
logs=$PWD/$dir/tsan-logs
rm -rf "$logs"
mkdir -p "$logs"
set +e
TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp:log_path=$logs/report:exitcode=0:halt_on_error=0:second_deadlock_stack=1" \
  meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 1 --timeout-multiplier 4 \
  "${tests[@]}"
rc=$?
set -e
reports=$(cat "$logs"/report.* 2>/dev/null | grep -c '^WARNING: ThreadSanitizer' || true)
echo "tsan: $reports report(s) in $logs"
[ "$reports" -eq 0 ] || rc=1
exit $rc
