"""The original Maru API (MaruConfig, MaruHandler), method by method, with
the original's semantics (xcena-dev/maru at 4fd29cef; the manifest is
python/contracts/maru.json)."""

import errno
import gc
import json
import socket
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest

import maru
from conftest import in_pool
from maru_node import wait_for

MANIFEST = json.loads((Path(__file__).resolve().parents[1] / "contracts" / "maru.json")
                      .read_text())


def original(name):
    return MANIFEST["classes"][name]


def test_connect_close_and_context(server, ns):
    h = maru.MaruHandler(maru.MaruConfig(server_url=server.url, namespace=ns))
    assert not h.connected and not h.healthcheck()
    assert h.mapper is None and h.pool_handle is None and h.get_owned_region_ids() == []
    with pytest.raises(RuntimeError):
        h.exists(1)
    assert h.connect() and h.connect()
    assert h.connected and h.healthcheck()
    h.close()
    h.close()
    assert not h.connected
    with pytest.raises(RuntimeError):
        h.alloc(1)
    with maru.MaruHandler(maru.MaruConfig(server_url=server.url, namespace=ns)) as h2:
        assert h2.connected
    assert not h2.connected
    with maru.MaruHandler(maru.MaruConfig(server_url=server.url, auto_connect=False)) as h3:
        assert not h3.connected


def test_config_has_the_originals_fields_and_defaults():
    fields = [f.name for f in __import__("dataclasses").fields(maru.MaruConfig)]
    theirs = original("maru_common/config.py:MaruConfig")["fields"]
    # The original's fields in its order (the manifest lists them sorted; the
    # source order is the constructor's positional order), then ours.
    assert fields == ["server_url", "instance_id", "pool_size", "chunk_size_bytes",
                      "auto_connect", "timeout_ms", "use_async_rpc", "max_inflight",
                      "eager_map", "auto_expand", "expand_size", "rm_address",
                      "enable_stats", "namespace", "contiguous"]
    assert set(fields[:13]) == set(theirs)
    config = maru.MaruConfig()
    for name, spec in theirs.items():
        if name != "instance_id":
            assert getattr(config, name) == eval(spec["default"]), name  # noqa: S307
    uuid.UUID(config.instance_id)  # the original makes a UUID
    assert config.namespace == "kv" and config.contiguous is False
    positional = maru.MaruConfig("unix:///x.sock", "me", 1 << 30, 1 << 20)
    assert (positional.server_url, positional.instance_id, positional.pool_size,
            positional.chunk_size_bytes) == ("unix:///x.sock", "me", 1 << 30, 1 << 20)


def test_config_environment_overrides(monkeypatch):
    monkeypatch.setenv("MARU_EAGER_MAP", "off")
    monkeypatch.setenv("MARU_STAT", " Yes ")
    config = maru.MaruConfig(eager_map=True, enable_stats=False)
    assert config.eager_map is False and config.enable_stats is True
    monkeypatch.setenv("MARU_STAT", "maybe")
    with pytest.raises(ValueError, match="MARU_STAT"):
        maru.MaruConfig()


@pytest.mark.parametrize("kwargs,message", [
    (dict(chunk_size_bytes=0), "chunk_size_bytes must be positive"),
    (dict(pool_size=1 << 10, chunk_size_bytes=1 << 20), "pool_size"),
    (dict(expand_size=1 << 30, auto_expand=False), "expand_size requires auto_expand"),
    (dict(expand_size=1 << 10), "expand_size"),
    (dict(namespace=".."), "namespace"),
])
def test_config_checks(kwargs, message):
    with pytest.raises(ValueError, match=message):
        maru.MaruConfig(**kwargs)


def test_handler_has_the_originals_methods():
    theirs = original("maru_handler/handler.py:MaruHandler")["methods"]
    for name, spec in theirs.items():
        if name.startswith("_") and name not in ("__init__", "__enter__", "__exit__"):
            continue
        ours = getattr(maru.MaruHandler, name)
        if spec["kind"] == "property":
            assert isinstance(ours, property), name
            continue
        import inspect

        params = [p["name"] for p in spec["params"]]
        assert list(inspect.signature(ours).parameters)[:len(params)] == params, name


