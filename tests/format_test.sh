#!/usr/bin/env bash
# The sources are formatted as .clang-format says.
set -euo pipefail
cd "$1"
files=$(git ls-files 'src/*.cc' 'src/*.h' 'libmaru_direct/*.cc' 'libmaru_direct/*.h' 'tools/*.cc' \
        'tools/*.h' 'tests/*.cc' 'tests/*.h' 'examples/*.c' 2>/dev/null || true)
[ -n "$files" ] || files=$(find src libmaru_direct tools tests examples -name '*.cc' -o -name '*.h' -o -name '*.c')
clang-format --dry-run --Werror $files
