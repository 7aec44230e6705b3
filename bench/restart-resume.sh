#!/usr/bin/env bash
# How soon clients attached to a server that restarts are its clients again.
#
#   bench/restart-resume.sh BUILD PREV [ROUNDS] [LOAD]
#
# Starts a maru-server of BUILD on a pool in /dev/shm, attaches one client
# of BUILD and one of PREV (another build directory, e.g. of the commit
# before) to it, and LOAD busy loops competing for the CPUs (default 4).
# Then ROUNDS times (default 10): kill -9 of the server, a restart, and the
# time from the new server's "serving" line to each client's "session ...
# resumed" line. Prints one row per round and the median of each side.
# Everything it starts is stopped by pid at the end, and its files removed.
set -euo pipefail
build=$(realpath "$1")
prev=$(realpath "$2")
rounds=${3:-10}
load=${4:-4}

dir=$(mktemp -d /tmp/maru-restart-resume.XXXXXX)
pool=/dev/shm/maru-restart-resume-$$.pool
sock=$dir/maru.sock
pids=()
server=
cleanup() {
  touch "$dir/stop"
  [[ -n $server ]] && kill -9 "$server" 2>/dev/null || true
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir" "$pool" "$pool.index"
}
trap cleanup EXIT

"$build/tools/maructl" mkpool "$pool" --size 256M >/dev/null

# Milliseconds of the day from a log line's "YYYY-MM-DDTHH:MM:SS.mmm".
ms_of() { awk '{split(substr($1, 12), t, /[:.]/); print ((t[1] * 60 + t[2]) * 60 + t[3]) * 1000 + t[4]}'; }

start_server() {
  : >"$dir/server.log"
  "$build/src/meta/maru-server" --pool "$pool" --db "$dir/db" --listen "unix://$sock" \
    --session-timeout-ms 1500 --heartbeat-ms 300 >>"$dir/server.log" 2>&1 &
  server=$!
  until grep -q ' serving ' "$dir/server.log"; do sleep 0.01; done
}

resumes() { grep -c ' resumed with ' "$1" || true; }

start_server
for side in new prev; do
  b=$build
  [[ $side == prev ]] && b=$prev
  "$b/tests/direct_client" "unix://$sock" connect + wait-for "$dir/stop" >"$dir/$side.out" \
    2>"$dir/$side.log" &
  pids+=($!)
  until grep -q connected "$dir/$side.out"; do sleep 0.01; done
done
for _ in $(seq "$load"); do
  (while :; do :; done) &
  pids+=($!)
done

echo "| round | new build (ms) | previous build (ms) |"
echo "|---|---|---|"
new_all=()
prev_all=()
for round in $(seq "$rounds"); do
  before_new=$(resumes "$dir/new.log")
  before_prev=$(resumes "$dir/prev.log")
  kill -9 "$server"
  wait "$server" 2>/dev/null || true
  start_server
  serving=$(grep ' serving ' "$dir/server.log" | tail -1 | ms_of)
  deadline=$((SECONDS + 60))
  until [[ $(resumes "$dir/new.log") -gt $before_new && $(resumes "$dir/prev.log") -gt $before_prev ]]; do
    if ((SECONDS > deadline)); then
      echo "a client did not resume within 60 s" >&2
      exit 1
    fi
    sleep 0.01
  done
  n=$(($(grep ' resumed with ' "$dir/new.log" | tail -1 | ms_of) - serving))
  p=$(($(grep ' resumed with ' "$dir/prev.log" | tail -1 | ms_of) - serving))
  new_all+=("$n")
  prev_all+=("$p")
  echo "| $round | $n | $p |"
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "| median | $(median "${new_all[@]}") | $(median "${prev_all[@]}") |"
