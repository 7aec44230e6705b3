#!/usr/bin/env bash
# `import maru` works the two ways Python users install it, with nothing run
# by hand afterwards (no ldconfig, no LD_LIBRARY_PATH):
#   1. `meson install` (staged with DESTDIR, as a package build does): the
#      extension finds the libmaru_direct installed beside it by its run path;
#   2. a wheel built by `pip wheel --no-build-isolation` (Debian's
#      python3-mesonpy) and installed into a venv made with
#      --system-site-packages (torch, numpy): the library travels in the wheel.
# Each then stores and reads back a chunk through a real maru-server.
#   tests/install_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
source=$(cd "$2" && pwd)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

work=$(mktemp -d /tmp/maru-install-test.XXXXXX)
pool=/dev/shm/maru-install-test-$$.pool
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -f "$pool"
  rm -rf "$work"
}
trap cleanup EXIT

"$build/tools/maructl" mkpool "$pool" --size 64M --mode 666 >/dev/null || fail "mkpool"
"$build/src/meta/maru-server" --pool "$pool" --db "$work/db" \
  --listen "unix://$work/maru.sock" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 400); do
  "$build/tools/maructl" df --server "unix://$work/maru.sock" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done

# check PYTHON [ENV...]: imports maru (and maru_vllm, maru_lmcache, maru_sglang) in a clean
# environment, checks that the extension and the library come from WHERE, and
# round-trips a chunk.
check() {
  local what=$1 python=$2 where=$3
  shift 3
  (cd "$work" && env -i PATH=/usr/bin:/bin "$@" "$python" - "$where" "unix://$work/maru.sock" <<'EOF'
import sys
import maru
import maru.vllm
import maru_vllm
where, server = sys.argv[1], sys.argv[2]
assert maru_vllm.__file__.startswith(where), f"maru_vllm from {maru_vllm.__file__}, not {where}"
assert issubclass(maru_vllm.MaruKVConnector, maru.vllm.KVConnectorBase_V1)
libs = {line.split()[-1] for line in open("/proc/self/maps") if "libmaru_direct" in line}
assert maru.__file__.startswith(where), f"maru from {maru.__file__}, not {where}"
import maru_lmcache  # LMCache's own maru backend imports it: installed next to maru
assert maru_lmcache.__file__.startswith(where), f"maru_lmcache from {maru_lmcache.__file__}"
import maru_sglang.maru_storage  # SGLang's dynamic backend imports it: installed next to maru
assert maru_sglang.__file__.startswith(where), f"maru_sglang from {maru_sglang.__file__}"
assert libs and all(l.startswith(where) for l in libs), f"libmaru_direct from {libs}"
with maru.Client(server, instance="install-test") as client:
    client.put("/install/a", b"x" * 4096)
    with client.open("/install/a") as chunk:
        assert bytes(chunk.memoryview()) == b"x" * 4096
    client.unlink("/install/a")
EOF
  ) || fail "$what"
}

# 1. meson install into a staging root.
stage=$work/stage
meson install -C "$build" --destdir "$stage" --no-rebuild >"$work/install.log" 2>&1 ||
  fail "meson install: $(tail -3 "$work/install.log")"
pydir=$(find "$stage" -path '*/dist-packages/maru/__init__.py' -printf '%h\n' | head -1)
if [ -z "$pydir" ]; then
  fail "meson install put no maru package under $stage"
else
  check "meson install" /usr/bin/python3 "$stage" PYTHONPATH="$(dirname "$pydir")"
fi

# 2. a wheel, into a venv that sees Debian's packages.
if /usr/bin/python3 -c 'import mesonpy' 2>/dev/null; then
  (cd "$source" && /usr/bin/python3 -m pip wheel --no-build-isolation --no-deps --no-index \
    -w "$work/wheel" . >"$work/wheel.log" 2>&1) || fail "pip wheel: $(tail -5 "$work/wheel.log")"
  /usr/bin/python3 -m venv --system-site-packages "$work/venv" || fail "venv"
  "$work/venv/bin/pip" install --no-index --no-deps "$work"/wheel/maru-*.whl \
    >"$work/pip.log" 2>&1 || fail "pip install: $(tail -3 "$work/pip.log")"
  check "wheel in a venv" "$work/venv/bin/python" "$work/venv"
else
  fail "python3-mesonpy is not installed (scripts/install-deps.sh installs it)"
fi

if [ "$failures" -ne 0 ]; then
  echo "--- server log"; cat "$work/server.log"
  exit 1
fi
echo "install: meson install and a wheel in a venv both import maru and store a chunk"
