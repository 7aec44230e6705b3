"""What the Python package costs per call over the C library, and what
batched calls save over one call per key, in Python and in C, in one run.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/bench_overhead.py

Starts its own maru-server (examples/tiny_llm/maru_node.py: a pool in
/dev/shm, stopped by pid at the end) and measures, against that server:

- per call, ``maru.Client`` against the same calls of libmaru_direct in a
  tiny C loop (overhead_loop.c, compiled here with cc): open + release of
  one chunk, count_prefix of 128 keys, lookup_prefix of 128 keys and
  release_batch of what it found (and the same as one object:
  lookup_views and Prefix.release), a 32 MiB store (create, copy in with
  the library's copy, seal, release) and load (open, copy out, release);
- per key, storing 128 small chunks (create, seal, unlink) and asking
  whether they exist (count_prefix), one round trip per key against one
  per batch: ``maru.Client`` here, ``maru-bench batch`` for C; and
  releasing a 128-key lookup's chunks one by one against release_batch.

The two sides take turns (--repeat times, each going first every other
turn); a figure is the median over turns, a ratio the median of the turns'
ratios, so that a machine shared with other work slows both alike; the
ratios are what to read. Prints a Markdown table (docs/notes/python-overhead.md).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

import maru

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples" / "tiny_llm"))
from maru_node import MaruNode, build_root  # noqa: E402

KEYS = 128
DIR = "/bench-overhead"


def keys() -> List[str]:
    return [f"{DIR}/k{i}" for i in range(KEYS)]


def per_call_us(rounds: int, calls: int, op: Callable[[], None]) -> float:
    """Microseconds per call of `op`: the median over `rounds` of `calls` calls."""
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            op()
        per.append((time.perf_counter() - t0) * 1e6 / calls)
    return statistics.median(per)


def python_calls(client: maru.Client, rounds: int, calls: int, big: int) -> Dict[str, float]:
    """The Python side of overhead_loop.c: the same calls, in the same order."""
    paths = keys()
    counter = iter(range(1 << 62))

    def open_release() -> None:
        client.open(paths[next(counter) % KEYS]).release()

    def count() -> None:
        if client.count_prefix(paths) != KEYS:
            raise RuntimeError("count_prefix: keys missing")

    def lookup_release() -> None:
        chunks = client.lookup_prefix(paths)
        if len(chunks) != KEYS:
            raise RuntimeError("lookup_prefix: keys missing")
        client.release_batch(chunks)

    src, dst = bytearray(b"\x07" * big), bytearray(big)
    store, load = [], []
    path = f"{DIR}/big-py"
    out = {"open_release_us": per_call_us(rounds, calls, open_release),
           "count_prefix_128_us": per_call_us(rounds, calls, count)}
    for _ in range(rounds):
        t0 = time.perf_counter()
        with client.create(path, big) as chunk:
            chunk.write(src)
            chunk.seal()
        t1 = time.perf_counter()
        with client.open(path) as chunk:
            chunk.read_into(dst)
        t2 = time.perf_counter()
        client.unlink(path)
        store.append((t1 - t0) * 1e6)
        load.append((t2 - t1) * 1e6)
    out["store_us"] = statistics.median(store)
    out["load_us"] = statistics.median(load)
    out["lookup_release_128_us"] = per_call_us(rounds, calls, lookup_release)

    def lookup_views_release() -> None:
        prefix = client.lookup_views(paths)
        if len(prefix) != KEYS:
            raise RuntimeError("lookup_views: keys missing")
        prefix.release()

    out["lookup_views_128_us"] = per_call_us(rounds, calls, lookup_views_release)
    out["release_us_per_key"] = release_per_key(client, paths, rounds, calls)
    return out


def release_per_key(client: maru.Client, paths: List[str], rounds: int,
                    calls: int) -> List[float]:
    """Microseconds per key of releasing a lookup's chunks one by one and
    with ``release_batch``, in turns (the lookups untimed): medians of rounds."""
    each, batch = [], []
    for _ in range(rounds):
        spent = [0.0, 0.0]
        for i in range(calls):
            chunks = client.lookup_prefix(paths)
            t0 = time.perf_counter()
            if i % 2 == 0:
                for chunk in chunks:
                    chunk.release()
            else:
                client.release_batch(chunks)
            spent[i % 2] += time.perf_counter() - t0
        each.append(spent[0] * 1e6 / ((calls + 1) // 2) / KEYS)
        batch.append(spent[1] * 1e6 / (calls // 2) / KEYS)
    return [statistics.median(each), statistics.median(batch)]


def build_c_loop(work: Path) -> Path:
    build = build_root()
    exe = work / "overhead_loop"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(Path(__file__).parent / "overhead_loop.c"),
                    f"-I{REPO / 'libmaru_direct'}", f"-L{build / 'libmaru_direct'}",
                    f"-Wl,-rpath,{build / 'libmaru_direct'}", "-lmaru_direct"], check=True)
    return exe


def c_calls(exe: Path, url: str, rounds: int, calls: int, big: int) -> Dict[str, float]:
    out = subprocess.run([str(exe), url, DIR, str(rounds), str(calls), str(big)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def python_batch(client: maru.Client, rounds: int, size: int) -> Dict[str, List[float]]:
    """maru-bench batch (tools/bench_batch.cc) in Python: microseconds per key,
    one by one and batched, of storing and of asking what exists."""
    paths = [f"{DIR}/batch/k{i}" for i in range(KEYS)]
    data = b"\x01" * size

    def one_by_one() -> None:
        for p in paths:
            client.put(p, data)
        for p in paths:
            client.unlink(p)

    def batched() -> None:
        chunks = client.create_batch(paths, [size] * KEYS)
        for c in chunks:
            if isinstance(c, OSError):
                raise c
            c.write(data)
        errors = client.seal_batch(chunks)
        for c in chunks:
            c.release()
        errors += client.unlink_batch(paths)
        if any(errors):
            raise next(e for e in errors if e)

    def exists_one_by_one() -> None:
        for p in paths:
            if client.count_prefix([p]) != 1:
                raise RuntimeError("count_prefix: key missing")

    def exists_batched() -> None:
        if client.count_prefix(paths) != KEYS:
            raise RuntimeError("count_prefix: keys missing")

    store = [per_call_us(rounds, 1, one_by_one) / KEYS, per_call_us(rounds, 1, batched) / KEYS]
    for p in paths:
        client.put(p, data)
    exists = [per_call_us(rounds, 1, exists_one_by_one) / KEYS,
              per_call_us(rounds, 1, exists_batched) / KEYS]
    client.unlink_batch(paths)
    return {"store_us_per_key": store, "exists_us_per_key": exists}


def c_batch(url: str, rounds: int, size: int) -> Dict[str, List[float]]:
    bench = build_root() / "tools" / "maru-bench"
    out = subprocess.run([str(bench), "batch", "--server", url, "--keys", str(KEYS), "--rounds",
                          str(rounds), "--size", str(size), "--dir", f"{DIR}/c-batch", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def median_of(runs: List[Dict], key: str, index: int = -1) -> float:
    return statistics.median(r[key] if index < 0 else r[key][index] for r in runs)


def ratio_of(num: List[Dict], den: List[Dict], nkey: str, dkey: str) -> float:
    """The median over turns of num[nkey]/den[dkey], each turn's two sides
    measured back to back: steadier than a ratio of medians when the load
    moves."""
    return statistics.median(n[nkey] / d[dkey] for n, d in zip(num, den))


def difference_of(num: List[Dict], den: List[Dict], nkey: str, dkey: str) -> float:
    """The median over turns of num[nkey] - den[dkey] (see ratio_of)."""
    return statistics.median(n[nkey] - d[dkey] for n, d in zip(num, den))


def batch_gain(runs: List[Dict], key: str) -> float:
    """The median over turns of one-by-one / batched, measured back to back."""
    return statistics.median(r[key][0] / r[key][1] for r in runs)


def table(py: List[Dict], c: List[Dict], pyb: List[Dict], cb: List[Dict], big: int) -> str:
    mib = big >> 20
    # (row, the C loop's figure, the Python one): lookup_views makes the
    # same C calls as lookup_prefix + release_batch.
    rows = [("open + release, 1 chunk", "open_release_us", "open_release_us"),
            (f"count_prefix, {KEYS} keys", "count_prefix_128_us", "count_prefix_128_us"),
            (f"lookup_prefix, {KEYS} keys, + release_batch", "lookup_release_128_us",
             "lookup_release_128_us"),
            (f"lookup_views, {KEYS} keys, + Prefix.release", "lookup_release_128_us",
             "lookup_views_128_us"),
            (f"store {mib} MiB (create, copy in, seal, release)", "store_us", "store_us"),
            (f"load {mib} MiB (open, copy out, release)", "load_us", "load_us")]
    out = ["| call | C (µs) | Python (µs) | Python ÷ C | Python − C (µs) |",
           "|---|---:|---:|---:|---:|"]
    for name, ckey, pkey in rows:
        cv, pv = median_of(c, ckey), median_of(py, pkey)
        out.append(f"| {name} | {cv:.1f} | {pv:.1f} | {ratio_of(py, c, pkey, ckey):.2f}× "
                   f"| {difference_of(py, c, pkey, ckey):+.1f} |")
    out += ["", f"| µs per key, {KEYS} keys of 4 KiB | C one by one | C batched | C ratio "
                "| Python one by one | Python batched | Python ratio |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for name, key in [("store (create, seal, unlink)", "store_us_per_key"),
                      ("exists (count_prefix)", "exists_us_per_key")]:
        c1, cn = median_of(cb, key, 0), median_of(cb, key, 1)
        p1, pn = median_of(pyb, key, 0), median_of(pyb, key, 1)
        out.append(f"| {name} | {c1:.1f} | {cn:.2f} | {batch_gain(cb, key):.1f}× | {p1:.1f} "
                   f"| {pn:.2f} | {batch_gain(pyb, key):.1f}× |")
    key = "release_us_per_key"  # measured with the calls above
    c1, cn = median_of(c, key, 0), median_of(c, key, 1)
    p1, pn = median_of(py, key, 0), median_of(py, key, 1)
    out.append(f"| release a lookup's chunks | {c1:.3f} | {cn:.3f} | {batch_gain(c, key):.1f}× "
               f"| {p1:.3f} | {pn:.3f} | {batch_gain(py, key):.1f}× |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="rounds per figure (median)")
    ap.add_argument("--calls", type=int, default=200, help="calls per round of the small calls")
    ap.add_argument("--big", type=int, default=32 << 20, help="bytes of the large chunk")
    ap.add_argument("--repeat", type=int, default=5, help="turns of each side")
    args = ap.parse_args()
    if args.rounds < 1 or args.calls < 2 or args.big < 1 or args.repeat < 1:
        ap.error("--rounds, --big and --repeat must be positive, --calls at least 2")
    with tempfile.TemporaryDirectory(prefix="maru-bench-overhead-") as work, \
            MaruNode(pool_size=1 << 30) as node, maru.Client(node.url, instance="bench") as client:
        exe = build_c_loop(Path(work))
        for p in keys():
            client.put(p, b"\x02" * 4096)
        py, c, pyb, cb = [], [], [], []
        for turn in range(args.repeat):
            # Each side goes first every other turn.
            sides = [lambda: c.append(c_calls(exe, node.url, args.rounds, args.calls, args.big)),
                     lambda: py.append(python_calls(client, args.rounds, args.calls, args.big)),
                     lambda: cb.append(c_batch(node.url, args.rounds, 4096)),
                     lambda: pyb.append(python_batch(client, args.rounds, 4096))]
            order = [0, 1, 2, 3] if turn % 2 == 0 else [1, 0, 3, 2]
            for i in order:
                sides[i]()
    print(f"Made by `python/bench/bench_overhead.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
          f" (turns per side: {args.repeat}; medians of {args.rounds} rounds"
          f" of {args.calls} calls; large chunk: one call a round).\n")
    print(table(py, c, pyb, cb, args.big))


if __name__ == "__main__":
    main()