def test_instance_id_names_the_session(server):
    config = maru.MaruConfig(server_url=server.url, instance_id="pytest-instance-7")
    with maru.MaruHandler(config) as h:
        assert h.instance_id == "pytest-instance-7"
        out = subprocess.run([server.maructl, "sessions", "--server", server.url],
                             capture_output=True, text=True, check=True).stdout
        assert "pytest-instance-7" in out


def test_alloc_store_retrieve_zero_copy(server, handler):
    data = np.arange(4096, dtype=np.uint8).tobytes()
    handle = handler.alloc(size=len(data))
    assert handle.size == len(data) and not handle.buf.readonly
    assert handle.region_id > 0 and handle.page_index == 0
    handle.buf[:] = data
    assert handler.store(key=12345, handle=handle)
    info = handler.retrieve(key=12345)
    assert info.view == data and info.size == len(data) and info.view.readonly
    assert info.page_index == 0 and info.region_id not in (0, handle.region_id)
    address = np.frombuffer(info.view, np.uint8).ctypes.data
    assert in_pool(address, len(data), server.pool)
    assert handler.retrieve("12345").view == data  # int and str keys are one key


def test_alloc_sizes(make_server, ns):
    small = make_server(pool_size=1 << 20, unit=64 << 10)
    config = maru.MaruConfig(server_url=small.url, namespace=ns, chunk_size_bytes=4 << 20,
                             pool_size=4 << 20)
    with maru.MaruHandler(config) as h:
        with pytest.raises(ValueError, match="exceeds chunk_size"):
            h.alloc(size=(4 << 20) + 1)
        with pytest.raises(ValueError):
            h.alloc(size=0)
        with pytest.raises(maru.AllocError) as caught:
            h.alloc(size=2 << 20)  # more than the pool holds
        assert isinstance(caught.value, ValueError) and isinstance(caught.value, OSError)
        assert caught.value.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
        assert h.get_owned_region_ids() == []


def test_store_positional_handle_and_duplicates(handler):
    first = handler.alloc(5)
    first.buf[:] = b"first"
    assert handler.store("k", first)
    second = handler.alloc(6)
    second.buf[:] = b"second"
    assert handler.store("k", second)  # first writer wins; still True
    assert handler.retrieve("k").view == b"first"
    with pytest.raises(ValueError):
        second.buf[0] = 1  # its space is being given back
    assert second.region_id not in handler.get_owned_region_ids()
    with pytest.raises(ValueError, match="not an unstored allocation"):
        handler.store("k2", first)  # stored already
    with pytest.raises(ValueError, match="not an unstored allocation"):
        handler.store("k3", maru.AllocHandle(memoryview(b""), 10**6, 0, 1))


def test_store_data_with_prefix(handler):
    assert handler.store("d", memoryview(b"payload"), prefix=b"hdr:")
    assert handler.retrieve("d").view == b"hdr:payload"
    assert handler.store("e", data=np.ones(4, np.float32))
    assert np.frombuffer(handler.retrieve("e").view, np.float32).tolist() == [1.0] * 4
    assert handler.store("f", handler.retrieve("d"))  # a MemoryInfo
    assert handler.retrieve("f").view == b"hdr:payload"
    with pytest.raises(TypeError):
        handler.store("g")


def test_retrieve_missing_and_unsealed(handler):
    assert handler.retrieve("nothing") is None
    pending = handler.alloc(4)
    assert handler.retrieve("nothing") is None
    handler.free(pending)


def test_exists_and_delete(handler):
    assert not handler.exists("x")
    handler.store("x", data=b"1")
    assert handler.exists("x")
    assert handler.delete("x")
    assert not handler.delete("x")
    assert not handler.exists("x")


def test_pin_unpin(handler):
    assert not handler.pin("p")
    handler.store("p", data=b"1")
    assert handler.pin("p")
    assert handler.unpin("p")
    assert not handler.unpin("missing")


