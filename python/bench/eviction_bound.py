"""How far a server's own eviction can get on a KV trace, measured with
hindsight: a Least-Hit-Density ranking (Beckmann et al., NSDI'18) whose
hit densities are not learned but computed from the trace's own future.

    /usr/bin/python3 python/bench/eviction_bound.py \
        --trace bench/traces/mooncake_conversation_trace.jsonl --capacity 16451

Each request gets the class of what a server observes of it, as
tools/fitted_hints.cc defines it (its turn in its conversation, the
blocks it stored, the time since its turn before, its prompt's length;
--features picks how many of them). After a request, each of its blocks
takes the request's class and an age of 0. For every class, the
trace's next-use distances of the blocks left in that class (in
requests; never, for a last use) give the block's hit density at each
age a: the chance of a reuse within (a, a + horizon], over the expected
requests it would occupy the cache until then. The cache (the simulator's
rules: the longest cached prefix is a hit, the rest is stored) evicts the
least dense of 64 blocks sampled at random. The densities are fitted on
the same trace they are used on (in sample): more than any online
learner can know, so what this reaches bounds the server's policies from
above on these features. Prints the block hit ratio, and LRU's.
"""
from __future__ import annotations

import argparse
import bisect
import json
import math
import random
from collections import OrderedDict
from typing import Dict, List, Sequence, Tuple

import numpy as np


def read_trace(path: str) -> Tuple[List[List[int]], List[int], List[int]]:
    """Each request's block ids, timestamp (ms) and number of blocks."""
    blocks, stamps, lengths = [], [], []
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                blocks.append(r["hash_ids"])
                stamps.append(int(r.get("timestamp", 0)))
                lengths.append(len(r["hash_ids"]))
    return blocks, stamps, lengths


def classes(blocks: Sequence[List[int]], stamps: Sequence[int], features: int) -> List[int]:
    """What a server observes of each request, as tools/fitted_hints.cc's
    Observe() and its coarse classes: turn (0..5+), then with features >= 2
    blocks stored (4 classes), >= 3 log2 seconds since the turn before (8),
    >= 4 prompt length (5)."""
    stored_by: Dict[int, int] = {}
    turn = [0] * len(blocks)
    out = []
    for i, b in enumerate(blocks):
        seen = 0
        while seen < len(b) and b[seen] in stored_by:
            seen += 1
        gap = -1
        if seen >= 2:
            before = stored_by[b[seen - 1]]
            if seen + 1 >= len(blocks[before]):
                turn[i] = turn[before] + 1
                s = (stamps[i] - stamps[before]) / 1000
                gap = min(int(math.log2(max(s, 16.0))) - 4, 6)
        for x in b[seen:]:
            stored_by.setdefault(x, i)
        stored = len(b) - seen
        c = min(turn[i], 5)
        if features >= 2:
            c = c * 4 + (0 if stored <= 4 else 1 if stored <= 16 else 2 if stored <= 32 else 3)
        if features >= 3:
            c = c * 8 + gap + 1
        if features >= 4:
            c = c * 5 + min(len(b) // 16, 4)
        out.append(c)
    return out


AGES = np.unique(np.concatenate([np.arange(64), np.round(np.logspace(6, 15, 160, base=2))]))


def densities(blocks: Sequence[List[int]], cls: Sequence[int], horizon: int) -> np.ndarray:
    """Hit density per class and age (AGES), from each use's distance to the
    block's next use (in requests; never: a huge distance)."""
    never = 1 << 40
    last: Dict[int, int] = {}
    distances: Dict[int, List[int]] = {}
    for i in range(len(blocks) - 1, -1, -1):
        for x in set(blocks[i]):
            distances.setdefault(cls[i], []).append(last.get(x, i + never) - i)
            last[x] = i
    table = np.zeros((max(cls) + 1, len(AGES)))
    for c, ds in distances.items():
        d = np.sort(np.array(ds, dtype=np.int64))
        for j, a in enumerate(AGES):
            alive = d[np.searchsorted(d, a, side="right"):]
            if len(alive):
                occupied = (np.minimum(alive, a + horizon) - a).sum()
                table[c, j] = (alive <= a + horizon).sum() / occupied
    return table


def simulate(blocks: Sequence[List[int]], cls: Sequence[int], table: np.ndarray,
             capacity: int, samples: int = 64) -> float:
    """Block hit ratio of the cache that evicts the least dense of
    `samples` random blocks, by the densities of `table`."""
    cache: Dict[int, Tuple[int, int]] = {}  # block -> (request of its last use, class)
    keys: List[int] = []
    where: Dict[int, int] = {}
    rng = random.Random(1)
    hits = total = 0
    for i, b in enumerate(blocks):
        total += len(b)
        h = 0
        while h < len(b) and b[h] in cache:
            h += 1
        hits += h
        for x in b:
            if x not in cache and len(cache) >= capacity:
                victim, least = None, math.inf
                for _ in range(samples):
                    y = keys[rng.randrange(len(keys))]
                    used, c = cache[y]
                    d = table[c, bisect.bisect_right(AGES, i - used) - 1]
                    if d < least:
                        victim, least = y, d
                del cache[victim]
                k = where.pop(victim)
                moved = keys.pop()
                if moved != victim:
                    keys[k] = moved
                    where[moved] = k
            if x not in cache:
                where[x] = len(keys)
                keys.append(x)
            cache[x] = (i, cls[i])
    return hits / total


def lru(blocks: Sequence[List[int]], capacity: int) -> float:
    """Block hit ratio of LRU under the same rules (tools/kv_trace.cc)."""
    cache: "OrderedDict[int, None]" = OrderedDict()
    hits = total = 0
    for b in blocks:
        total += len(b)
        h = 0
        while h < len(b) and b[h] in cache:
            cache.move_to_end(b[h])
            h += 1
        hits += h
        for x in b[h:]:
            if x in cache:
                continue
            if len(cache) >= capacity:
                cache.popitem(last=False)
            cache[x] = None
    return hits / total


def main() -> None:
    """Prints the Markdown table of the seventh round (docs/notes/eviction-bounds.md)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--capacity", type=int, nargs="+", required=True, help="blocks")
    ap.add_argument("--features", type=int, nargs="+", default=[1, 2, 3, 4],
                    help="how many of turn, stored, gap, prompt length")
    ap.add_argument("--horizon", type=int, nargs="+", default=[800, 3000],
                    help="requests ahead a density looks")
    args = ap.parse_args()
    blocks, stamps, _ = read_trace(args.trace)
    print("| capacity | features | horizon | block hit | LRU |\n|---|---|---|---|---|")
    for capacity in args.capacity:
        base = lru(blocks, capacity)
        for features in args.features:
            cls = classes(blocks, stamps, features)
            for horizon in args.horizon:
                hit = simulate(blocks, cls, densities(blocks, cls, horizon), capacity)
                print(f"| {capacity} | {features} | {horizon} | {hit:.4f} | {base:.4f} |",
                      flush=True)


if __name__ == "__main__":
    main()
