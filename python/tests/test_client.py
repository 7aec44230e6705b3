"""maru.Client and maru.Chunk over a real server: every call of maru_direct.h."""

import errno

import numpy as np
import pytest
import torch

import maru
from conftest import in_pool


def test_create_write_seal_open(client, ns):
    path = f"/{ns}/a"
    with client.create(path, 4096) as chunk:
        assert chunk.writable and chunk.size == 4096 and chunk.path == path
        chunk.write(b"hello", 0)
        chunk.memoryview()[5:8] = b"abc"
        chunk.seal()
        assert not chunk.writable
    with client.open(path) as chunk:
        view = chunk.memoryview()
        assert view.readonly
        assert bytes(view[:8]) == b"helloabc"
        out = bytearray(3)
        chunk.read_into(out, 5)
        assert out == b"abc"
        assert chunk.verify()
    assert chunk.released


def test_lease_check(client, ns):
    path = f"/{ns}/lc"
    with client.create(path, 4096) as chunk:
        with pytest.raises(OSError) as err:
            chunk.lease_check()  # a writer holds a reservation, not a lease
        assert err.value.errno == errno.EINVAL
        chunk.seal()
        chunk.lease_check()
    with client.open(path) as chunk:
        assert bytes(chunk.memoryview()[:4]) == bytes(4)
        chunk.lease_check()  # the session is alive: the bytes were the chunk's
    with pytest.raises(ValueError):
        chunk.lease_check()


def test_put_and_checksum(client, ns):
    data = np.arange(1 << 16, dtype=np.uint8).tobytes()
    client.put(f"/{ns}/p", data, checksum="xxh3")
    with client.open(f"/{ns}/p") as chunk:
        assert chunk.memoryview() == data
        assert chunk.verify()


def test_views_are_zero_copy(server, client, ns):
    path = f"/{ns}/z"
    with client.create(path, 1 << 20) as chunk:
        chunk.numpy(np.float32)[:] = 1.5
        chunk.seal()
    with client.open(path) as chunk:
        assert in_pool(chunk.data_ptr, chunk.size, server.pool)
        array = chunk.numpy(np.float32, (512, 512))
        tensor = chunk.torch(torch.float32, (256, 1024))
        assert array.ctypes.data == chunk.data_ptr == tensor.data_ptr()
        assert not array.flags.writeable
        assert float(tensor.sum()) == 1.5 * (1 << 18)
        assert np.frombuffer(chunk.memoryview(), np.uint8).ctypes.data == chunk.data_ptr


def test_views_of_a_writable_chunk_write_the_pool(client, ns):
    path = f"/{ns}/w"
    with client.create(path, 64) as chunk:
        chunk.torch(torch.int32)[:] = torch.arange(16, dtype=torch.int32)
        chunk.seal()
    with client.open(path) as chunk:
        assert chunk.numpy(np.int32).tolist() == list(range(16))


def test_view_shapes_are_checked(client, ns):
    with client.create(f"/{ns}/s", 10) as chunk:
        with pytest.raises(ValueError):
            chunk.numpy(np.float32)  # 10 bytes are not whole floats
        with pytest.raises(ValueError):
            chunk.torch(torch.float32, (3,))
        assert chunk.numpy(np.uint16, (5,)).shape == (5,)


def test_lookup_prefix_stops_at_the_first_missing(client, ns):
    paths = [f"/{ns}/{i}" for i in range(4)]
    for p in paths[:2] + paths[3:]:
        client.put(p, p.encode())
    hits = client.lookup_prefix(paths)
    assert [c.path for c in hits] == paths[:2]
    assert [bytes(c.memoryview()) for c in hits] == [p.encode() for p in paths[:2]]


def test_unlink_pin_unpin(client, ns):
    path = f"/{ns}/u"
    client.put(path, b"x")
    client.pin(path)
    client.pin(path, ttl_ms=60000)
    client.unpin(path)
    client.unlink(path)
    with pytest.raises(FileNotFoundError):
        client.open(path)
    with pytest.raises(FileNotFoundError):
        client.pin(path)


def test_pool_info(client, ns):
    before = client.pool_info()
    assert before.total > 0 and before.unit > 0 and before.free <= before.total
    client.put(f"/{ns}/big", bytes(4 << 20))
    after = client.pool_info()
    assert after.free <= before.free - (4 << 20)
    assert after.files > before.files


def test_alloc_publish(server, client, ns):
    chunk = client.alloc(8192, contiguous=True)
    assert chunk.path is None and chunk.writable
    assert in_pool(chunk.data_ptr, chunk.size, server.pool)
    chunk.write(b"published")
    chunk.publish(f"/{ns}/pub")
    assert chunk.path == f"/{ns}/pub" and not chunk.writable
    with client.open(f"/{ns}/pub") as again:
        assert bytes(again.memoryview()[:9]) == b"published"
        assert again.data_ptr == chunk.data_ptr
    # A publish that loses keeps the loser's space and views, until released:
    # no later allocation is given that space under them.
    other = client.alloc(8192)
    view = other.memoryview()
    view[:5] = b"loser"
    with pytest.raises(FileExistsError):
        other.publish(f"/{ns}/pub")
    assert other.writable
    with client.alloc(8192) as later:
        later.write(b"later")
        assert later.data_ptr != other.data_ptr
    assert bytes(view[:5]) == b"loser"
    other.publish(f"/{ns}/pub2")
    with client.open(f"/{ns}/pub2") as again:
        assert bytes(again.memoryview()[:5]) == b"loser"


def test_pool_regions_hold_contiguous_chunks(server, client, ns):
    regions = client.pool_regions()
    assert regions and all(r.length > 0 for r in regions)
    with client.create(f"/{ns}/c", 3 << 20, contiguous=True) as chunk:
        assert any(r.base <= chunk.data_ptr and chunk.data_ptr + chunk.size <= r.base + r.length
                   for r in regions)
        assert all(in_pool(r.base, r.length, server.pool) for r in regions)


def test_count_prefix(client, ns):
    paths = [f"/{ns}/{i}" for i in range(5)]
    for p in paths[:3]:
        client.put(p, b"v")
    assert client.count_prefix(paths) == 3
    assert client.count_prefix(paths[3:]) == 0
    assert client.count_prefix([]) == 0


def test_client_context_and_closed(server):
    with maru.Client(server.url) as c:
        assert not c.closed
    assert c.closed
    with pytest.raises(ValueError):
        c.pool_info()
    c.close()  # idempotent
