#!/usr/bin/env bash
# Builds the multi-threaded tests with ThreadSanitizer (gcc) in build-tsan
# and runs them; every process they start (maru-server, maru-fuse,
# direct_client, ...) is instrumented too. Reports go to
# build-tsan/tsan-logs/report.PID, not to the processes' stderr, so that
# tests reading a server's log are not disturbed; the script fails if a
# report left after tests/tsan.supp has a racing access innermost in Maru's
# code (scripts/tsan_triage.py), or if a test fails.
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
[ ${#tests[@]} -gt 0 ] || tests=(engine frame lease_table identity direct batch layerwise index lifecycle fuse)
# src/proto/protobuf_tsan_abi.h, read first by every C++ file: protobuf's
# map fields must have the layout of the uninstrumented libprotobuf (it
# explains why; without it maru-server crashed freeing each Stats reply).
cpp_args="['-g1','-include','$PWD/src/proto/protobuf_tsan_abi.h']"
if [ ! -f "$dir/build.ninja" ]; then
  # No -Werror: gcc warns (-Wtsan) about atomic_thread_fence in library headers.
  # -O1 -g1: a much lighter build than -O2 -g (it is a whole second tree),
  # and reports keep their file:line.
  meson setup "$dir" -Doptimization=1 -Ddebug=false -Dcpp_args="$cpp_args" -Dc_args=-g1 \
    -Db_sanitize=thread -Db_lundef=false >/dev/null
elif ! grep -q protobuf_tsan_abi.h "$dir/build.ninja"; then
  meson configure "$dir" -Dcpp_args="$cpp_args" >/dev/null  # a tree set up before it
fi
targets=(maru-server maructl maru-fuse maru-bench direct_client probe_client)
for t in "${tests[@]}"; do targets+=("${t}_test"); done
meson compile -C "$dir" "${targets[@]}" >/dev/null
logs=$PWD/$dir/tsan-logs
rm -rf "$logs"
mkdir -p "$logs"
set +e
# libmaru_direct loads UCX (the remote path), whose libucm hooks madvise();
# glibc calls it as a thread exits, after TSan has torn down that thread's
# state: every client process crashed. The hooks are for UCX's registration
# cache, which nothing here uses.
export UCX_MEM_MMAP_HOOK_MODE=none
TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp:log_path=$logs/report:log_exe_name=1:exitcode=0:halt_on_error=0:second_deadlock_stack=1" \
  meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 1 --timeout-multiplier 4 \
  "${tests[@]}"
rc=$?
set -e
# Reports left after the suppressions are sorted: one whose racing access
# is innermost in Maru's code fails the run; the rest (inside gRPC and the
# other uninstrumented libraries, or gRPC header code inlined into ours)
# are counted only.
/usr/bin/python3 scripts/tsan_triage.py "$logs" || rc=1
echo "tsan: reports in $logs"
exit $rc
