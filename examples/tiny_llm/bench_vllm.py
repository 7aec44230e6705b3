#!/usr/bin/python3
"""The vLLM connector: its overhead over the raw package, and the cost of
bf16 and of the harness's paths, side by side in one run.

A writer engine (vllm_engine.Engine, in this process) prefills prompts of
n blocks + 1 block and stores their chunks. Then, for each length, taking
turns per repetition:

  connector   the connector's load alone, as vLLM calls it: scheduler
              get_num_new_matched_tokens, update_state_after_alloc,
              build_connector_meta; worker bind_connector_metadata,
              start_load_kv, wait_for_layer_load of every layer,
              wait_for_save, get_block_ids_with_load_errors
  raw         the same bytes into the same blocks with the maru package
              directly: count_prefix, lookup_prefix, one read_into_batch
              per layer

in fp32 and in bf16 (half the bytes). Second, one request end to end (B
loads the n-block prefix, computes the last block, samples one token) on
each harness path: the worker in-process ("uni") with FlashAttention NHD
(the base), HND, FlashInfer, MLA, bf16; worker processes ("mp", the
SchedulerOutput pickled), TP=2, PP=2; and the same request computed
without a connector. Prints medians and ratios as Markdown (--write puts
them into docs/notes/vllm-connector.md).
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
import uuid
from typing import Any, Dict, List

from doc_section import write_section
from maru_node import MaruNode
from model import deterministic, random_prompt
from vllm_instance import make_engine
from vllm_types import ForwardContext, NewRequestData, Request, SchedulerOutput

BEGIN, END = "<!-- bench_vllm: begin -->", "<!-- bench_vllm: end -->"
BLOCK = 16
PATHS = {
    "uni fa-nhd fp32": {},
    "uni fa-hnd fp32": {"hnd": True},
    "uni flashinfer fp32": {"layout": "flashinfer"},
    "uni mla fp32": {"mla": True},
    "uni fa-nhd bf16": {"dtype": "bfloat16"},
    "mp fa-nhd fp32": {"executor": "mp"},
    "mp tp2 fp32": {"executor": "mp", "tp": 2},
    "mp pp2 fp32": {"executor": "mp", "pp": 2},
}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def connector_load(eng: Any, p: List[int]) -> None:
    """The connector's calls for a load of ``p``'s prefix, without the model."""
    sched, runner = eng.connector, eng.executor.runner
    worker = runner.connector
    req = Request(f"bench-{uuid.uuid4().hex[:8]}", p)
    got, _ = sched.get_num_new_matched_tokens(req, 0)
    assert eng.kv.allocate_slots(req, got + BLOCK, delay_cache_blocks=True) is not None
    try:
        sched.update_state_after_alloc(req, eng.kv.get_blocks(req.request_id), got)
        meta = sched.build_connector_meta(SchedulerOutput(
            [NewRequestData(req.request_id, p, eng.kv.get_block_ids(req.request_id), got)]))
        worker.bind_connector_metadata(meta)
        worker.start_load_kv(ForwardContext())
        for name in runner.kv:
            worker.wait_for_layer_load(name)
        worker.wait_for_save()
        assert not worker.get_block_ids_with_load_errors()
        worker.clear_connector_metadata()
    finally:
        sched.request_finished(req, eng.kv.get_block_ids(req.request_id)[0])
        eng.kv.free_request(req.request_id)


def raw_load(eng: Any, p: List[int]) -> None:
    """The same copies with the package itself: no scheduler, no metadata,
    no thread: count_prefix, lookup_prefix, one read_into_batch per layer."""
    from maru.vllm.keys import rank_path
    from maru.vllm.paged import layer_ops

    w = eng.executor.runner.connector._worker
    paths = [rank_path(b) for b in
             eng.connector._scheduler._paths(p)[:(len(p) - 1) // BLOCK]]
    client = w.store.client
    req = Request(f"raw-{uuid.uuid4().hex[:8]}", p)
    n = client.count_prefix(paths)
    assert eng.kv.allocate_slots(req, n * BLOCK + BLOCK, delay_cache_blocks=True) is not None
    try:
        (table,) = eng.kv.get_block_ids(req.request_id)
        chunks = client.lookup_prefix(paths[:n])
        for layer, buffers in enumerate(w.buffers):
            errors = client.read_into_batch(layer_ops(
                w.layout, buffers, layer, [(c, [table[i]], 0) for i, c in enumerate(chunks)]))
            assert not any(errors)
        client.release_batch(chunks)
    finally:
        eng.kv.free_request(req.request_id)


def conf(node: Any, ns: str, **more: Any) -> Dict[str, Any]:
    return {"server": node.url, "namespace": ns, "name": "bench", "block": BLOCK,
            "blocks": 160, "budget": 160 * BLOCK, "threshold": 160 * BLOCK, **more}


def store(node: Any, ns: str, p: List[int], **more: Any) -> None:
    eng = make_engine(conf(node, ns, threshold=BLOCK, **more))
    try:
        eng.generate([p], 1)
    finally:
        eng.close()


def overhead(node: Any, n: int, reps: int) -> Dict[str, float]:
    out: Dict[str, float] = {}
    for dtype in ("float32", "bfloat16"):
        ns = f"bench-{n}-{dtype}-{uuid.uuid4().hex[:6]}"
        p = random_prompt(n, (n + 1) * BLOCK)
        store(node, ns, p, dtype=dtype)
        eng = make_engine(conf(node, ns, dtype=dtype, role="kv_consumer"))
        samples: Dict[str, List[float]] = {"connector": [], "raw": []}
        try:
            for i in range(reps):
                order = ("connector", "raw") if i % 2 == 0 else ("raw", "connector")
                for k in order:
                    fn = connector_load if k == "connector" else raw_load
                    samples[k].append(timed(lambda: fn(eng, p)))
        finally:
            eng.close()
        for k, v in samples.items():
            out[f"{k} {dtype}"] = statistics.median(v)
    return out


def paths(node: Any, n: int, reps: int) -> Dict[str, float]:
    p = random_prompt(10_000 + n, (n + 1) * BLOCK)
    engines = {}
    try:
        for name, more in PATHS.items():
            ns = f"paths-{n}-{uuid.uuid4().hex[:6]}"
            store(node, ns, p, **more)
            engines[name] = make_engine(conf(node, ns, role="kv_consumer", **more))
        engines["no connector"] = make_engine({"connector": False, "block": BLOCK,
                                               "blocks": 160, "budget": 160 * BLOCK,
                                               "threshold": 160 * BLOCK})
        samples: Dict[str, List[float]] = {k: [] for k in engines}
        for i in range(reps):
            for name, eng in (list(engines.items()) if i % 2 == 0
                              else reversed(list(engines.items()))):
                def one():
                    r = eng.generate([p], 1)[0]
                    assert name == "no connector" or r.loaded_tokens == n * BLOCK
                    # vLLM's own prefix cache would serve the next turn: empty it
                    eng.kv.cached.clear()
                    for b in eng.kv.blocks:
                        b.block_hash = None
                samples[name].append(timed(one))
    finally:
        for eng in engines.values():
            eng.close()
    return {k: statistics.median(v) for k, v in samples.items()}


def tables(rows: List[Any]) -> str:
    ms = lambda s: f"{s * 1e3:.2f}"  # noqa: E731
    out = ["| prefix tokens | connector fp32 ms | raw fp32 ms | **connector / raw fp32** | "
           "connector bf16 ms | raw bf16 ms | **connector / raw bf16** | "
           "**bf16 / fp32 (connector)** |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, o, _ in rows:
        cf, rf = o["connector float32"], o["raw float32"]
        cb, rb = o["connector bfloat16"], o["raw bfloat16"]
        out.append(f"| {n * BLOCK} | {ms(cf)} | {ms(rf)} | **{cf / rf:.2f}** | {ms(cb)} | "
                   f"{ms(rb)} | **{cb / rb:.2f}** | **{cb / cf:.2f}** |")
    out += ["", "One request end to end (load the prefix, compute the last block, sample "
            "one token), ms, and its ratio to `uni fa-nhd fp32`:", ""]
    names = list(rows[0][2])
    out.append("| path | " + " | ".join(f"{n * BLOCK} tokens" for n, _, _ in rows) + " |")
    out.append("|---|" + "---:|" * len(rows))
    for name in names:
        cells = [f"{ms(pm[name])} ({pm[name] / pm['uni fa-nhd fp32']:.2f}×)"
                 for _, _, pm in rows]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", default="16,64", help="prefix lengths in blocks")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--write", action="store_true", help="update docs/notes/vllm-connector.md")
    args = ap.parse_args()
    deterministic()
    rows = []
    with MaruNode(pool_size=768 << 20) as node:
        for n in (int(x) for x in args.blocks.split(",")):
            o = overhead(node, n, args.reps)
            pm = paths(node, n, args.reps)
            rows.append((n, o, pm))
            print(f"{n} blocks: " + ", ".join(f"{k} {v * 1e3:.2f} ms"
                                              for k, v in {**o, **pm}.items()), file=sys.stderr)
    text = tables(rows) + f"\n\n(medians of {args.reps} turns; block {BLOCK} tokens, one " \
        "chunk per block: 128 KiB in fp32)"
    print(text)
    if args.write:
        write_section("vllm-connector.md", BEGIN, END,
                      f"{text}\n\n(measured {datetime.date.today().isoformat()})\n")


if __name__ == "__main__":
    main()
