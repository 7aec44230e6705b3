"""The original Maru API (MaruConfig, MaruHandler), method by method."""

import socket
import subprocess

import numpy as np
import pytest

import maru
from conftest import in_pool


def test_connect_close_and_context(server, ns):
    h = maru.MaruHandler(maru.MaruConfig(server_url=server.url, namespace=ns))
    assert not h.connected and not h.healthcheck()
    with pytest.raises(RuntimeError):
        h.exists(1)
    assert h.connect() and h.connect()
    assert h.connected and h.healthcheck()
    h.close()
    h.close()
    assert not h.connected
    with maru.MaruHandler(maru.MaruConfig(server_url=server.url, namespace=ns)) as h2:
        assert h2.connected
    assert not h2.connected
    with maru.MaruHandler(maru.MaruConfig(server_url=server.url, auto_connect=False)) as h3:
        assert not h3.connected


def test_config_defaults():
    config = maru.MaruConfig()
    assert config.server_url is None and config.instance_id.startswith("maru-py-")
    assert config.namespace == "kv"
    with pytest.raises(ValueError):
        maru.MaruConfig(namespace="..")


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
    handle.buf[:] = data
    assert handler.store(key=12345, handle=handle)
    info = handler.retrieve(key=12345)
    assert info.view == data and info.size == len(data) and info.view.readonly
    address = np.frombuffer(info.view, np.uint8).ctypes.data
    assert in_pool(address, len(data), server.pool)
    assert handler.retrieve("12345").view == data  # int and str keys are one key


def test_store_positional_handle_and_duplicates(handler):
    first = handler.alloc(5)
    first.buf[:] = b"first"
    assert handler.store("k", first)
    second = handler.alloc(6)
    second.buf[:] = b"second"
    assert handler.store("k", second)  # first writer wins; still True
    assert handler.retrieve("k").view == b"first"
    with pytest.raises(ValueError):
        second.buf[0] = 1  # its space was given back


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


def test_batch_store_and_retrieve(handler):
    keys = [f"chunk{i}" for i in range(8)]
    values = [bytes([i]) * (100 + i) for i in range(8)]
    assert handler.batch_store(keys, [memoryview(v) for v in values]) == [True] * 8
    infos = handler.batch_retrieve(keys)
    assert [i.view for i in infos] == values
    # Prefix semantics: everything after the first missing key is None.
    got = handler.batch_retrieve(keys[:2] + ["absent"] + keys[2:4])
    assert [g is not None for g in got] == [True, True, False, False, False]


def test_batch_store_with_handles_and_prefixes(handler):
    handles = [handler.alloc(3) for _ in range(3)]
    for i, h in enumerate(handles):
        h.buf[:] = bytes([65 + i]) * 3
    assert handler.batch_store([1, 2, 3], handles) == [True] * 3
    assert [i.view for i in handler.batch_retrieve([1, 2, 3])] == [b"AAA", b"BBB", b"CCC"]
    assert handler.batch_store([4, 5], [b"x", b"y"], prefixes=[b"p", None]) == [True, True]
    assert [i.view for i in handler.batch_retrieve([4, 5])] == [b"px", b"y"]
    assert handler.batch_store([4], [b"other"]) == [True]  # exists: kept
    assert handler.retrieve(4).view == b"px"
    with pytest.raises(ValueError):
        handler.batch_store([1, 2], [b"x"])


def test_batch_exists_pin_unpin_delete(handler):
    handler.batch_store(["a", "b", "c"], [b"1", b"2", b"3"])
    assert handler.batch_exists(["a", "b", "c"]) == [True, True, True]
    assert handler.batch_exists(["a", "zz", "c"]) == [True, False, False]
    assert handler.batch_pin(["a", "zz", "c"]) == [True, False, True]
    assert handler.batch_unpin(["a", "zz", "c"]) == [True, False, True]
    assert handler.batch_delete(["a", "zz"]) == [True, False]
    assert handler.batch_exists(["b", "c"]) == [True, True]
    assert not handler.exists("a")


def test_get_stats(handler):
    handler.store("s", data=bytes(1 << 20))
    stats = handler.get_stats()
    assert stats["kv_manager"]["total_entries"] >= 1
    assert stats["kv_manager"]["total_size"] >= 1 << 20
    assert stats["allocation_manager"]["total_allocated"] == stats["kv_manager"]["total_size"]
    assert set(stats["pool"]) == {"total", "free", "unit", "files"}


def test_free_abandons_an_unstored_handle(handler):
    h = handler.alloc(1 << 20)
    before = handler.get_stats()["pool"]["free"]
    handler.free(h)
    assert handler.get_stats()["pool"]["free"] >= before + (1 << 20)
    with pytest.raises(ValueError):
        h.buf[0] = 1


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
