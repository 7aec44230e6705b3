#!/usr/bin/python3
"""Several inference instances (processes) share KV through Maru.

Conversations that all start with one system prompt are served turn by turn,
each turn by the next instance in turn: the instance finds the blocks that
others stored (the system prompt, the earlier turns), maps them in place,
computes only the new tokens and stores its new blocks. Every request is
also recomputed from scratch by the same instance, to show the time to first
token both ways and that the generated tokens are the same.

Fair both ways: each instance serves a prompt of the same length both ways
before the table starts (its first forward of that size is slow), and the two
ways take turns going first. A request that finds none of its blocks stored
(a miss) computes everything either way; its row says so, and what storing
its blocks for the others cost.

  demo.py [--server unix:///path/maru.sock]   (default: start a maru-server of its own)
  demo.py --server tcp://10.0.0.1:7070 --host "nsenter -t PID1 -n -m" --host ...
      instance i runs on host i (modulo the hosts given), through that prefix
"""
from __future__ import annotations

import argparse
import random
import shlex
import sys

from proc import InstanceProcess


def words(rng: random.Random, n: int):
    return [rng.randrange(1000) for _ in range(n)]


def warm(insts, prompt, decode: int) -> None:
    """Serves one prompt on every instance both ways, untimed: the first
    stores its blocks, then each maps them and recomputes them."""
    insts[0].request(op="serve", prompt=prompt, decode=decode)
    for inst in insts:
        inst.request(op="serve", prompt=prompt, decode=decode, store=False)
        inst.request(op="serve", prompt=prompt, decode=decode, reuse=False, store=False)


def serve_both(inst, prompt, decode: int, maru_first: bool):
    """The request through Maru (reuse, then store) and recomputed, in that
    order or the other: (Maru's answer, the recompute's)."""
    def maru():
        return inst.request(op="serve", prompt=prompt, decode=decode)

    def recompute():
        return inst.request(op="serve", prompt=prompt, decode=decode, reuse=False, store=False)

    if maru_first:
        first = maru()
        return first, recompute()
    first = recompute()
    return maru(), first


def run(server: str, args) -> bool:
    rng = random.Random(7)
    system = words(rng, args.system)
    convs = [list(system) for _ in range(args.conversations)]
    hosts = [shlex.split(h) for h in args.host] or [[]]
    insts = [InstanceProcess(server, args.dir, args.block, name=f"tiny-llm-{i}",
                             prefix=hosts[i % len(hosts)])
             for i in range(args.instances)]
    ok, req = True, 0
    t_hit = t_recompute = t_store = 0.0
    hits = misses = 0
    if args.host:
        print(f"   instance i runs on host i mod {len(hosts)}: " +
              ", ".join(f"{i} on {' '.join(hosts[i % len(hosts)])}" for i in range(args.instances)))
    print(f"   {args.instances} instances, {args.conversations} conversations sharing a "
          f"{args.system}-token system prompt, {args.turns} turns, {args.block}-token blocks")
    print("   each instance warmed first; each request served both ways by the same instance,"
          " taking turns going first")
    try:
        warm(insts, words(random.Random(-1), args.system + args.user), args.decode)
        print("   inst conv turn prompt  reused    TTFT Maru  TTFT recompute  speedup"
              "  stored after 1st token  tokens")
        for turn in range(1, args.turns + 1):
            for c, conv in enumerate(convs):
                conv += words(rng, args.user)  # the user's new message
                i = req % len(insts)
                maru, recomputed = serve_both(insts[i], conv, args.decode,
                                              maru_first=req % 2 == 0)
                req += 1
                same = maru["tokens"] == recomputed["tokens"]
                ok &= same
                t_store += maru["store_s"]
                if maru["hit_blocks"]:
                    hits += 1
                    t_hit += maru["ttft_s"]
                    t_recompute += recomputed["ttft_s"]
                    speedup = f"{recomputed['ttft_s'] / maru['ttft_s']:.1f}x"
                else:
                    misses += 1
                    speedup = "miss"
                blocks = len(conv) // args.block
                print(f"   {i:4d} {c:4d} {turn:4d} {len(conv):6d}"
                      f"  {maru['hit_blocks']:3d} / {blocks:<3d} {maru['ttft_s'] * 1e3:7.1f} ms"
                      f"  {recomputed['ttft_s'] * 1e3:11.1f} ms  {speedup:>7s}"
                      f"  {maru['stored_blocks']:3d} blocks in {maru['store_s'] * 1e3:5.1f} ms"
                      f"  {'equal' if same else 'DIFFER'}", flush=True)
                conv += maru["tokens"]  # the reply becomes part of the next turn's prompt
    finally:
        for inst in insts:
            inst.close()
    if hits:
        print(f"   {hits} requests reused blocks: TTFT {t_hit * 1e3:.0f} ms with Maru, "
              f"{t_recompute * 1e3:.0f} ms recomputing ({t_recompute / t_hit:.1f}x)")
    print(f"   {misses} misses (no block of the prompt stored yet) computed everything, as a "
          f"recompute does; storing every request's new blocks took {t_store * 1e3:.0f} ms "
          f"in all, after the first token")
    print(f"   generated tokens {'identical in every request' if ok else 'DIFFER'}")
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
    ap.add_argument("--host", action="append", default=[],
                    help="a command prefix that runs an instance on a host (repeat per host)")
    args = ap.parse_args()
    if args.server:
        return 0 if run(args.server, args) else 1
    from maru_node import MaruNode  # from the build tree (PYTHONPATH=build/python)
    with MaruNode() as node:
        return 0 if run(node.url, args) else 1


if __name__ == "__main__":
    sys.exit(main())