def test_batch_store_and_retrieve_every_key(handler):
    keys = [f"chunk{i}" for i in range(8)]
    values = [bytes([i]) * (100 + i) for i in range(8)]
    assert handler.batch_store(keys, [memoryview(v) for v in values]) == [True] * 8
    infos = handler.batch_retrieve(keys)
    assert [i.view for i in infos] == values
    assert len({i.region_id for i in infos}) == 8
    # No prefix-stop: every key is looked up, as the original does.
    got = handler.batch_retrieve(["absent0"] + keys[:2] + ["absent1", "absent2"] + keys[2:4]
                                 + ["absent3"])
    assert [g.view if g else None for g in got] == \
        [None, values[0], values[1], None, None, values[2], values[3], None]
    assert handler.batch_retrieve([]) == []


def test_batch_store_with_handles_and_prefixes(handler):
    handles = [handler.alloc(3) for _ in range(3)]
    for i, h in enumerate(handles):
        h.buf[:] = bytes([65 + i]) * 3
    assert handler.batch_store(["1", "2", "3"], handles) == [True] * 3
    assert [i.view for i in handler.batch_retrieve([1, 2, 3])] == [b"AAA", b"BBB", b"CCC"]
    again = [handler.alloc(3), handler.alloc(3), handler.alloc(3)]
    for h in again:
        h.buf[:] = b"zzz"
    # exists, new, and the same new key twice in one batch: first writer wins
    assert handler.batch_store(["1", "9", "9"], again) == [True] * 3
    assert [i.view for i in handler.batch_retrieve(["1", "9"])] == [b"AAA", b"zzz"]
    assert handler.batch_store([4, 5], [b"x", b"y"], prefixes=[b"p", None]) == [True, True]
    assert [i.view for i in handler.batch_retrieve([4, 5])] == [b"px", b"y"]
    assert handler.batch_store([4], [b"other"]) == [True]  # exists: kept
    assert handler.retrieve(4).view == b"px"
    with pytest.raises(ValueError):
        handler.batch_store([1, 2], [b"x"])


def test_batch_exists_checks_every_key(handler):
    handler.batch_store(["a", "b", "c"], [b"1", b"2", b"3"])
    assert handler.batch_exists(["a", "b", "c"]) == [True, True, True]
    assert handler.batch_exists(["a", "zz", "c"]) == [True, False, True]
    assert handler.batch_exists(["zz", "yy", "c", "xx", "a"]) == [False, False, True, False, True]
    assert handler.batch_exists([]) == []
    assert handler.batch_pin(["a", "zz", "c"]) == [True, False, True]
    assert handler.batch_unpin(["a", "zz", "c"]) == [True, False, True]
    assert handler.batch_delete(["a", "zz"]) == [True, False]
    assert handler.batch_exists(["b", "c"]) == [True, True]
    assert not handler.exists("a")


def test_batches_past_the_library_limit(handler):
    handler.batch_store(["first", "last"], [b"f", b"l"])
    keys = ["first"] + [f"none{i}" for i in range(maru.BATCH_MAX)] + ["last"]
    expect = [True] + [False] * maru.BATCH_MAX + [True]
    assert handler.batch_exists(keys) == expect
    assert [i is not None for i in handler.batch_retrieve(keys)] == expect
    assert handler.batch_pin(keys) == expect and handler.batch_unpin(keys) == expect


def test_regions_of_allocations(server, handler):
    seen = []

    def added(region_id, page_count):
        # Fired before alloc() returns: the region answers already.
        seen.append((region_id, page_count, handler.get_buffer_view(region_id, 0, 4) is not None))

    assert handler.get_chunk_size() == 1 << 20
    early = handler.alloc(8)
    handler.set_on_region_added(added)  # replays the owned regions alive
    assert seen == [(early.region_id, 1, True)]
    h = handler.alloc(16)
    assert seen[-1] == (h.region_id, 1, True)
    assert handler.get_owned_region_ids() == [early.region_id, h.region_id]
    assert handler.get_region_page_count(h.region_id) == 1
    view = handler.get_buffer_view(h.region_id, 4, 8)
    assert not view.readonly and view.nbytes == 8
    view[:] = b"abcdefgh"
    assert bytes(h.buf[4:12]) == b"abcdefgh"
    for bad in ((h.region_id, 0, 17), (h.region_id, -1, 2), (h.region_id, 16, 1),
                (10**9, 0, 1)):
        assert handler.get_buffer_view(*bad) is None  # never past the chunk
    table = handler.owned_region_manager
    assert table is handler.mapper and table.is_owned(h.region_id)
    assert table.get_region(h.region_id) == (h.region_id, 16, True, True)
    assert handler.allocator is None
    base, length, _ = handler.pool_handle
    assert length > 0 and in_pool(base, length, server.pool)
    stats = handler.get_stats()
    assert stats["store_regions"]["num_regions"] == 2 and stats["allocator"]["page_count"] == 1
    assert stats["allocation_manager"]["num_allocations"] == 2
    handler.set_on_region_added(None)


