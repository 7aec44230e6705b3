"""What the engine connectors cost over the raw Python package, in one run.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/bench_connectors.py

Starts its own maru-server (examples/tiny_llm/maru_node.py) and stores and
loads N pages, side by side:

- SGLang: ``MaruHiCacheStorage.batch_set_v1`` / ``batch_get_v1`` between a
  page_first host KV pool and the store, against the same work written
  directly on ``maru.Client`` (create_batch, write_from_batch of every
  page's K and V from the host tensors, seal_batch; lookup_prefix,
  read_into_batch into the host tensors, release);
- LMCache: ``MaruBackend.batched_allocate`` + fill + ``batched_submit_put_task``
  and ``batched_get_blocking``, against ``Client.alloc`` + fill +
  ``Chunk.publish`` and ``lookup_prefix`` + ``Chunk.torch``;
- LMCache's own maru backend (the in-tree path, its control flow in
  examples/tiny_llm/lmcache_intree.py over ``maru.MaruHandler`` and
  ``maru_lmcache.CxlMemoryAdapter``): the same put and get;
- the original's API: ``MaruHandler.alloc`` + fill + ``batch_store`` of the
  handles, ``batch_retrieve``, ``batch_exists``, against ``alloc`` + fill +
  ``publish``, ``lookup_prefix``, ``count_prefix``.

A second table: SGLang's two paths in two dtypes, side by side: the v1
calls (``batch_set_v1`` / ``batch_get_v1``) with a host pool in fp16 and in
bf16 (the same bytes), and the legacy path in bf16 as SGLang's controller
drives it without ``interface_v1`` (``_generic_page_set``: the host pool's
flat ``get_data_page`` of each page, then ``batch_set``;
``_generic_page_get``: ``batch_get`` into ``get_dummy_flat_data_page``
tensors, then ``set_from_flat_data_page`` of each page): bf16 ÷ fp16 is
the cost of bf16, legacy ÷ v1 the cost of the legacy path, and its
``batch_get``/``batch_set`` alone what the backend's part of it costs.

A third table: ``MaruHandler.batch_exists`` (every key checked, no
prefix-stop: one ``count_prefix`` call, then one more after each miss)
against one prefix-stopping ``count_prefix`` of the same 64 keys, with 0
to 64 of them missing, with the pool's index (a Unix-socket client) and
without it (``MARU_INDEX=0``: every call a round trip, as over TCP).

Each turn runs both sides back to back, in alternating order; a ratio is
the median of the turns' ratios (connector ÷ raw), so that load from other
work slows both sides alike. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import asyncio
import os
import threading

import torch

import maru
from maru.lmcache import MaruBackend
from maru.sglang import MaruHiCacheStorage

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples" / "tiny_llm"))
from lmcache_engine import EngineConfig, Metadata  # noqa: E402
from lmcache_intree import MaruBackend as InTreeMaruBackend  # noqa: E402
from maru_node import MaruNode  # noqa: E402


class PageFirstPool:
    """SGLang's page_first MHA host pool: kv_buffer [2, tokens, layers, heads, dim]."""

    layout = "page_first"

    def __init__(self, pages: int, page_size: int, layers: int, heads: int, dim: int,
                 dtype: torch.dtype = torch.float16) -> None:
        self.page_size, self.size = page_size, pages * page_size
        self.layers, self.heads, self.dim, self.dtype = layers, heads, dim, dtype
        self.kv_buffer = torch.randn(2, self.size, layers, heads, dim).to(dtype)
        self.tok = layers * heads * dim * 2

    # SGLang's flat data pages (pool_host/mha.py), for the legacy path.
    def get_data_page(self, index, flat: bool = True) -> torch.Tensor:
        i = int(index)
        page = self.kv_buffer[:, i:i + self.page_size]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        return torch.zeros((2, self.layers, self.page_size, self.heads, self.dim),
                           dtype=self.dtype).flatten()

    def set_from_flat_data_page(self, index, data_page: torch.Tensor) -> None:
        i = int(index)
        self.kv_buffer[:, i:i + self.page_size] = data_page.reshape(
            2, self.page_size, self.layers, self.heads, self.dim)

    def page_views(self, page: int) -> Tuple[torch.Tensor, torch.Tensor]:
        lo = page * self.page_size
        return self.kv_buffer[0, lo:lo + self.page_size], self.kv_buffer[1, lo:lo + self.page_size]

    def get_page_buffer_meta(self, indices) -> Tuple[List[int], List[int]]:
        base, v = self.kv_buffer.data_ptr(), self.size * self.tok
        ptrs: List[int] = []
        for i in range(0, len(indices), self.page_size):
            k = base + int(indices[i]) * self.tok
            ptrs += [k, k + v]
        return ptrs, [self.page_size * self.tok] * len(ptrs)


def timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e6


def pair(name: str, connector: Callable[[], None], raw: Callable[[], None],
         raw_first: bool) -> Dict[str, float]:
    """Both sides of one call, back to back, in the given order."""
    if raw_first:
        r = timed(raw)
        return {f"{name}_raw": r, f"{name}_connector": timed(connector)}
    c = timed(connector)
    return {f"{name}_connector": c, f"{name}_raw": timed(raw)}


def sglang_turn(client: maru.Client, store: MaruHiCacheStorage, src: PageFirstPool,
                dst: PageFirstPool, pages: int, raw_first: bool) -> Dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    keys = [f"{tag}-{i}" for i in range(pages)]
    idx = torch.arange(pages * src.page_size)
    raw_paths = [f"/bench-raw/{k}" for k in keys]
    page_bytes = 2 * src.page_size * src.tok

    def page_ops(chunks: List[maru.Chunk], pool: PageFirstPool) -> list:
        ops = []
        for i, c in enumerate(chunks):
            k, v = pool.page_views(i)
            ops += [(c, k.numpy(), 0), (c, v.numpy(), page_bytes // 2)]
        return ops

    def raw_set() -> None:
        chunks = client.create_batch(raw_paths, [page_bytes] * pages)
        client.write_from_batch(page_ops(chunks, src))
        client.seal_batch(chunks)
        for c in chunks:
            c.release()

    def raw_get() -> None:
        chunks = client.lookup_prefix(raw_paths)
        client.read_into_batch(page_ops(chunks, dst))
        for c in chunks:
            c.release()

    # The connector loads into the pool it stored from (the same bytes), raw into dst.
    out = pair("sglang_set", lambda: store.batch_set_v1(keys, idx), raw_set, raw_first)
    out.update(pair("sglang_get", lambda: store.batch_get_v1(keys, idx), raw_get, raw_first))
    store.clear()
    client.unlink_batch(raw_paths)
    return out


SGLANG_PATHS = ("v1_fp16", "v1_bf16", "legacy_bf16")


def sglang_paths_turn(stores: Dict[str, MaruHiCacheStorage], pools: Dict[str, PageFirstPool],
                      pages: int, turn: int) -> Dict[str, float]:
    """Each path's set, then each path's get, in an order rotating by turn."""
    tag = uuid.uuid4().hex[:8]
    keys = {name: [f"{tag}-{name}-{i}" for i in range(pages)] for name in SGLANG_PATHS}
    P = pools["v1_fp16"].page_size
    idx = torch.arange(pages * P)

    out: Dict[str, float] = {}

    def set_(name: str) -> None:
        store, pool = stores[name], pools[name]
        if name.startswith("v1"):
            store.batch_set_v1(keys[name], idx)
        else:  # HiCacheController._generic_page_set
            data = [pool.get_data_page(idx[i * P]) for i in range(pages)]
            out["backend_set"] = timed(lambda: store.batch_set(keys[name], data))

    def get(name: str) -> None:
        store, pool = stores[name], pools[name]
        if name.startswith("v1"):
            store.batch_get_v1(keys[name], idx)
        else:  # HiCacheController._generic_page_get
            dummies = [pool.get_dummy_flat_data_page() for _ in range(pages)]
            got: list = []
            out["backend_get"] = timed(lambda: got.extend(store.batch_get(keys[name], dummies)))
            for i in range(pages):
                pool.set_from_flat_data_page(idx[i * P], got[i])

    order = SGLANG_PATHS[turn % 3:] + SGLANG_PATHS[:turn % 3]
    for name in order:
        out[f"{name}_set"] = timed(lambda: set_(name))
    for name in order:
        out[f"{name}_get"] = timed(lambda: get(name))
    for store in stores.values():
        store.clear()
    return out


def sglang_paths_table(node: MaruNode, pages: int, repeat: int, cases) -> None:
    print()
    print("| pages | call | v1 fp16 (µs) | v1 bf16 (µs) | legacy bf16 (µs) "
          "| of which batch_get/batch_set (µs) | bf16 ÷ fp16 (v1) | legacy ÷ v1 (bf16) "
          "| batch_get/batch_set ÷ v1 (bf16) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, (tokens, layers, heads, dim) in cases:
        pools = {name: PageFirstPool(pages, tokens, layers, heads, dim,
                                     torch.bfloat16 if "bf16" in name else torch.float16)
                 for name in SGLANG_PATHS}
        stores = {name: MaruHiCacheStorage({"model_name": "bench", "extra_config": {
            "maru_server": node.url, "maru_namespace": f"bench-{name}"}}, pools[name])
            for name in SGLANG_PATHS}
        turns = [sglang_paths_turn(stores, pools, pages, t) for t in range(repeat)]
        for call in ("set", "get"):
            med = {n: statistics.median(t[f"{n}_{call}"] for t in turns) for n in SGLANG_PATHS}
            bf16 = statistics.median(t[f"v1_bf16_{call}"] / t[f"v1_fp16_{call}"] for t in turns)
            legacy = statistics.median(t[f"legacy_bf16_{call}"] / t[f"v1_bf16_{call}"]
                                       for t in turns)
            backend = statistics.median(t[f"backend_{call}"] for t in turns)
            own = statistics.median(t[f"backend_{call}"] / t[f"v1_bf16_{call}"] for t in turns)
            print(f"| {pages} × {label} | sglang {call} | {med['v1_fp16']:.0f} | "
                  f"{med['v1_bf16']:.0f} | {med['legacy_bf16']:.0f} | {backend:.0f} | "
                  f"{bf16:.2f}× | {legacy:.2f}× | {own:.2f}× |")
        for store in stores.values():
            store.close()


def lmcache_turn(client: maru.Client, backend: MaruBackend, shape: torch.Size,
                 pages: int, value: torch.Tensor, raw_first: bool) -> Dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    keys = [f"{tag}-{i}" for i in range(pages)]
    raw_paths = [f"/bench-raw-lmc/{k}" for k in keys]
    nbytes = value.numel() * value.element_size()

    def connector_put() -> None:
        objs = backend.batched_allocate(shape, torch.float16, pages)
        for o in objs:
            o.tensor.copy_(value)
        for f in backend.batched_submit_put_task(keys, objs):
            f.result()
        for o in objs:
            o.ref_count_down()

    def raw_put() -> None:  # as the connector: allocate all, fill, publish (a chain), release
        chunks = [client.alloc(nbytes) for _ in raw_paths]
        for c in chunks:
            c.torch(torch.float16, shape).copy_(value)
        prev = None
        for c, p in zip(chunks, raw_paths):
            c.publish(p, prev)
            prev = p
        client.release_batch(chunks)

    def connector_get() -> None:
        for o in backend.batched_get_blocking(keys):
            o.ref_count_down()

    def raw_get() -> None:
        for c in client.lookup_prefix(raw_paths):
            c.torch(torch.float16, shape)
            c.release()

    out = pair("lmcache_put", connector_put, raw_put, raw_first)
    out.update(pair("lmcache_get", connector_get, raw_get, raw_first))
    backend.batched_remove(keys)
    client.unlink_batch(raw_paths)
    return out


class Key:
    """An LMCache key, as much as its maru backend uses."""

    def __init__(self, s: str) -> None:
        self.s = s

    def to_string(self) -> str:
        return self.s

    def __hash__(self) -> int:
        return hash(self.s)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and other.s == self.s


def raw_sides(client: maru.Client, raw_paths: List[str], nbytes: int, shape: torch.Size,
              value: torch.Tensor) -> Tuple[Callable[[], None], Callable[[], None]]:
    """alloc of each path, fill, publish, release; lookup_prefix + Chunk.torch."""
    def raw_put() -> None:
        chunks = [client.alloc(nbytes) for _ in raw_paths]
        for c in chunks:
            c.torch(torch.float16, shape).copy_(value)
        for c, p in zip(chunks, raw_paths):
            c.publish(p)
        client.release_batch(chunks)

    def raw_get() -> None:
        for c in client.lookup_prefix(raw_paths):
            c.torch(torch.float16, shape)
            c.release()
    return raw_put, raw_get


def intree_turn(client: maru.Client, backend: InTreeMaruBackend, shape: torch.Size,
                pages: int, value: torch.Tensor, raw_first: bool) -> Dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    keys = [Key(f"{tag}-{i}") for i in range(pages)]
    raw_paths = [f"/bench-raw-intree/{k.s}" for k in keys]
    raw_put, raw_get = raw_sides(client, raw_paths, value.numel() * 2, shape, value)

    def put() -> None:
        objs = backend.batched_allocate(shape, torch.float16, pages)
        for o in objs:
            o.tensor.copy_(value)
        for f in backend.batched_submit_put_task(keys, objs):
            f.result()
        for o in objs:
            o.ref_count_down()  # the storage manager's reference

    def get() -> None:
        for o in backend.batched_get_blocking(keys):
            o.ref_count_down()

    out = pair("intree_put", put, raw_put, raw_first)
    out.update(pair("intree_get", get, raw_get, raw_first))
    for k in keys:
        backend.remove(k)
    client.unlink_batch(raw_paths)
    return out


def handler_turn(client: maru.Client, handler: maru.MaruHandler, pages: int,
                 value: torch.Tensor, raw_first: bool) -> Dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    keys = [f"{tag}-{i}" for i in range(pages)]
    raw_paths = [f"/bench-raw-handler/{k}" for k in keys]
    data = value.view(-1).view(torch.uint8).numpy()
    nbytes = data.nbytes

    def store() -> None:
        handles = [handler.alloc(size=nbytes) for _ in keys]
        for h in handles:
            h.buf[:] = data
        handler.batch_store(keys, handles)

    def raw_store() -> None:
        chunks = [client.alloc(nbytes) for _ in raw_paths]
        for c in chunks:
            c.write(data)
        for c, p in zip(chunks, raw_paths):
            c.publish(p)
        client.release_batch(chunks)

    def retrieve() -> None:
        for info in handler.batch_retrieve(keys):
            info.view.release()

    def raw_retrieve() -> None:
        for c in client.lookup_prefix(raw_paths):
            c.memoryview().release()
            c.release()

    out = pair("handler_batch_store", store, raw_store, raw_first)
    out.update(pair("handler_batch_retrieve", retrieve, raw_retrieve, raw_first))
    out.update(pair("handler_batch_exists", lambda: handler.batch_exists(keys),
                    lambda: client.count_prefix(raw_paths), raw_first))
    handler.batch_delete(keys)
    client.unlink_batch(raw_paths)
    return out


def exists_table(node: MaruNode, repeat: int) -> None:
    """batch_exists (no prefix-stop) against one count_prefix, by misses."""
    keys = [f"e{i}" for i in range(64)]
    print()
    print("| index | keys missing | calls | batch_exists (µs) | count_prefix (µs) "
          "| batch_exists ÷ count_prefix |")
    print("|---|---:|---:|---:|---:|---:|")
    for index in ("on", "off"):
        saved = os.environ.get("MARU_INDEX")
        if index == "off":
            os.environ["MARU_INDEX"] = "0"  # read at connect
        try:
            handler = maru.MaruHandler(maru.MaruConfig(server_url=node.url, namespace="bench-e"))
            handler.connect()
        finally:
            if saved is None:
                os.environ.pop("MARU_INDEX", None)
            else:
                os.environ["MARU_INDEX"] = saved
        client = handler.client
        for missing in (0, 1, 8, 32, 64):
            absent = set(range(0, 64, 64 // missing)) if missing else set()
            present = [k for i, k in enumerate(keys) if i not in absent]
            handler.batch_delete(keys)
            if present:
                handler.batch_store(present, [b"x"] * len(present))
            paths = [maru.key_to_path(k, "bench-e") for k in keys]
            calls = 1 + len([i for i in absent if i < len(keys) - 1])
            assert handler.batch_exists(keys) == [i not in absent for i in range(64)]
            turns = []
            for r in range(repeat):
                turns.append(pair("exists", lambda: handler.batch_exists(keys),
                                  lambda: client.count_prefix(paths), r % 2 == 1))
            conn = statistics.median(t["exists_connector"] for t in turns)
            raw = statistics.median(t["exists_raw"] for t in turns)
            ratio = statistics.median(t["exists_connector"] / t["exists_raw"] for t in turns)
            print(f"| {index} | {missing} | {calls} | {conn:.0f} | {raw:.0f} | {ratio:.2f}× |")
        handler.batch_delete(keys)
        handler.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    # (page tokens, layers, kv heads, head dim): small pages, and 16 tokens
    # of an 8-layer slice of a Llama-8B-like model (fp16).
    cases = [("16 KiB pages", (4, 4, 2, 64)), ("512 KiB pages", (16, 8, 8, 128))]
    loop = asyncio.new_event_loop()  # LMCache's storage manager loop, for the in-tree puts
    threading.Thread(target=loop.run_forever, daemon=True).start()
    print("| pages | call | connector (µs) | raw package (µs) | connector ÷ raw |")
    print("|---|---|---:|---:|---:|")
    with MaruNode(pool_size=512 << 20) as node, maru.Client(node.url) as client:
        for label, (tokens, layers, heads, dim) in cases:
            src = PageFirstPool(args.pages, tokens, layers, heads, dim)
            dst = PageFirstPool(args.pages, tokens, layers, heads, dim)
            store = MaruHiCacheStorage({"model_name": "bench", "extra_config": {
                "maru_server": node.url, "maru_namespace": "bench-sgl"}}, src)
            shape = torch.Size([2, layers, tokens, heads * dim])
            backend = MaruBackend({"maru_path": node.url,
                                   "extra_config": {"maru_namespace": "bench-lmc"}},
                                  {"shapes": [shape], "dtypes": [torch.float16],
                                   "chunk_size": tokens})
            value = torch.randn(shape).to(torch.float16)
            config = EngineConfig({"maru_path": node.url, "chunk_size": tokens,
                                   "extra_config": {"maru_instance_id": "bench-intree"}})
            intree = InTreeMaruBackend(config, Metadata("bench", layers, heads * dim, tokens,
                                                        kv_dtype=torch.float16), loop, "cpu")
            handler = maru.MaruHandler(maru.MaruConfig(
                server_url=node.url, namespace="bench-handler",
                chunk_size_bytes=value.numel() * 2, pool_size=1 << 30))
            handler.connect()
            turns: List[Dict[str, float]] = []
            for _ in range(args.repeat):
                raw_first = len(turns) % 2 == 1
                t = sglang_turn(client, store, src, dst, args.pages, raw_first)
                t.update(lmcache_turn(client, backend, shape, args.pages, value, raw_first))
                t.update(intree_turn(client, intree, shape, args.pages, value, raw_first))
                t.update(handler_turn(client, handler, args.pages, value, raw_first))
                turns.append(t)
            for call in ("sglang_set", "sglang_get", "lmcache_put", "lmcache_get",
                         "intree_put", "intree_get", "handler_batch_store",
                         "handler_batch_retrieve", "handler_batch_exists"):
                conn = statistics.median(t[f"{call}_connector"] for t in turns)
                raw = statistics.median(t[f"{call}_raw"] for t in turns)
                ratio = statistics.median(t[f"{call}_connector"] / t[f"{call}_raw"]
                                          for t in turns)
                print(f"| {args.pages} × {label} | {call.replace('_', ' ')} | {conn:.0f} "
                      f"| {raw:.0f} | {ratio:.2f}× |")
            store.close()
            backend.close()
            intree.close()
            handler.close()
        sglang_paths_table(node, args.pages, args.repeat, cases)
        exists_table(node, args.repeat)
    loop.call_soon_threadsafe(loop.stop)


if __name__ == "__main__":
    main()
