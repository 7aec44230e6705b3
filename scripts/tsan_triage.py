#!/usr/bin/python3
"""Sorts ThreadSanitizer reports (scripts/tsan.sh) into Maru's and the rest.

A report is Maru's when the innermost frame (below TSan's interceptors) of
either racing access is in Maru's sources. The rest lie inside the
uninstrumented gRPC, Abseil, protobuf, RocksDB and libfuse libraries, or in
gRPC's header code inlined into our binaries, touching objects those
libraries hand between their threads; tests/tsan.supp silences most of them.

    scripts/tsan_triage.py LOG_DIR      prints counts, each Maru report and
                                        each crash TSan saw; exits 1 if any
"""
import collections
import glob
import re
import sys

OURS = re.compile(r"\.\./(src|libmaru_direct|tools|tests|python)/")
FRAME = re.compile(r"#\d+ (.+?) (\S+) \((\S+?)\+")


def reports(log_dir: str):
    """Yields the text of every TSan warning in LOG_DIR/report.*."""
    for path in sorted(glob.glob(log_dir + "/report.*")):
        with open(path, errors="replace") as f:
            for block in f.read().split("==================")[1:]:
                if "WARNING: ThreadSanitizer" in block:
                    yield block


def innermost(access: str):
    """The innermost frame of one access stack that is not TSan's own."""
    frames = [f for f in FRAME.findall(access) if "libtsan" not in f[2]]
    return frames[0] if frames else None


def is_ours(report: str) -> bool:
    """True if either racing access's innermost frame is Maru's."""
    parts = re.split(r"\n  (?=Previous|Location|Mutex|Thread|As if)", report)
    accesses = [p for p in parts if re.match(r"\s*(WARNING|Previous)", p)][:2]
    return any((f := innermost(a)) and OURS.search(f[1]) for a in accesses)


def crashed(log_dir: str) -> list:
    """TSan's reports of a process that crashed (SEGV and the like)."""
    out = []
    for path in sorted(glob.glob(log_dir + "/report.*")):
        with open(path, errors="replace") as f:
            text = f.read()
        if "ERROR: ThreadSanitizer" in text:
            out.append(path + ":\n" + text[text.index("ERROR: ThreadSanitizer") - 20 :][:3000])
    return out


def main() -> int:
    log_dir = sys.argv[1]
    total, ours, modules = 0, [], collections.Counter()
    for r in reports(log_dir):
        total += 1
        if is_ours(r):
            ours.append(r)
        summary = re.search(r"SUMMARY: ThreadSanitizer: .*?\((\S+?)\+", r)
        modules[summary.group(1).rsplit("/", 1)[-1] if summary else "?"] += 1
    print(f"tsan: {total} report(s) left after tests/tsan.supp, {len(ours)} in Maru's code")
    if modules:
        print("  by module of the summary frame:", dict(modules.most_common(8)))
    for r in ours:
        print(r)
    crashes = crashed(log_dir)
    for c in crashes:
        print(c)
    return 1 if ours or crashes else 0


if __name__ == "__main__":
    sys.exit(main())
