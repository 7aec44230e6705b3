"""Layer-wise chunks: publish->wake latency, and loading with overlap.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/bench_layerwise.py

Starts its own maru-server (examples/tiny_llm/maru_node.py) and a writer
process; the reader is this process. Both use the `maru` package.

- **publish->wake**: the writer publishes the parts of a chunk one by one,
  a few ms apart, each time noting CLOCK_MONOTONIC (shared by the
  processes) just before ``publish_part``; the reader is already blocked in
  ``wait_part`` and notes the clock when it returns. p50/p99 of the
  difference: one PublishPart round trip plus the server waking the held
  WaitPart and its reply; beside it, one plain fast-lane round trip.
- **load with and without overlap**: the writer "computes" L layers
  (--compute-ms each, a sleep standing for the GPU) and publishes each
  layer's part; the reader copies each part into its own buffer
  (``read_into_batch``, the load) as soon as it is published (overlap) or
  only after the last one (no overlap: what a whole-chunk API allows). The
  figure is the time from the writer's first layer to the reader holding
  all layers; the ratio is no-overlap / overlap. The two modes alternate,
  --repeat times each; medians.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import numpy as np

import maru

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples" / "tiny_llm"))
from maru_node import MaruNode  # noqa: E402


def writer(url: str, path: str, parts: int, part_bytes: int, gap_ms: float) -> None:
    """The writer process: on each line of stdin, writes a chunk in parts."""
    client = maru.Client(url, instance="bench-writer")
    fill = np.full(part_bytes, 7, dtype=np.uint8)
    for line in sys.stdin:
        name = line.strip()
        chunk = client.create(f"{path}/{name}", parts * part_bytes, parts=parts)
        print("created", flush=True)
        sys.stdin.readline()  # go
        stamps = []
        for i in range(parts):
            time.sleep(gap_ms / 1000)  # compute layer i
            client.write_from_batch([(chunk, fill, i * part_bytes)])
            stamps.append(time.monotonic_ns())
            chunk.publish_part(i)
        chunk.seal()
        print(" ".join(map(str, stamps)), flush=True)
        chunk.release()


def percentile(values: List[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def run(args: argparse.Namespace) -> None:
    with MaruNode(pool_size=1 << 30) as node, maru.Client(node.url) as client:
        def start_writer(parts: int, part_bytes: int, gap_ms: float) -> subprocess.Popen:
            env = dict(os.environ)
            return subprocess.Popen(
                [sys.executable, __file__, "--writer", node.url, "/bench-lw", str(parts),
                 str(part_bytes), str(gap_ms)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

        # a plain fast-lane round trip, for scale
        client.put("/bench-lw/rtt", b"x")
        rtt_us: List[float] = []
        for _ in range(args.rtt_calls):
            t0 = time.monotonic_ns()
            client.count_prefix(["/bench-lw/rtt"])
            rtt_us.append((time.monotonic_ns() - t0) / 1000)

        # publish -> wake
        lat_us: List[float] = []
        w = start_writer(args.latency_parts, 4096, args.latency_gap_ms)
        for round_ in range(args.latency_rounds):
            name = f"lat{round_}"
            w.stdin.write(name + "\n")
            w.stdin.flush()
            assert w.stdout.readline().strip() == "created"
            chunk = client.open_partial(f"/bench-lw/{name}")
            w.stdin.write("go\n")
            w.stdin.flush()
            woke = []
            for i in range(args.latency_parts):
                chunk.wait_part(i, timeout=30)
                woke.append(time.monotonic_ns())
            stamps = list(map(int, w.stdout.readline().split()))
            lat_us += [(b - a) / 1000 for a, b in zip(stamps, woke)]
            chunk.release()
            client.unlink(f"/bench-lw/{name}")
        w.stdin.close()
        w.wait()

        # overlap vs none
        part_bytes = args.layer_mib << 20
        times = {"overlap": [], "after seal": []}
        w = start_writer(args.layers, part_bytes, args.compute_ms)
        dst = np.empty(args.layers * part_bytes, dtype=np.uint8)
        for round_ in range(args.repeat):
            for mode in (("overlap", "after seal") if round_ % 2 == 0 else ("after seal", "overlap")):
                name = f"load{round_}-{mode.replace(' ', '')}"
                w.stdin.write(name + "\n")
                w.stdin.flush()
                assert w.stdout.readline().strip() == "created"
                chunk = client.open_partial(f"/bench-lw/{name}")
                w.stdin.write("go\n")
                w.stdin.flush()
                t0 = time.monotonic_ns()
                order = range(args.layers) if mode == "overlap" else [args.layers - 1]
                for i in order:
                    chunk.wait_part(i, timeout=60)
                    if mode == "overlap":
                        lo, n = chunk.part_range(i)
                        client.read_into_batch([(chunk, dst[lo:lo + n], lo)])
                if mode != "overlap":
                    client.read_into_batch([(chunk, dst, 0)])
                t1 = time.monotonic_ns()
                w.stdout.readline()
                times[mode].append((t1 - t0) / 1e6)
                chunk.release()
                client.unlink(f"/bench-lw/{name}")
        w.stdin.close()
        w.wait()

    over, after = statistics.median(times["overlap"]), statistics.median(times["after seal"])
    print(f"| publish->wake, {len(lat_us)} parts | p50 {percentile(lat_us, 50):.0f} us | "
          f"p99 {percentile(lat_us, 99):.0f} us | one round trip (count_prefix) p50 "
          f"{percentile(rtt_us, 50):.0f} us, p99 {percentile(rtt_us, 99):.0f} us |")
    print(f"| load {args.layers} x {args.layer_mib} MiB, {args.compute_ms} ms compute per layer "
          f"| overlap {over:.1f} ms | after seal {after:.1f} ms | ratio {after / over:.2f} |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        url, path, parts, part_bytes, gap = sys.argv[2:7]
        writer(url, path, int(parts), int(part_bytes), float(gap))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rtt-calls", type=int, default=2000)
    p.add_argument("--latency-parts", type=int, default=200)
    p.add_argument("--latency-rounds", type=int, default=5)
    p.add_argument("--latency-gap-ms", type=float, default=2.0)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--layer-mib", type=int, default=4)
    p.add_argument("--compute-ms", type=float, default=5.0)
    p.add_argument("--repeat", type=int, default=5)
    run(p.parse_args())


if __name__ == "__main__":
    main()
