"""An inference instance with LMCache's storage stack (lmcache_engine.py)
over Maru, built from an LMCache config file: reads JSON requests on stdin,
one per line, answers each with one JSON line.

  {"op": "store", "prompt": [...], "tags": {...}}   -> {"stored": N}
      prefill, then LMCache's store (allocate, from_gpu, batched_put)
  {"op": "load", "prompt": [...], "n_decode": D, "tags": {...}}
      LMCache's retrieve (enable_async_loading: lookup-and-prefetch),
      then the rest of the prompt and D decoded tokens
  {"op": "twin", "prompt": [...], "chunks": K, "n_decode": D}
      the same request reusing K chunks of KV this process computed
  -> {"chunks", "loaded", "prefill", "decode", "tokens"} for load and twin;
     load with --pool adds "in_pool": per chunk read, whether its tensor
     lay in this process's mappings of the pool file
  {"op": "backends"} -> {name: module.class} of the storage backends
  {"op": "regions"}  -> the maru handler's regions alive (in-tree path),
      after the garbage collector ran: what holds leases still

``tags`` are the request's ``lmcache.tag.*`` configs (from vLLM's
``kv_transfer_params``). Usage: lmcache_instance.py --config FILE.yaml [--pool POOL_FILE]
(LMCACHE_CONFIG_FILE, ${VARS} already substituted).
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

from lmcache_engine import Engine, EngineConfig
from model import Config, TinyLM, deterministic
from test_maru import in_mapping


def served(s, pool: str = "") -> dict:
    out = {"chunks": s.chunks, "loaded": s.loaded, "prefill": s.prefill_logits.tolist(),
           "decode": s.decode_logits.tolist(), "tokens": s.tokens}
    if pool:  # did attention read the chunks where they lie in the pool?
        out["in_pool"] = [in_mapping(a, n, pool) for a, n in s.spans]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--pool", default="", help="the pool file, to check where reads lie")
    args = ap.parse_args()
    deterministic()
    model = TinyLM(Config())
    engine = Engine(model, EngineConfig.from_yaml(Path(args.config).read_text(), {}),
                    model_name=model.cfg.tag())
    print(json.dumps({"ready": True}), flush=True)
    try:
        for line in sys.stdin:
            req = json.loads(line)
            tags = {f"lmcache.tag.{k}": v for k, v in (req.get("tags") or {}).items()}
            if req["op"] == "store":
                out = {"stored": engine.store(req["prompt"], tags)}
            elif req["op"] == "load":
                load = engine.retrieve_async if engine.config.enable_async_loading \
                    else engine.retrieve
                out = served(load(req["prompt"], req["n_decode"], request_configs=tags),
                             args.pool)
            elif req["op"] == "twin":
                out = served(engine.twin(req["prompt"], req["chunks"], req["n_decode"]))
            elif req["op"] == "backends":
                out = {name: type(b).__module__ + "." + type(b).__name__
                       for name, b in engine.storage.storage_backends.items()}
            elif req["op"] == "regions":
                gc.collect()
                maru = engine.storage.storage_backends.get("MaruBackend")
                table = getattr(getattr(maru, "_handler", None), "mapper", None)
                out = {"owned": table.get_region_ids() if table else [],
                       "read": table.get_read_region_ids() if table else []}
            else:
                out = {"error": f"unknown op {req['op']!r}"}
            print(json.dumps(out), flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
