#!/usr/bin/python3
"""The vLLM connector: layer-wise overlap, and its overhead over the raw package.

A writer engine (in this process, its own connector and client) prefills
prompts of n blocks + 1 block and stores their chunks. Then, for each
length, taking turns per repetition, this process measures:

  layerwise   B's first step with the connector, maru_layerwise on: layer i
              of the prefix is copied while the model computes layer i-1
  whole       the same, maru_layerwise off: every layer is copied, then
              the model runs
  compute     the same step's compute alone (the prefix already in the cache)
  connector   the connector's load alone: scheduler calls, metadata,
              start_load_kv, wait_for_layer_load of every layer
  raw         the same bytes into the same blocks with the maru package
              directly: count_prefix, lookup_prefix, one read_into_batch
              per layer

and prints medians as a Markdown table with the ratios whole/layerwise and
connector/raw. With the layer-wise API, a second table: B loads while the
writer (another process, paused between layers 0 and 1 of the step that
completes the prefix's last chunk, with layer 0 published) is still saving; from the writer's
release to B's first token, with and without layer-wise loading.
(--write puts both into docs/benchmarks.md.)
"""
from __future__ import annotations

import argparse
import datetime
import random
import re
import statistics
import sys
import time
import uuid

from maru_node import REPO, MaruNode
from model import Config, TinyLM, deterministic
from paged_engine import PagedEngine
from vllm_types import ForwardContext, KVCacheBlocks, NewRequestData, Request, SchedulerOutput

BEGIN, END = "<!-- bench_vllm: begin -->", "<!-- bench_vllm: end -->"
BLOCK = 16


def prompt(seed: int, n: int):
    rng = random.Random(seed)
    return [rng.randrange(1000) for _ in range(n)]


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def connector_load(eng: PagedEngine, p) -> None:
    """The connector's calls for a load, without the model."""
    req = Request(f"bench-{uuid.uuid4().hex[:8]}", p)
    got, _ = eng.sched.get_num_new_matched_tokens(req, 0)
    table = eng._alloc([], got + BLOCK)
    try:
        eng.sched.update_state_after_alloc(req, KVCacheBlocks(table), got)
        meta = eng.sched.build_connector_meta(SchedulerOutput(
            [NewRequestData(req.request_id, p, (table,), got)], num_scheduled_tokens={}))
        eng.worker.bind_connector_metadata(meta)
        eng.worker.start_load_kv(ForwardContext())
        for name in eng.names:
            eng.worker.wait_for_layer_load(name)
        eng.worker.wait_for_save()
        assert not eng.worker.get_block_ids_with_load_errors()
        eng.worker.clear_connector_metadata()
    finally:
        eng.sched.request_finished(req, table)
        eng.free.extend(table)


