#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: once in a normal
# build with -Werror, once more under AddressSanitizer and UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
meson test -C build --print-errorlogs --num-processes 2
scripts/build.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  meson test -C build-asan --print-errorlogs --num-processes 2 --timeout-multiplier 3
echo "all tests passed"
