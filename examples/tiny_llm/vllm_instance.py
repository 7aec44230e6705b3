"""An instance of the paged engine with the maru.vllm connector, as a process.

Reads JSON requests on stdin, one per line, answers each with JSON lines:

  {"op": "generate", "prompt": [...], "decode": N, "save": PATH,
   "pause_at": [STEP, LAYER], "stall_at": [STEP, LAYER]}
      -> {"tokens", "loaded_tokens", "recomputed_tokens", "steps"}; the
         prefill and decode logits go to PATH (torch.save).
      pause_at: after save_kv_layer of that layer in that step, answers
         {"paused": [STEP, LAYER]} and waits for a line {"op": "go"} before
         going on (a saver caught between two layers, for overlap tests).
      stall_at: same place, answers {"stalled": [STEP, LAYER]} and waits
         for nothing more: for tests that SIGKILL it there.

Usage: vllm_instance.py --server URL --namespace NS [--block 16]
                        [--blocks 256] [--name NAME] [--extra JSON]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from model import Config, TinyLM, deterministic
from paged_engine import PagedEngine


def say(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def generate(engine: PagedEngine, req: dict) -> dict:
    stop = {tuple(req[k]): k for k in ("pause_at", "stall_at") if req.get(k)}

    def hook(step: int, layer: int) -> None:
        what = stop.get((step, layer))
        if what == "pause_at":
            say({"paused": [step, layer]})
            json.loads(sys.stdin.readline() or "{}")  # {"op": "go"}
        elif what == "stall_at":
            say({"stalled": [step, layer]})
            while True:  # until SIGKILL; EOF on stdin means the test is gone
                if not sys.stdin.readline():
                    sys.exit(1)

    r = engine.generate(req["prompt"], req.get("decode", 0), hook if stop else None)
    if req.get("save"):
        torch.save({"prefill": r.prefill_logits, "decode": r.decode_logits}, req["save"])
    return {"tokens": r.tokens, "loaded_tokens": r.loaded_tokens,
            "recomputed_tokens": r.recomputed_tokens, "steps": r.steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--blocks", type=int, default=256)
    ap.add_argument("--name", default="vllm-a")
    ap.add_argument("--extra", default="{}", help="more kv_connector_extra_config, JSON")
    args = ap.parse_args()
    deterministic()
    model = TinyLM(Config())
    extra = {"maru_server": args.server, "maru_namespace": args.namespace,
             "maru_instance": args.name, **json.loads(args.extra)}
    engine = PagedEngine(model, args.block, args.blocks, extra)
    # Warm up without the connector: oneDNN builds its kernels at first use.
    PagedEngine(model, args.block, 8).generate(list(range(args.block + 1)), 1)
    say({"ready": True, "t": time.time()})
    for line in sys.stdin:
        req = json.loads(line)
        say(generate(engine, req))
    engine.close()


if __name__ == "__main__":
    main()
