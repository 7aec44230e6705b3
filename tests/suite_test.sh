#!/usr/bin/env bash
# maru-bench suite at its smallest: it brings up a node, redis-server and an
# agent, measures everything side by side, writes the Markdown section and the
# plot, and leaves nothing behind (no mount, no pool, no work directory).
#   tests/suite_test.sh BUILD_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

out=$(mktemp -d /tmp/maru-suite-test.XXXXXX)
trap 'rm -rf "$out"' EXIT

# A small trace in the Mooncake format: conversations that grow turn by turn.
for i in $(seq 0 99); do
  conv=$((i % 7)) turn=$((i / 7))
  ids=$(seq -s, $((conv * 1000)) $((conv * 1000 + turn + 1)))
  echo "{\"timestamp\": $i, \"input_length\": 512, \"output_length\": 10, \"hash_ids\": [$ids]}"
done >"$out/trace.jsonl"

echo "# an earlier section is replaced, the rest kept" >"$out/benchmarks.md"
printf '<!-- maru-bench suite: begin -->\nold\n<!-- maru-bench suite: end -->\ntail\n' >>"$out/benchmarks.md"

"$build/tools/maru-bench" suite --tiny --out "$out" --trace "$out/trace.jsonl" >"$out/stdout" 2>"$out/stderr"
rc=$?
[ $rc -eq 0 ] || fail "suite exited $rc: $(tail -5 "$out/stderr")"
md=$(cat "$out/benchmarks.md")
for want in "| memcpy between cached buffers |" "Store ≥ 0.9× its copy: **" "| load, 2 consumers (all together) |" "| store, 1 producer |" \
            "UCX remote store / load" "UCX's own \`ucp_put\`" "agent's data path: checked" "| pair 1 " \
            "| ÷ UCX, median of the pairs |" "Remote store ≥ 0.8× UCX's own put: **" "| write + close |" "| cold read |" "128 keys" \
            "open + release, 2 threads (summed)" "open + release, 2 processes (summed)" \
            "128-key lookups, 1 process (summed)" "| maru |" "| redis |" "# an earlier section" "tail"; do
  [[ $md == *"$want"* ]] || fail "benchmarks.md lacks '$want'"
done
[[ $md != *$'\nold\n'* ]] || fail "the earlier suite section was not replaced"
[[ $md != *"–"* ]] || fail "a figure is missing: $(grep -- '–' <<<"$md" | head -3)"
[ "$(head -c 4 "$out/benchmarks-suite.png" | tail -c 3)" = "PNG" ] || fail "no PNG plot"
work=$(sed -n 's/.*work in \(\/tmp\/maru-suite\.[A-Za-z0-9]*\).*/\1/p' "$out/stderr")
[ -n "$work" ] || fail "the suite did not say where it worked"
[ -n "$work" ] && [ -e "$work" ] && fail "$work was left behind"
mount | grep -q "$work" && fail "a mount under $work was left behind"
pid_pool=$(sed -n 's/.*node on \(\/dev\/shm\/[^,]*\),.*/\1/p' "$out/stderr")
[ -n "$pid_pool" ] || fail "the suite did not say where its pool was"
[ -n "$pid_pool" ] && [ -e "$pid_pool" ] && fail "$pid_pool was left behind"

[ $failures -eq 0 ] && echo "suite test: ok"
exit $((failures > 0))
