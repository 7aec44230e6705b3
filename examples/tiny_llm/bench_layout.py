#!/usr/bin/python3
"""Chunk layout: one chunk per block, or one per layer per block?

Stores the KV of a 512-token prompt (its blocks, packed as the layout says)
and loads it back (count the prefix, map the chunks, attach them to a cache),
many times, and prints the median store and load times per layout and
store. Starts a maru-server of its own (the memory store needs none).
"""
from __future__ import annotations

import argparse
import statistics
import time

from blocks import LAYOUTS, Layout
from engine import Instance
from kvstore import MemoryKVStore
from maru_node import MaruNode
from model import Config, TinyLM, deterministic


def once(model, cache, keys, layout: Layout, store):
    chunk_keys = layout.chunk_keys(keys)
    t0 = time.perf_counter()
    items = []
    for b in range(len(keys)):
        for j, t in enumerate(layout.pack(cache, b)):
            at = b * layout.chunks_per_block + j
            items.append((chunk_keys[at], t, chunk_keys[at - 1] if at else None))
    assert store.put_many(items) == len(items)
    t1 = time.perf_counter()
    dest = model.new_cache(1)
    n = store.count_prefix(chunk_keys)
    views = store.get_prefix(chunk_keys[:n], layout.dtype, layout.shape)
    per = layout.chunks_per_block
    for b in range(len(views) // per):
        layout.attach(dest, [v.tensor for v in views[b * per:(b + 1) * per]])
    t2 = time.perf_counter()
    assert dest.prefix_len == len(keys) * layout.block_tokens
    for v in views:
        v.close()
    return t1 - t0, t2 - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    deterministic()
    model = TinyLM(Config())
    prompt = [(i * 7919) % 1000 for i in range(args.tokens)]
    cache = model.new_cache(args.tokens)
    model.forward(prompt, cache)
    keys = Instance(model, None, args.block).block_keys(prompt)
    with MaruNode(pool_size=512 << 20) as node:
        from maru_store import MaruKVStore
        print(f"{args.tokens}-token prompt, {len(keys)} blocks of {args.block} tokens; "
              f"median of {args.reps}")
        print("| store | layout | chunks | chunk KiB | store ms | load ms |")
        print("|---|---|---:|---:|---:|---:|")
        maru = MaruKVStore(node.url, "/layout", instance="bench-layout")
        for kind in LAYOUTS:
            layout = Layout(model.cfg, args.block, kind)
            for name in ("memory", "maru"):
                samples = []
                for rep in range(args.reps):
                    maru.dir = f"/layout/{kind}/{rep}"  # fresh names: first writer wins
                    store = MemoryKVStore() if name == "memory" else maru
                    samples.append(once(model, cache, keys, layout, store))
                st = statistics.median(s for s, _ in samples)
                ld = statistics.median(ld for _, ld in samples)
                print(f"| {name} | {kind} | {len(keys) * layout.chunks_per_block} | "
                      f"{layout.chunk_bytes >> 10} | {st * 1e3:.2f} | {ld * 1e3:.2f} |",
                      flush=True)
        maru.close()


if __name__ == "__main__":
    main()
