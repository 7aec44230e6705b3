#!/usr/bin/python3
"""Several inference instances (processes) share KV through Maru.

Conversations that all start with one system prompt are served turn by turn,
each turn by the next instance in turn: the instance finds the blocks that
others stored (the system prompt, the earlier turns), maps them in place,
computes only the new tokens and stores its new blocks. Every request is
also recomputed from scratch by the same instance, to show the time to first
token both ways and that the generated tokens are the same.

  demo.py [--server unix:///path/maru.sock]   (default: start a maru-server of its own)
"""
from __future__ import annotations

import argparse
import random
import sys

from maru_node import MaruNode
from proc import InstanceProcess


def words(rng: random.Random, n: int):
    return [rng.randrange(1000) for _ in range(n)]


def run(server: str, args) -> bool:
    rng = random.Random(7)
    system = words(rng, args.system)
    convs = [list(system) for _ in range(args.conversations)]
    insts = [InstanceProcess(server, args.dir, args.block, name=f"tiny-llm-{i}")
             for i in range(args.instances)]
    ok, t_hit, t_miss, req = True, 0.0, 0.0, 0
    print(f"   {args.instances} instances, {args.conversations} conversations sharing a "
          f"{args.system}-token system prompt, {args.turns} turns, {args.block}-token blocks")
    print("   inst conv turn prompt  reused blocks   TTFT Maru   TTFT recompute  speedup  tokens")
    try:
        for turn in range(1, args.turns + 1):
            for c, conv in enumerate(convs):
                conv += words(rng, args.user)  # the user's new message
                i = req % len(insts)
                inst = insts[i]
                req += 1
                hit = inst.request(op="serve", prompt=conv, decode=args.decode)
                miss = inst.request(op="serve", prompt=conv, decode=args.decode,
                                    reuse=False, store=False)
                same = hit["tokens"] == miss["tokens"]
                ok &= same
                t_hit += hit["ttft_s"]
                t_miss += miss["ttft_s"]
                blocks = len(conv) // args.block
                print(f"   {i:4d} {c:4d} {turn:4d} {len(conv):6d}"
                      f"  {hit['hit_blocks']:5d} / {blocks:<5d} {hit['ttft_s'] * 1e3:8.1f} ms"
                      f"  {miss['ttft_s'] * 1e3:10.1f} ms  {miss['ttft_s'] / hit['ttft_s']:6.1f}x"
                      f"  {'equal' if same else 'DIFFER'}", flush=True)
                conv += hit["tokens"]  # the reply becomes part of the next turn's prompt
    finally:
        for inst in insts:
            inst.close()
    print(f"   total TTFT: {t_hit * 1e3:.0f} ms with Maru hits, {t_miss * 1e3:.0f} ms "
          f"recomputing ({t_miss / t_hit:.1f}x); generated tokens "
          f"{'identical in every request' if ok else 'DIFFER'}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", help="a running maru-server (unix:///... or tcp://...)")
    ap.add_argument("--dir", default="/tiny_llm")
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--conversations", type=int, default=2)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--system", type=int, default=1024, help="system prompt tokens")
    ap.add_argument("--user", type=int, default=40, help="tokens of each user message")
    ap.add_argument("--decode", type=int, default=16, help="tokens generated per turn")
    ap.add_argument("--block", type=int, default=32)
    args = ap.parse_args()
    if args.server:
        return 0 if run(args.server, args) else 1
    with MaruNode() as node:
        return 0 if run(node.url, args) else 1


if __name__ == "__main__":
    sys.exit(main())
