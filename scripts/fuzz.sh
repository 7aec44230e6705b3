#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz) with clang, ASan and UBSan,
# and runs each for SECONDS (default 60) from its seed corpus in
# tests/fuzz/corpus/NAME. New inputs go to build-fuzz/corpus/NAME (the seeds
# are not modified); crashes are left in build-fuzz/crashes/NAME.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(superblock path frame record engine fastlane)
dir=build-fuzz
if [ ! -f "$dir/build.ninja" ]; then
  CC=clang CXX=clang++ meson setup "$dir" --buildtype=debugoptimized -Dfuzzing=true \
    -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
meson compile -C "$dir" $(printf 'fuzz_%s ' "${targets[@]}") >/dev/null
failed=0
printf '%-12s %12s %10s %8s %s\n' target execs exec/s corpus crashes
for t in "${targets[@]}"; do
  corpus=$dir/corpus/$t crashes=$dir/crashes/$t
  mkdir -p "$corpus" "$crashes"
  log=$dir/fuzz_$t.log
  set +e
  ASAN_OPTIONS=abort_on_error=1:detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$dir/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
    -rss_limit_mb=4096 -artifact_prefix="$crashes/" "$corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  found=$(find "$crashes" -type f | wc -l)
  printf '%-12s %12s %10s %8s %s\n' "$t" "${execs:-?}" "${rate:-?}" "$(ls "$corpus" | wc -l)" "$found"
  if [ $rc -ne 0 ] || [ "$found" -ne 0 ]; then
    failed=1
    echo "fuzz: $t failed (exit $rc); see $log and $crashes" >&2
  fi
done
exit $failed