def test_a_region_lives_while_a_view_holds_it(server, handler):
    free_before = handler.get_stats()["pool"]["free"]
    h = handler.alloc(1 << 20)
    rid = h.region_id
    array = np.frombuffer(handler.get_buffer_view(rid, 0, 1 << 20), np.uint8)
    del h
    gc.collect()
    assert rid in handler.get_owned_region_ids()  # the array holds the reservation
    assert handler.get_stats()["pool"]["free"] <= free_before - (1 << 20)
    del array
    gc.collect()
    assert rid not in handler.get_owned_region_ids()
    assert handler.get_buffer_view(rid, 0, 1) is None and handler.get_region_page_count(rid) is None
    assert wait_for(lambda: handler.get_stats()["pool"]["free"] >= free_before)  # given back


def test_read_regions_hold_the_lease_nothing_leaks(server, handler, ns):
    handler.store("r", data=b"x" * 70000)
    info = handler.retrieve("r")
    rid = info.region_id
    assert handler.get_region_page_count(rid) == 1 and not handler.mapper.is_owned(rid)
    view = handler.get_buffer_view(rid, 0, 70000)
    assert view.readonly and view == info.view
    del info
    gc.collect()
    assert handler.get_buffer_view(rid, 10, 5) == b"xxxxx"  # `view` holds it
    assert handler.delete("r")
    assert server.deferred_bytes() > 0  # the lease keeps the unlinked bytes
    del view
    gc.collect()
    assert handler.get_buffer_view(rid, 0, 1) is None
    assert wait_for(lambda: server.deferred_bytes() == 0)  # no lease left behind


def test_free_before_and_after_store(handler):
    h = handler.alloc(1 << 20)
    before = handler.get_stats()["pool"]["free"]
    handler.free(h)
    assert wait_for(lambda: handler.get_stats()["pool"]["free"] >= before + (1 << 20))
    with pytest.raises(ValueError):
        h.buf[0] = 1
    with pytest.raises(ValueError, match="not an allocation"):
        handler.free(h)
    stored = handler.alloc(3)
    stored.buf[:] = b"abc"
    handler.store("kept", stored)
    handler.free(stored)  # the handler forgets the region; the key stays
    assert stored.region_id not in handler.get_owned_region_ids()
    assert handler.retrieve("kept").view == b"abc"


def test_get_stats(handler):
    handler.store("s", data=bytes(1 << 20))
    stats = handler.get_stats()
    assert stats["kv_manager"]["total_entries"] >= 1
    assert stats["kv_manager"]["total_size"] >= 1 << 20
    assert stats["allocation_manager"]["total_allocated"] == stats["kv_manager"]["total_size"]
    assert {"stats_manager", "store_regions"} <= set(stats)
    assert set(stats["pool"]) == {"total", "free", "unit", "files"}


def test_tcp_server_url(make_server, ns):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = make_server(extra=["--listen", f"tcp://127.0.0.1:{port}"])
    config = maru.MaruConfig(server_url=f"tcp://127.0.0.1:{port}", namespace=ns)
    with maru.MaruHandler(config) as h:
        assert h.store(1, data=b"over tcp")
        assert h.retrieve(1).view == b"over tcp"
    with maru.Client(server.url) as c:  # the same namespace over unix://
        with c.open(maru.key_to_path(1, ns)) as chunk:
            assert chunk.memoryview() == b"over tcp"
