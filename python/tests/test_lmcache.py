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


# --- the storage plugin as LMCache's plugin launcher builds it ------------------

import gc  # noqa: E402

import maru  # noqa: E402
import maru.lmcache as ml  # noqa: E402
from maru_node import wait_for  # noqa: E402
from maru.lmcache import MemoryFormat, split_retain  # noqa: E402


def plugin(server: Any, ns: str, local_cpu_backend: Any = None, **meta: Any) -> MaruBackend:
    """``cls(config=, dst_device=, metadata=, local_cpu_backend=, loop=)``,
    by keyword, as storage_plugin_launcher calls it."""
    metadata = dict(shapes=[SHAPE], dtypes=[torch.float32], chunk_size=16, use_mla=False,
                    world_size=1, worker_id=0)
    metadata.update(meta)
    config = {"storage_plugins": ["MaruBackend"],
              "extra_config": {"storage_plugin.MaruBackend.module_path": "maru.lmcache",
                               "storage_plugin.MaruBackend.class_name": "MaruBackend",
                               "maru_server": server.url, "maru_namespace": ns}}
    return MaruBackend(config=config, dst_device="cuda:0", metadata=metadata,
                       local_cpu_backend=local_cpu_backend, loop=None)


class KeyWithTags(Key):
    """A key whose to_string carries request tags as LMCache appends them."""

    def __init__(self, h: str, tags: dict) -> None:
        super().__init__(h)
        self.tags = tags

    def to_string(self) -> str:
        return super().to_string() + "".join(f"@{k}%{v}" for k, v in self.tags.items())


def cpu_obj(value: float, shape: Any = SHAPE) -> Any:
    """A memory object of another allocator (LMCache's local CPU backend's)."""
    raw = torch.full(shape, value).view(-1).view(torch.uint8).clone()
    meta = ml.MemoryObjMetadata(shape=torch.Size(shape), dtype=torch.float32,
                                address=raw.data_ptr(), phy_size=raw.numel(), ref_count=1,
                                fmt=MemoryFormat.KV_2LTD)
    return ml.TensorMemoryObj(raw, meta, None)


def test_plugin_constructor_and_allocator_backend(server: Any, ns: str) -> None:
    b = plugin(server, ns)
    try:
        assert isinstance(b, ml.AllocatorBackendInterface) and str(b) == "MaruBackend"
        assert b.dst_device == "cuda:0" and b.local_cpu_backend is None
        assert b.get_allocator_backend() is b
        assert isinstance(b.get_memory_allocator(), ml.MemoryAllocatorInterface)
        assert b.get_memory_allocator().memcheck()
        assert b.calculate_chunk_budget() >= 1
    finally:
        b.close()
    local = object()  # LMCache's LocalCPUBackend, as the launcher passes it
    b = plugin(server, ns, local_cpu_backend=local)
    try:
        assert b.get_allocator_backend() is local
    finally:
        b.close()
    with pytest.raises(ValueError, match="maru_server"):
        MaruBackend(config={"extra_config": {}}, dst_device="cpu", metadata={},
                    local_cpu_backend=None, loop=None)


def test_memory_objects_carry_their_format(server: Any, ns: str) -> None:
    b = plugin(server, ns)
    mla_shape = torch.Size([1, 2, 16, 32])
    m = plugin(server, ns + "-mla", shapes=[mla_shape], use_mla=True)
    try:
        obj = b.allocate(SHAPE, torch.float32)  # LMCache's default: KV_2LTD
        assert isinstance(obj, ml.TensorMemoryObj) and isinstance(obj.metadata,
                                                                   ml.MemoryObjMetadata)
        assert obj.metadata.fmt == MemoryFormat.KV_2LTD and obj.get_num_tokens() == 16
        assert b.allocate(SHAPE, torch.float32, fmt=None).metadata.fmt == MemoryFormat.KV_2LTD
        obj.tensor.fill_(2.0)
        (future,) = b.batched_submit_put_task([Key("f0")], [obj])
        future.result()
        obj.ref_count_down()
        got = b.get_blocking(Key("f0"))  # to_gpu checks metadata.fmt == KV_2LTD
        assert got.metadata.fmt == MemoryFormat.KV_2LTD and got.get_shape() == SHAPE
        assert got.get_dtype() == torch.float32 and got.get_memory_format() == MemoryFormat.KV_2LTD
        got.ref_count_down()
        mobj = m.allocate(mla_shape, torch.float32, fmt=MemoryFormat.KV_MLA_FMT)
        mobj.tensor.fill_(3.0)
        (future,) = m.batched_submit_put_task([Key("f1")], [mobj])
        future.result()
        mobj.ref_count_down()
        mgot = m.get_blocking(Key("f1"))  # to_gpu checks KV_MLA_FMT for MLA
        assert mgot.metadata.fmt == MemoryFormat.KV_MLA_FMT and mgot.get_num_tokens() == 16
        assert torch.equal(mgot.tensor, torch.full(mla_shape, 3.0))
        mgot.ref_count_down()
    finally:
        b.close()
        m.close()


