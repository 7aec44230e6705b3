"""maru.lmcache.MaruBackend against a real server: LMCache's calls one by
one (the model-level harness is examples/tiny_llm/test_lmcache.py)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from conftest import in_pool  # noqa: E402
from maru.lmcache import MaruBackend, parse_maru_path  # noqa: E402

SHAPE = torch.Size([2, 2, 16, 32])  # KV_2LTD: [2, layers, tokens, hidden]


class Key:
    """LMCache's CacheEngineKey, as much as the backend uses."""

    def __init__(self, h: str, worker: int = 0) -> None:
        self.h, self.worker = h, worker

    def to_string(self) -> str:
        return f"vllm@org/model@2@{self.worker}@{self.h}"

    def with_new_worker_id(self, worker: int) -> "Key":
        return Key(self.h, worker)


def make(server: Any, ns: str, **meta: Any) -> MaruBackend:
    metadata = dict(shapes=[SHAPE], dtypes=[torch.float32], chunk_size=16, use_mla=False,
                    world_size=1, worker_id=0)
    metadata.update(meta)
    return MaruBackend({"maru_path": server.url, "extra_config": {"maru_namespace": ns}},
                       metadata)


def put(backend: MaruBackend, key: Key, value: float, shape: Any = SHAPE) -> list:
    (obj,) = backend.batched_allocate(shape, torch.float32, 1)
    obj.tensor.fill_(value)
    (future,) = backend.batched_submit_put_task([key], [obj])
    stored = future.result()
    obj.ref_count_down()
    assert not obj.is_valid()
    return stored


@pytest.mark.parametrize("path,target", [
    ("maru://10.0.0.1:5000", "tcp://10.0.0.1:5000"),
    ("maru://[::1]:5000", "tcp://[::1]:5000"),
    ("maru:///run/maru/maru.sock", "unix:///run/maru/maru.sock"),
    ("/run/maru/maru.sock", "unix:///run/maru/maru.sock"),
    ("unix:///x.sock", "unix:///x.sock"),
    ("tcp://h:1", "tcp://h:1"),
])
def test_parse_maru_path(path: str, target: str) -> None:
    assert parse_maru_path(path) == target


@pytest.mark.parametrize("bad", ["maru://host", "maru://host:0", "maru://:80", "maru://h:x",
                                 "redis://h:1", "run/maru.sock", ""])
def test_parse_maru_path_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_maru_path(bad)


def test_config_errors(server: Any, ns: str) -> None:
    with pytest.raises(NotImplementedError):
        MaruBackend({"maru_path": server.url, "use_layerwise": True}, {})
    with pytest.raises(ValueError):
        MaruBackend({}, {})


def test_put_contains_get_remove(server: Any, ns: str) -> None:
    b = make(server, ns)
    try:
        k = [Key(f"c{i}") for i in range(3)]
        assert b.batched_contains(k) == 0 and not b.contains(k[0])
        assert put(b, k[0], 1.0) == [k[0]] and put(b, k[1], 2.0) == [k[1]]
        assert put(b, k[0], 9.0) == [k[0]]  # first writer wins, the value stays 1.0
        assert not b.exists_in_put_tasks(k[0])
        assert b.contains(k[0]) and b.batched_contains(k) == 2
        obj = b.get_blocking(k[0])
        assert torch.equal(obj.tensor, torch.full(SHAPE, 1.0))
        assert obj.tensor.data_ptr() == obj.chunk.data_ptr  # a view, not a copy
        assert in_pool(obj.tensor.data_ptr(), obj.get_size(), server.pool)
        assert b.remove(k[0]) and not b.remove(k[0]) and b.get_blocking(k[0]) is None
        assert torch.equal(obj.tensor, torch.full(SHAPE, 1.0))  # the lease keeps the bytes
        obj.ref_count_down()
        assert b.batched_get_blocking(k)[0] is None  # the prefix starts missing
        assert b.batched_remove([k[1], k[2]]) == 1
    finally:
        b.close()


