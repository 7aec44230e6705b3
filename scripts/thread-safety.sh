#!/bin/bash
# The lock checks: clang's -Wthread-safety over src/ and libmaru_direct/,
# a syntax-only pass with the build's own flags (compile_commands.json), so
# a GUARDED_BY member touched without its Mutex, or a REQUIRES function
# called without it, fails the build's tests (util/thread_annotations.h).
#
# Usage: scripts/thread-safety.sh SOURCE_ROOT BUILD_DIR
# Exit 77 (skipped) without clang++ or a compile database.
set -euo pipefail

source=${1:?usage: thread-safety.sh SOURCE_ROOT BUILD_DIR}
build=${2:?usage: thread-safety.sh SOURCE_ROOT BUILD_DIR}
clang=${CLANGXX:-$(command -v clang++ || true)}
if [[ -z "$clang" ]]; then
  echo "clang++ not found: thread-safety pass skipped"
  exit 77
fi
if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "$build/compile_commands.json not found: thread-safety pass skipped"
  exit 77
fi

exec /usr/bin/python3 - "$source" "$build" "$clang" <<'EOF'
import concurrent.futures, json, os, shlex, subprocess, sys

source, build, clang = (os.path.abspath(a) if i < 2 else a for i, a in enumerate(sys.argv[1:4]))
entries = json.load(open(os.path.join(build, "compile_commands.json")))

# gcc's warnings are the build's business; this pass checks locks only.
DROP = {"-Werror", "-Wall", "-Wextra", "-Winvalid-pch", "-fdiagnostics-color=always", "-c"}
DROP_WITH_ARG = {"-o", "-MQ", "-MF", "-MT"}

def command(entry):
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    if os.path.basename(args[0]) in ("ccache", "sccache"):  # a compiler launcher
        args = args[1:]
    out, skip = [clang], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a in DROP_WITH_ARG:
            skip = True
        elif a in DROP or a in ("-MD", "-MMD") or a == entry["file"]:
            continue
        else:
            out.append(a)
    return out + ["-fsyntax-only", "-Wno-unknown-warning-option", "-Wthread-safety",
                  "-Werror=thread-safety", entry["file"]]

def ours(entry):
    path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
    if os.path.commonpath([path, build]) == build:
        return False  # generated: protobuf and gRPC stubs
    rel = os.path.relpath(path, source)
    return rel.split(os.sep)[0] in ("src", "libmaru_direct") and path.endswith(".cc")

def check(entry):
    r = subprocess.run(command(entry), cwd=entry["directory"], capture_output=True, text=True)
    return entry["file"], r.returncode, r.stderr

todo = [e for e in entries if ours(e)]
failed = 0
with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
    for name, rc, err in pool.map(check, todo):
        if rc != 0:
            failed += 1
            sys.stderr.write(err)
print(f"thread-safety: {len(todo)} files, {failed} failed")
sys.exit(1 if failed else 0)
EOF
