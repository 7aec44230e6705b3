#!/usr/bin/python3
"""Time to first token of the tiny model: KV from Maru vs recompute vs Redis.

For each prompt length, a writer process (instance.py) prefills the prompt
and stores its blocks, once into a Maru pool and once into Redis. This
process then serves the same prompt again, once per path untimed, then
several times per path, the paths taking turns and each going first in turn:
  miss    no stored KV: prefill every token
  maru    count the stored blocks, map them in place, compute the last block
  redis   ask which blocks exist, receive them (one MGET), compute the last block
  local   the blocks from this process's own memory (the ideal reuse)
and prints the median TTFT per path, with ratios, as a Markdown table
(--write puts it into docs/notes/ttft.md). Starts its own maru-server and
redis-server, and stops them by pid.
"""
from __future__ import annotations

import argparse
import datetime
import random
import statistics
import sys

import torch

from blocks import Layout
from doc_section import write_section
from engine import Instance
from kvstore import MemoryKVStore
from maru_node import MaruNode
from maru_store import MaruKVStore
from model import Config, TinyLM, deterministic
from proc import InstanceProcess
from redis_node import RedisNode
from redis_store import RedisKVStore

PATHS = ("miss", "maru", "redis", "local")
BEGIN, END = "<!-- bench_ttft: begin -->", "<!-- bench_ttft: end -->"


def prompt(seed: int, n: int):
    rng = random.Random(seed)
    return [rng.randrange(1000) for _ in range(n)]


def store_from_writer(server: str, p, block: int, directory: str) -> int:
    with InstanceProcess(server, directory, block, name="bench-writer") as w:
        return w.request(op="serve", prompt=p, decode=0)["stored_blocks"]


def measure(model, stores, p, block: int, reps: int):
    """TTFT samples per path. Each path serves the prompt once untimed
    first (a first forward of a size, a first lookup, is slow); then the
    paths take turns, each going first in turn, so that neither warmth nor
    load favours one."""
    insts = {name: Instance(model, store, block) for name, store in stores.items()}
    for inst in insts.values():
        inst.serve(p, 1, store=False)
    ttft = {name: [] for name in insts}
    fetch = {name: [] for name in insts}
    first, hits = {}, {}
    names = list(insts)
    for rep in range(reps):
        k = rep % len(names)
        for name in names[k:] + names[:k]:
            r = insts[name].serve(p, 1, store=False)
            ttft[name].append(r.ttft_s)
            fetch[name].append(r.fetch_s)
            first.setdefault(name, r.tokens[0])
            hits[name] = r.hit_blocks
    if len(set(first.values())) != 1:
        raise SystemExit(f"first tokens differ between paths: {first}")
    med = lambda d: {k: statistics.median(v) for k, v in d.items()}  # noqa: E731
    return med(ttft), med(fetch), hits


def table(rows, block: int, reps: int) -> str:
    ms = lambda s: f"{s * 1e3:.1f}"  # noqa: E731
    lines = ["| prompt tokens | blocks reused (MiB) | TTFT miss (recompute) | TTFT Maru hit | "
             "TTFT Redis hit | TTFT local-memory hit | miss / Maru | Redis / Maru | "
             "KV fetch Maru | KV fetch Redis | Redis / Maru fetch |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, hits, mib, t, f in rows:
        lines.append(f"| {n} | {hits} ({mib:.2f}) | {ms(t['miss'])} ms | {ms(t['maru'])} ms | "
                     f"{ms(t['redis'])} ms | {ms(t['local'])} ms | {t['miss'] / t['maru']:.1f}× | "
                     f"{t['redis'] / t['maru']:.2f}× | {f['maru'] * 1e3:.2f} ms | "
                     f"{f['redis'] * 1e3:.2f} ms | {f['redis'] / f['maru']:.1f}× |")
    cfg = Config()
    head = (f"Made by `examples/tiny_llm/bench_ttft.py` on "
            f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC: TTFT p50 of {reps} runs per "
            f"path, the tiny model ({cfg.n_layers} layers, d_model {cfg.d_model}, "
            f"{cfg.n_heads} heads, fp32, {block}-token blocks, one CPU thread). A hit "
            f"computes only the prompt's last block. KV fetch: the part of TTFT spent "
            f"finding the stored blocks and making them tensors (Maru: count, lookup, map "
            f"in place; Redis: EXISTS, then MGET copies them over loopback).")
    return head + "\n\n" + "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default="128,512,1024,2048")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--write", action="store_true", help="put the table into docs/notes/ttft.md")
    args = ap.parse_args()
    deterministic()
    model = TinyLM(Config())
    rows = []
    with MaruNode(pool_size=512 << 20) as node, RedisNode() as redis:
        maru_store = MaruKVStore(node.url, "/bench", instance="bench-reader")
        redis_store = RedisKVStore(redis.port)
        try:
            for i, n in enumerate(int(x) for x in args.lengths.split(",")):
                p = prompt(1000 + i, n)
                store_from_writer(node.url, p, args.block, "/bench")
                store_from_writer(f"redis:{redis.port}", p, args.block, "/bench")
                local = MemoryKVStore()
                Instance(model, local, args.block).serve(p, 0)
                stores = {"miss": None, "maru": maru_store, "redis": redis_store, "local": local}
                t, f, hits = measure(model, stores, p, args.block, args.reps)
                mib = hits["maru"] * Layout(model.cfg, args.block).chunk_bytes / (1 << 20)
                rows.append((n, hits["maru"], mib, t, f))
                print(f"{n:5d} tokens: " + "  ".join(f"{k} {v * 1e3:8.1f} ms" for k, v in t.items()),
                      file=sys.stderr, flush=True)
        finally:
            maru_store.close()
            redis_store.close()
    section = table(rows, args.block, args.reps)
    print(section)
    if args.write:
        write_section("ttft.md", BEGIN, END, section)


if __name__ == "__main__":
    main()
