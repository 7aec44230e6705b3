"""One inference instance as a process: reads JSON requests on stdin, one per
line, and answers each with one JSON line on stdout.

  {"op": "serve", "prompt": [...], "decode": N, "store": true, "reuse": true,
   "save": PATH}
      -> {"tokens", "hit_blocks", "stored_blocks", "ttft_s", "fetch_s", "store_s"}; with "save",
         the prefill and decode logits are written to PATH (torch.save)
  {"op": "stall", "prompt": [...], "blocks": K}
      stores the prompt's first K blocks, then starts storing block K (creates
      its chunk, writes half of it) and answers {"stalled": PATH} without
      sealing: a writer caught mid-store, for tests that SIGKILL it here

Usage: instance.py --server URL [--dir /tiny_llm] [--block 32] [--layout block]
                   [--name NAME]
  --server: a maru-server (unix:///...), "redis:PORT", "memory" (a private
  in-memory store) or "none" (always recompute)
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from engine import Instance
from kvstore import MemoryKVStore
from model import Config, TinyLM, deterministic


def open_store(server: str, directory: str, name: str):
    if server == "memory":
        return MemoryKVStore()
    if server == "none":
        return None
    if server.startswith("redis:"):
        from redis_store import RedisKVStore
        return RedisKVStore(int(server.split(":", 1)[1]))
    from maru_store import MaruKVStore
    return MaruKVStore(server, directory, instance=name)


def serve(inst: Instance, req: dict) -> dict:
    r = inst.serve(req["prompt"], req.get("decode", 0), store=req.get("store", True),
                   reuse=req.get("reuse", True))
    if req.get("save"):
        torch.save({"prefill": r.prefill_logits, "decode": r.decode_logits}, req["save"])
    return {"tokens": r.tokens, "hit_blocks": r.hit_blocks,
            "stored_blocks": r.stored_blocks, "ttft_s": r.ttft_s, "fetch_s": r.fetch_s,
            "store_s": r.store_s}


def stall(inst: Instance, req: dict) -> dict:
    """Stores K blocks, then leaves block K created, half written, unsealed."""
    prompt, k = req["prompt"], req["blocks"]
    lay = inst.layout
    keys = inst.block_keys(prompt)
    assert lay.kind == "block" and k < len(keys)
    cache = inst.model.new_cache(len(prompt))
    inst.model.forward(prompt, cache)
    items = [(keys[b], lay.pack(cache, b)[0], keys[b - 1] if b else None) for b in range(k)]
    stored = inst.store.put_many(items)
    tensor = lay.pack(cache, k)[0]
    path = inst.store.path(keys[k])
    chunk = inst.store.client.create(path, tensor.numel() * tensor.element_size(),
                                     parent=inst.store.path(keys[k - 1]) if k else None)
    flat = chunk.torch(tensor.dtype, (tensor.numel(),))
    half = tensor.numel() // 2
    flat[:half].copy_(tensor.reshape(-1)[:half])
    inst._stalled = chunk  # held open (unsealed) until the process dies
    return {"stored_blocks": stored, "stalled": path}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--dir", default="/tiny_llm")
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--layout", default="block")
    ap.add_argument("--name", default="tiny-llm")
    args = ap.parse_args()
    deterministic()
    store = open_store(args.server, args.dir, args.name)
    inst = Instance(TinyLM(Config()), store, args.block, args.layout)
    # Warm up (oneDNN builds its kernels at first use), so that the first
    # request's time to first token is not the process's start-up time.
    Instance(inst.model, None, args.block).serve(list(range(2 * args.block + 1)), 2)
    ops = {"serve": serve, "stall": stall}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        print(json.dumps(ops[req["op"]](inst, req)), flush=True)
    if store is not None:
        store.close()


if __name__ == "__main__":
    main()