def test_pinned_contains_stops_at_first_miss(server: Any, ns: str) -> None:
    b = make(server, ns)
    try:
        k = [Key(f"p{i}") for i in range(4)]
        for i in (0, 1, 3):
            put(b, k[i], float(i))
        assert b.batched_contains(k, pin=True) == 2
        assert b.contains(k[3], pin=True) and b.pin(k[0])
        assert not b.contains(k[2], pin=True) and not b.pin(k[2]) and not b.unpin(k[2])
        b.batched_unpin(k[:2])
        assert b.unpin(k[3]) and b.unpin(k[0])
        objs = b.batched_get_blocking(k)
        assert [o is not None for o in objs] == [True, True, False, False]
        assert (objs[1].numpy() == 1.0).all() and objs[1].byte_array.nbytes == objs[1].get_size()
        for o in objs[:2]:
            o.ref_count_down()
    finally:
        b.close()


def test_partial_chunk_and_async_calls(server: Any, ns: str) -> None:
    import asyncio

    b = make(server, ns)
    try:
        k = [Key("a0"), Key("a1")]
        put(b, k[0], 3.0)
        put(b, k[1], 4.0, torch.Size([2, 2, 5, 32]))  # the last 5 tokens of a sequence
        assert b.get_blocking(k[1]).tensor.shape == (2, 2, 5, 32)

        async def lookups():
            n = await b.batched_async_contains("req", k, pin=False)
            objs = await b.batched_get_non_blocking("req", k)
            return n, objs

        n, objs = asyncio.run(lookups())
        assert n == 2 and len(objs) == 2 and all(o.is_pinned for o in objs)
        assert b.get_non_blocking(k[0]).result() is not None
        assert b.submit_prefetch_task(k[0]) and not b.submit_prefetch_task(Key("nope"))
    finally:
        b.close()


def test_full_pool_allocate_returns_none(make_server: Any, ns: str) -> None:
    small = make_server(pool_size=1 << 20, unit=64 << 10)
    b = make(small, ns)
    try:
        huge = torch.Size([2, 2, 16 * 1024, 32])  # 8 MiB
        assert b.allocate(huge, torch.float32) is None
        assert b.batched_allocate(SHAPE, torch.float32, 64) is None  # 64 units: more than there is
        objs = b.batched_allocate(SHAPE, torch.float32, 4)  # all of them were given back
        assert objs is not None
        for o in objs:
            o.ref_count_down()
    finally:
        b.close()


def test_mla_workers_share_worker0(server: Any, ns: str) -> None:
    w0 = make(server, ns, use_mla=True, world_size=2, worker_id=0)
    w1 = make(server, ns, use_mla=True, world_size=2, worker_id=1)
    try:
        (obj,) = w1.batched_allocate(SHAPE, torch.float32, 1)
        assert w1.batched_submit_put_task([Key("m", 1)], [obj]) is None  # worker 1 does not store
        obj.ref_count_down()
        put(w0, Key("m", 0), 5.0)
        got = w1.get_blocking(Key("m", 1))  # and reads worker 0's
        assert torch.equal(got.tensor, torch.full(SHAPE, 5.0))
        got.ref_count_down()
    finally:
        w0.close()
        w1.close()


def test_puts_on_lmcache_event_loop(server: Any, ns: str) -> None:
    import asyncio
    import threading

    loop = asyncio.new_event_loop()  # LMCache runs its backends' puts on its own loop
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    b = MaruBackend({"maru_path": server.url, "extra_config": {"maru_namespace": ns}},
                    dict(shapes=[SHAPE], dtypes=[torch.float32], chunk_size=16), loop)
    try:
        done = []
        objs = b.batched_allocate(SHAPE, torch.float32, 2)
        for o in objs:
            o.tensor.fill_(7.0)
        keys = [Key("e0"), Key("e1")]
        (future,) = b.batched_submit_put_task(keys, objs, on_complete_callback=done.append)
        assert future.result(timeout=30) == keys and done == keys
        for o in objs:
            o.ref_count_down()
        assert b.batched_contains(keys) == 2
    finally:
        b.close()
        loop.call_soon_threadsafe(loop.stop)
        runner.join()
        loop.close()