def test_objects_of_another_allocator_are_copied_in(server: Any, ns: str) -> None:
    b = plugin(server, ns, local_cpu_backend=object())
    try:
        keys = [Key("c0"), Key("c1")]
        objs = [cpu_obj(5.0), cpu_obj(6.0, torch.Size([2, 2, 3, 32]))]
        (future,) = b.batched_submit_put_task(keys, objs)
        assert future.result() == keys
        assert [o.get_ref_count() for o in objs] == [1, 1]  # held during the put only
        got = b.batched_get_blocking(keys)
        assert torch.equal(got[0].tensor, torch.full(SHAPE, 5.0))
        assert got[1].tensor.shape == (2, 2, 3, 32)
        assert in_pool(got[0].tensor.data_ptr(), got[0].get_size(), server.pool)
        for o in got:
            o.ref_count_down()
        (future,) = b.batched_submit_put_task(keys[:1], [cpu_obj(9.0)])
        assert future.result() == keys[:1]  # first writer wins
        again = b.get_blocking(keys[0])
        assert torch.equal(again.tensor, torch.full(SHAPE, 5.0))
        again.ref_count_down()
    finally:
        b.close()


def test_reference_counts_give_the_lease_back(server: Any, ns: str) -> None:
    import asyncio

    b = plugin(server, ns)
    try:
        put(b, Key("r0"), 1.0)
        obj = b.get_blocking(Key("r0"))
        view = obj.byte_array  # holds the lease too
        assert b.remove(Key("r0"))
        obj.ref_count_down()  # the caller's reference: the object lets go
        assert not obj.is_valid() and obj.tensor is None
        assert server.deferred_bytes() > 0 and bytes(view[:4]) == torch.ones(1).numpy().tobytes()
        del view
        gc.collect()
        assert wait_for(lambda: server.deferred_bytes() == 0)
        put(b, Key("r1"), 2.0)
        (pinned,) = asyncio.run(b.batched_get_non_blocking("req", [Key("r1")]))
        assert pinned.is_pinned and pinned.get_ref_count() == 1
        assert b.remove(Key("r1"))
        pinned.ref_count_down()  # the retrieval's reference, then its pin
        assert pinned.is_valid()
        pinned.unpin()
        assert not pinned.is_valid()
        del pinned
        gc.collect()
        assert wait_for(lambda: server.deferred_bytes() == 0)
    finally:
        b.close()


def test_split_retain() -> None:
    assert split_retain("m@1@0@ab@float") == ("m@1@0@ab@float", None)
    assert split_retain("m@1@0@ab@float@maru_retain%keep") == ("m@1@0@ab@float", "keep")
    assert split_retain("m@1@0@ab@float@tenant%a@maru_retain%drop@x%1") == \
        ("m@1@0@ab@float@tenant%a@x%1", "drop")


def test_retain_tags_hint_the_stored_and_read_chunks(make_server: Any, ns: str,
                                                      caplog: Any) -> None:
    small = make_server(pool_size=16 << 20,
                        extra=["--high-watermark", "1", "--low-watermark", "1"])
    shape = torch.Size([2, 2, 4096, 32])  # 1 MiB chunks
    b = plugin(small, ns, shapes=[shape], chunk_size=4096)
    try:
        def store(key: Any, value: float) -> None:
            (obj,) = b.batched_allocate(shape, torch.float32, 1)
            obj.tensor.fill_(value)
            (future,) = b.batched_submit_put_task([key], [obj])
            assert future.result() == [key]
            obj.ref_count_down()

        store(KeyWithTags("kept", {"maru_retain": "keep"}), 1.0)
        store(KeyWithTags("dropped", {"maru_retain": "KEEP"}), 2.0)
        store(Key("read"), 3.0)
        store(KeyWithTags("odd", {"maru_retain": "sometimes"}), 3.0)  # logged, no hint
        assert "maru_retain='sometimes' is not keep, drop or none" in caplog.text
        for i in range(3):
            store(Key(f"plain{i}"), 4.0)
        assert b.hinted == 2
        # The conversation's next request reads its prefix with "keep"; another
        # one's last request reads with "drop"; a third reads with no tag.
        b.get_blocking(KeyWithTags("kept", {"maru_retain": "keep"})).ref_count_down()
        b.get_blocking(KeyWithTags("dropped", {"maru_retain": "drop"})).ref_count_down()
        b.get_blocking(Key("read")).ref_count_down()
        assert b.hinted == 4
        assert b.contains(Key("kept")) and b.contains(KeyWithTags("kept", {"maru_retain": "x"}))
        n = 0
        while b.contains(Key("plain0")):
            assert n < 64, "the pool never evicted"
            store(Key(f"new{n}"), 5.0)
            n += 1
        assert not b.contains(Key("dropped"))  # read, yet gone before the unread
        assert b.contains(Key("kept")) and b.contains(Key("read"))
    finally:
        b.close()