def raw_load(eng: PagedEngine, p) -> None:
    """The same copies with the package itself: no scheduler, no metadata, no
    thread: count_prefix, lookup_prefix, one read_into_batch per layer."""
    from maru.vllm.paged import layer_ops

    w = eng.worker._worker
    st = eng.sched._scheduler
    paths = st._state("raw", p).paths[:(len(p) - 1) // BLOCK]
    st.requests.pop("raw")
    client = w.store.client
    n = client.count_prefix(paths)
    table = eng._alloc([], n * BLOCK + BLOCK)
    try:
        chunks = client.lookup_prefix(paths[:n])
        for layer, name in enumerate(eng.names):
            errors = client.read_into_batch(layer_ops(
                w.layout, eng.kv[name], layer, [(c, [table[i]]) for i, c in enumerate(chunks)]))
            assert not any(errors)
        for c in chunks:
            c.release()
    finally:
        eng.free.extend(table)


def measure(model, node, ns: str, n_blocks: int, reps: int):
    p = prompt(n_blocks, (n_blocks + 1) * BLOCK)
    ext = {"maru_server": node.url, "maru_namespace": ns, "maru_instance": "bench"}
    writer = PagedEngine(model, BLOCK, n_blocks + 4, dict(ext, maru_instance="bench-writer"))
    writer.generate(p, 0)
    writer.close()
    blocks = n_blocks + 4
    lw = PagedEngine(model, BLOCK, blocks, dict(ext, maru_layerwise=True), role="kv_consumer")
    wh = PagedEngine(model, BLOCK, blocks, dict(ext, maru_layerwise=False), role="kv_consumer")
    plain = PagedEngine(model, BLOCK, blocks)
    table = list(range(n_blocks + 1))
    plain.forward(p, 0, table)  # fills the cache: "compute" redoes only the last block
    samples = {k: [] for k in ("layerwise", "whole", "compute", "connector", "raw")}
    for _ in range(reps):
        for name, eng in (("layerwise", lw), ("whole", wh)):
            r = None

            def one():
                nonlocal r
                r = eng.generate(p, 0)
            samples[name].append(timed(one))
            assert r.loaded_tokens == n_blocks * BLOCK and r.recomputed_tokens == 0
        samples["compute"].append(timed(lambda: plain.forward(p[-BLOCK:], n_blocks * BLOCK,
                                                              table)))
        samples["connector"].append(timed(lambda: connector_load(lw, p)))
        samples["raw"].append(timed(lambda: raw_load(lw, p)))
    for eng in (lw, wh):
        eng.close()
    return {k: statistics.median(v) for k, v in samples.items()}


def measure_with_saver(model, node, n_blocks: int, reps: int):
    """Seconds from the writer's release to B's first token, per mode."""
    import json
    import threading

    from maru_node import wait_for
    from proc import InstanceProcess

    ns = f"saver-{n_blocks}-{uuid.uuid4().hex[:6]}"
    argv = ["--server", node.url, "--namespace", ns, "--block", str(BLOCK),
            "--blocks", str(n_blocks + 4), "--name", "bench-saver", "--extra", "{}"]
    samples = {"layerwise": [], "whole": []}
    with InstanceProcess(node.url, script="vllm_instance.py", argv=argv) as a:
        seed = 1000 * n_blocks
        for _ in range(reps):
            for mode in samples:
                seed += 1
                p = prompt(seed, (n_blocks + 1) * BLOCK)
                a.send(op="generate", prompt=p, decode=0, pause_at=[n_blocks - 1, 1])
                assert a.read() == {"paused": [n_blocks - 1, 1]}
                b = PagedEngine(model, BLOCK, n_blocks + 4,
                                {"maru_server": node.url, "maru_namespace": ns,
                                 "maru_layerwise": mode == "layerwise"}, role="kv_consumer")
                out = {}
                thread = threading.Thread(target=lambda: out.update(r=b.generate(p, 0)))
                thread.start()
                w = b.worker._worker
                assert wait_for(lambda: w.loading is not None and w.loading.layers[0].is_set()
                                if mode == "layerwise" else w.loading is not None)
                t0 = time.perf_counter()
                a.send(op="go")
                thread.join()
                samples[mode].append(time.perf_counter() - t0)
                a.read()
                b.close()
                assert out["r"].loaded_tokens == n_blocks * BLOCK, json.dumps(
                    out["r"].loaded_tokens)
    return {k: statistics.median(v) for k, v in samples.items()}


def saver_table(rows) -> str:
    out = ["| prefix tokens | layerwise ms | whole ms | **whole / layerwise** |",
           "|---:|---:|---:|---:|"]
    for n, m in rows:
        out.append(f"| {n * BLOCK} | {m['layerwise'] * 1e3:.2f} | {m['whole'] * 1e3:.2f} | "
                   f"**{m['whole'] / m['layerwise']:.2f}** |")
    return "\n".join(out)


def table(rows, chunk_kib: float, api: str) -> str:
    ms = lambda s: f"{s * 1e3:.2f}"  # noqa: E731
    out = ["| prefix tokens | prefix KiB | layerwise ms | whole ms | compute ms | "
           "**whole / layerwise** | connector load ms | raw load ms | **connector / raw** |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, m in rows:
        out.append(f"| {n * BLOCK} | {n * chunk_kib:.0f} | {ms(m['layerwise'])} | "
                   f"{ms(m['whole'])} | {ms(m['compute'])} | "
                   f"**{m['whole'] / m['layerwise']:.2f}** | {ms(m['connector'])} | "
                   f"{ms(m['raw'])} | **{m['connector'] / m['raw']:.2f}** |")
    out.append("")
    out.append(f"(store: {api}; medians of the repetitions; block {BLOCK} tokens, "
               f"one chunk per block of {chunk_kib:.0f} KiB)")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", default="16,64,128", help="prefix lengths in blocks")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    deterministic()
    model = TinyLM(Config())
    PagedEngine(model, BLOCK, 8).generate(list(range(BLOCK + 1)), 1)  # oneDNN warm-up
    rows = []
    with MaruNode(pool_size=512 << 20) as node:
        for n in (int(x) for x in args.blocks.split(",")):
            rows.append((n, measure(model, node, f"bench-{n}-{uuid.uuid4().hex[:6]}", n,
                                    args.reps)))
            print(f"{n} blocks: " + ", ".join(f"{k} {v * 1e3:.2f} ms"
                                              for k, v in rows[-1][1].items()), file=sys.stderr)
        api = "layer-wise API (open_partial, wait_part, read_into_batch)"
        saver_rows = []
        for n in (int(x) for x in args.blocks.split(",")):
            saver_rows.append((n, measure_with_saver(model, node, n, args.reps)))
            print(f"{n} blocks, writer still saving: " + ", ".join(
                f"{k} {v * 1e3:.2f} ms" for k, v in saver_rows[-1][1].items()),
                file=sys.stderr)
    cfg = model.cfg
    chunk_kib = cfg.n_layers * 2 * BLOCK * cfg.d_model * 4 / 1024
    text = table(rows, chunk_kib, api)
    if saver_rows:
        text += "\n\nWhile the writer is still saving (from its release to B's first token):\n\n"
        text += saver_table(saver_rows)
    print(text)
    if args.write:
        doc = REPO / "docs" / "benchmarks.md"
        body = doc.read_text()
        stamp = datetime.date.today().isoformat()
        block = f"{BEGIN}\n{text}\n\n(measured {stamp})\n{END}"
        if BEGIN in body:
            body = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, body,
                          flags=re.S)
        else:
            body += "\n" + block + "\n"
        doc.write_text(body)


if __name__ == "__main__":
    main()
