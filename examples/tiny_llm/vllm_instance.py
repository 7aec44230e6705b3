"""A vLLM instance of the tiny model with a KV connector, as a process.

The scheduler (vllm_engine.Engine) runs in this process; its workers run
here too (``"executor": "uni"``) or in processes of their own (``"mp"``).
Reads JSON requests on stdin, one per line, answers each with JSON lines:

  {"op": "generate", "prompts": [[...], ...], "max_tokens": N, "save": PATH,
   "kv_transfer_params": {...}, "pause_at": [STEP, LAYER], "stall_at": [STEP, LAYER]}
      -> {"results": [{"tokens", "loaded_tokens", "recomputed_tokens",
          "local_hit_tokens", "preemptions"}, ...], "stats": {...}};
         each request's prefill and decode logits go to PATH (torch.save,
         a list of {"prefill", "decode"}).
      pause_at (uni executor): after save_kv_layer of that layer in that
         step (steps of this request, from 0), answers {"paused": [STEP,
         LAYER]} and waits for a line {"op": "go"} before going on.
      stall_at: same place, answers {"stalled": [STEP, LAYER]} and waits
         for nothing more: for tests that SIGKILL it there.

Usage: vllm_instance.py --config JSON (harness_config's keys: server,
namespace, name, block, blocks, dtype, tp, pp, mla, layout, hnd, runner,
executor, threshold, budget, role, connector, module, extra)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Dict, Optional

import torch

from model import deterministic
from vllm_engine import Engine
from vllm_types import (AttentionConfig, CacheConfig, KVTransferConfig, ModelConfig,
                        ParallelConfig, SchedulerConfig, VllmConfig)


def say(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def harness_config(c: Dict[str, Any]) -> VllmConfig:
    """The VllmConfig of an instance described by ``c`` (see the module doc)."""
    extra = dict(c.get("extra") or {})
    if c.get("server") is not None:
        extra.setdefault("maru_server", c["server"])
        extra.setdefault("maru_namespace", c.get("namespace", "vllm"))
        extra.setdefault("maru_instance", c.get("name", "vllm"))
    ktc = None
    if c.get("connector", True):
        ktc = KVTransferConfig(kv_connector=c.get("kv_connector", "MaruConnector"),
                               kv_connector_module_path=c.get("module", "maru.vllm"),
                               kv_role=c.get("role", "kv_both"), kv_connector_extra_config=extra)
    block = c.get("block", 16)
    return VllmConfig(
        ktc, CacheConfig(block, c.get("blocks", 256), kernel_block_size=c.get("kernel_block")),
        ModelConfig("tiny-llm", c.get("dtype", "float32"), bool(c.get("mla", False))),
        ParallelConfig(c.get("tp", 1), c.get("pp", 1)),
        SchedulerConfig(c.get("budget", 8 * block), 16, c.get("threshold", block),
                        c.get("disable_hma")),
        AttentionConfig(c.get("backend")))


def make_engine(c: Dict[str, Any], hooks: Any = None) -> Engine:
    layout = c.get("layout", "mla" if c.get("mla") else "flash_attn")
    return Engine(harness_config(c), executor=c.get("executor", "uni"), layout=layout,
                  hnd=bool(c.get("hnd", False)), runner=c.get("runner", "003df29"), hooks=hooks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    args = ap.parse_args()
    deterministic()
    c = json.loads(args.config)
    stop: Dict[tuple, str] = {}
    base = {"step": 0}

    def hook(step: int, layer: int) -> None:
        what = stop.get((step - base["step"], layer))
        if what == "pause_at":
            say({"paused": [step - base["step"], layer]})
            json.loads(sys.stdin.readline() or "{}")  # {"op": "go"}
        elif what == "stall_at":
            say({"stalled": [step - base["step"], layer]})
            while True:  # until SIGKILL; EOF on stdin means the test is gone
                if not sys.stdin.readline():
                    sys.exit(1)

    engine = make_engine(c, hook)
    runner: Optional[Any] = getattr(engine.executor, "runner", None)
    say({"ready": True, "t": time.time()})
    try:
        for line in sys.stdin:
            req = json.loads(line)
            stop = {tuple(req[k]): k for k in ("pause_at", "stall_at") if req.get(k)}
            base["step"] = (runner.step_no + 1) if runner is not None else 0
            results = engine.generate(req["prompts"], req.get("max_tokens", 6),
                                      req.get("kv_transfer_params"))
            if req.get("save"):
                torch.save([{"prefill": r.prefill_logits, "decode": r.decode_logits}
                            for r in results], req["save"])
            say({"results": [{"tokens": r.tokens, "loaded_tokens": r.loaded_tokens,
                              "recomputed_tokens": r.recomputed_tokens,
                              "local_hit_tokens": r.local_hit_tokens,
                              "preemptions": r.preemptions} for r in results],
                 "stats": engine.log()})
    finally:
        engine.close()


if __name__ == "__main__":
    main()
