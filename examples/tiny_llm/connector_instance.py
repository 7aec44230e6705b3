"""An inference instance that saves KV through the LMCache connector: reads
JSON requests on stdin, one per line, answers each with one JSON line.
(SGLang's instance is sglang_instance.py.)

  {"op": "save", "prompt": [...]}  -> {"stored": N}
      prefill, then store through the connector as the engine does
      (engines.lmcache_save)
  {"op": "stall", "prompt": [...], "pages": K}
      stores the first K chunks, then starts storing the rest and stops in
      the middle of copying them into the pool (chunks created, half
      written, never published); answers {"stalled": true} and waits
      there, for tests that SIGKILL it

Usage: connector_instance.py --engine lmcache --server URL
         [--dir NAMESPACE] [--block CHUNK] [--name NAME]
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

import maru
import maru._batchio
from engines import lmcache_metadata, lmcache_save, pack_2ltd
from model import Config, TinyLM, deterministic


def stall_here() -> None:
    print(json.dumps({"stalled": True}), flush=True)
    sys.stdin.readline()  # until the test kills this process
    sys.exit(1)


def stall_copies() -> None:
    """From now on the connectors' copy seam copies half a batch, then stops for good."""
    copy = maru._batchio.write_from_batch

    def half_then_stall(client, ops):
        copy(client, ops[:len(ops) // 2])
        stall_here()

    maru._batchio.write_from_batch = half_then_stall


class LMCacheSide:
    def __init__(self, model: TinyLM, args):
        from maru.lmcache import MaruBackend

        self.model, self.chunk = model, args.block
        self.backend = MaruBackend(
            {"maru_path": args.server, "extra_config": {"maru_namespace": args.dir,
                                                         "maru_instance_id": args.name}},
            lmcache_metadata(model.cfg, args.block))

    def save(self, prompt) -> int:
        return lmcache_save(self.model, self.backend, prompt, self.chunk)

    def stall(self, prompt, pages: int) -> None:
        self.save(prompt[:pages * self.chunk])
        cache = self.model.new_cache(len(prompt))
        self.model.forward(prompt, cache)
        shape = torch.Size([2, self.model.cfg.n_layers, self.chunk, self.model.cfg.d_model])
        full = torch.empty(shape)
        pack_2ltd(cache, pages * self.chunk, (pages + 1) * self.chunk, full)
        (obj,) = self.backend.batched_allocate(shape, torch.float32, 1)
        n = full.numel() // 2  # the copy into the pool stops halfway
        obj.tensor.view(-1)[:n] = full.view(-1)[:n]
        self.obj = obj  # allocated, half written, never published
        stall_here()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", required=True, choices=("lmcache",))
    ap.add_argument("--server", required=True)
    ap.add_argument("--dir", default="tiny_llm")
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--layout", default="page_first")
    ap.add_argument("--name", default="tiny-llm")
    args = ap.parse_args()
    deterministic()
    model = TinyLM(Config())
    side = LMCacheSide(model, args)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "save":
            print(json.dumps({"stored": side.save(req["prompt"])}), flush=True)
        elif req["op"] == "stall":
            side.stall(req["prompt"], req["pages"])


if __name__ == "__main__":
    main()