# --- maru_lmcache.CxlMemoryAdapter over a MaruHandler -----------------------------


def adapter(server: Any, ns: str, chunk: int = 16):
    from maru_lmcache import CxlMemoryAdapter

    full = torch.Size([2, 2, chunk, 32])
    config = maru.MaruConfig(server_url=server.url, namespace=ns, auto_connect=False,
                             chunk_size_bytes=full.numel() * 4, pool_size=1 << 30)
    handler = maru.MaruHandler(config)
    assert handler.connect()
    return handler, CxlMemoryAdapter(handler=handler, shapes=[full], dtypes=[torch.float32],
                                     fmt=MemoryFormat.KV_2LTD,
                                     chunk_size=handler.get_chunk_size())


def test_adapter_store_and_get_by_location(server: Any, ns: str) -> None:
    from maru_lmcache import CxlMemoryAdapter

    handler, a = adapter(server, ns)
    try:
        token = 2 * 2 * 32 * 4
        full = a.allocate(SHAPE, torch.float32, MemoryFormat.KV_2LTD)
        part = a.allocate(torch.Size([2, 2, 5, 32]), torch.float32)
        assert full.get_shape() == SHAPE and part.get_shape() == (2, 2, 5, 32)
        assert full.metadata.fmt == part.metadata.fmt == MemoryFormat.KV_2LTD
        assert full.parent() is None  # as the original's: lifetime by references
        rid, pid = CxlMemoryAdapter.decode_address(full.metadata.address)
        assert (rid, pid) == (CxlMemoryAdapter.decode_address(
            CxlMemoryAdapter.encode_address(rid, pid))) and pid == 0
        assert rid in handler.get_owned_region_ids()
        full.tensor.fill_(1.5)
        part.tensor.fill_(2.5)
        handles = [a.create_store_handle(o) for o in (full, part)]
        assert [h.region_id for h in handles] == [rid, a.decode_address(
            part.metadata.address)[0]]
        assert handler.batch_store(["full", "part"], handles) == [True, True]
        infos = handler.batch_retrieve(["full", "part", "none"])
        assert infos[2] is None
        got = [a.get_by_location(region_id=i.region_id, page_index=i.page_index,
                                 actual_size=len(i.view), single_token_size=token)
               for i in infos[:2]]
        assert torch.equal(got[0].tensor, torch.full(SHAPE, 1.5))
        assert got[1].get_shape() == (2, 2, 5, 32) and got[1].get_num_tokens() == 5
        assert torch.equal(got[1].tensor, torch.full((2, 2, 5, 32), 2.5))
        assert in_pool(got[1].tensor.data_ptr(), got[1].get_size(), server.pool)
        info = infos[0]
        assert a.get_by_location(region_id=info.region_id, page_index=1, actual_size=1,
                                 single_token_size=token) is None
        assert a.get_by_location(region_id=info.region_id, page_index=0,
                                 actual_size=token + 1, single_token_size=token) is None
        del infos, info, full, part, handles
        gc.collect()
        read_rids = handler.mapper.get_read_region_ids()
        assert len(read_rids) == 2  # the objects hold their regions
        del got
        gc.collect()
        assert handler.mapper.get_read_region_ids() == []
        assert handler.get_owned_region_ids() == []  # nothing holds a lease any more
    finally:
        a.close()
        handler.close()


def test_adapter_free_and_failed_batches(make_server: Any, ns: str) -> None:
    small = make_server(pool_size=1 << 20, unit=64 << 10)
    handler, a = adapter(small, ns)
    try:
        seen = []
        handler.set_on_region_added(lambda rid, pages: seen.append(rid))
        obj = a.allocate(SHAPE, torch.float32)
        assert seen == [a.decode_address(obj.metadata.address)[0]]
        a.free(obj)
        assert not obj.is_valid() and handler.get_owned_region_ids() == []
        assert a.batched_allocate(SHAPE, torch.float32, 64) is None  # more than the pool
        gc.collect()
        assert handler.get_owned_region_ids() == []  # every one made was given back
        assert a.allocate(torch.Size([2, 2, 17, 32]), torch.float32) is None  # > chunk_size
        objs = a.batched_allocate(SHAPE, torch.float32, 4)
        assert objs is not None and len(handler.get_owned_region_ids()) == 4
        a.batched_free(objs)
        assert handler.get_owned_region_ids() == []
        a.close()  # unregisters: no more callbacks
        before = len(seen)
        assert a.allocate(SHAPE, torch.float32) is not None and len(seen) == before
    finally:
        handler.close()
