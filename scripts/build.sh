#!/usr/bin/env bash
# Configures (once) and builds Maru in a build directory, reusing it later.
#   scripts/build.sh [BUILD_DIR] [MESON_SETUP_OPTIONS...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" --buildtype=debugoptimized -Dwerror=true "$@" >/dev/null
fi
meson compile -C "$dir"
