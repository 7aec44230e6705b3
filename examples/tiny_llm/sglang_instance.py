"""An SGLang instance with HiCache and an L3 storage backend
(sglang_engine.py), built from its server arguments: reads JSON requests on
stdin, one per line, answers each with one JSON line.

  {"op": "store", "prompt": [...]}         -> {"stored": [tokens per rank]}
      prefill, the full pages to every rank's host pool, the backup threads
  {"op": "load", "prompt": [...], "n_decode": D}
      prefetch (the prefetch threads), host -> device, the rest, D tokens
  {"op": "twin", "prompt": [...], "pages": K, "n_decode": D, "source": [...]}
      the same request reusing K pages from this instance's own host pools
  -> {"hits", "prefill", "decode", "tokens", "kv_digest", "indexer_digest"}
  {"op": "load_and_store", "load": [...], "store": [...], "n_decode": D}
      stores one prompt while prefetching another: rank 0's backup thread
      and prefetch I/O thread meet inside the backend (answers "overlap")
  {"op": "stall", "prompt": [...], "pages": K}
      stores K pages, then stores the prompt and stops in the middle of
      copying its pages into the pool (chunks created, half written, never
      sealed); answers {"stalled": true} and waits to be killed
  {"op": "info"} -> {"backend": module.class, "zero_copy": bool, "calls": per rank}

Usage: sglang_instance.py --config JSON (EngineConfig's fields; "extra_config"
is SGLang's --hicache-storage-backend-extra-config, ${VARS} substituted).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading

import maru._batchio

from model import deterministic
from sglang_engine import Engine, EngineConfig


def served(s) -> dict:
    return {"hits": s.hits, "prefill": s.prefill_logits.float().tolist(),
            "decode": s.decode_logits.float().tolist(), "tokens": s.tokens,
            "kv_digest": s.kv_digest, "indexer_digest": s.indexer_digest}


def stall_copies() -> None:
    """From now on the backend's copy seam copies half a batch, then stops for good."""
    copy = maru._batchio.write_from_batch

    def half_then_stall(client, ops):
        copy(client, ops[:len(ops) // 2])
        print(json.dumps({"stalled": True}), flush=True)
        threading.Event().wait()  # until the test kills this process

    maru._batchio.write_from_batch = half_then_stall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    args = ap.parse_args()
    deterministic()
    engine = Engine(EngineConfig(**json.loads(args.config)))
    print(json.dumps({"ready": True}), flush=True)
    try:
        for line in sys.stdin:
            req = json.loads(line)
            op = req["op"]
            if op == "store":
                out = {"stored": engine.store(req["prompt"])}
            elif op == "load":
                out = served(engine.load(req["prompt"], req["n_decode"]))
            elif op == "twin":
                out = served(engine.twin(req["prompt"], req["pages"], req["n_decode"],
                                         req.get("source")))
            elif op == "load_and_store":
                rank0 = engine.controllers[0].hooks
                rank0.meet()
                stores = engine.store_begin(req["store"])
                loads = engine.load_begin(req["load"])
                result = engine.load_end(req["load"], loads, req["n_decode"])
                out = served(result)
                out["stored"] = engine.store_end(stores)
                out["overlap"] = rank0.met
            elif op == "stall":
                P = engine.page
                engine.store(req["prompt"][:req["pages"] * P])
                stall_copies()
                engine.store_begin(req["prompt"])
                sys.stdin.readline()  # until the test kills this process
                continue
            elif op == "info":
                b = engine.backends[0]
                out = {"backend": f"{type(b).__module__}.{type(b).__name__}",
                       "zero_copy": engine.controllers[0].zero_copy,
                       "calls": [c.hooks.calls for c in engine.controllers],
                       "paths": [b.path("x") for b in engine.backends]}
            else:
                out = {"error": f"unknown op {op!r}"}
            print(json.dumps(out), flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
