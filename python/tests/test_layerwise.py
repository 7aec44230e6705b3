"""Layer-wise chunks and scatter/gather batches, against a real maru-server."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch

import maru

PARTS = 4
PART = 4096


def _pattern(i: int) -> bytes:
    return bytes([(i * 37 + 1) % 256]) * PART


def test_wait_before_publish_wakes_reader(server, ns):
    path = f"/{ns}/lw"
    with maru.Client(server.url) as writer, maru.Client(server.url) as reader:
        w = writer.create(path, PARTS * PART, parts=PARTS)
        assert w.parts == PARTS and w.part_range(2) == (2 * PART, PART)
        r = reader.open_partial(path)
        assert r.parts == PARTS and r.size == PARTS * PART
        with pytest.raises(TimeoutError) as e:
            r.wait_part(0, timeout=0)
        assert e.value.errno == errno.ETIMEDOUT
        woke = threading.Event()

        def wait() -> None:
            r.wait_part(0)
            woke.set()

        t = threading.Thread(target=wait)
        t.start()
        w.write(_pattern(0), 0)
        w.publish_part(0)
        t.join(timeout=30)
        assert woke.is_set()
        dst = bytearray(PART)
        assert reader.read_into_batch([(r, dst, 0)]) == [None]
        assert bytes(dst) == _pattern(0)
        # Bytes of parts not yet published are refused.
        assert reader.read_into_batch([(r, dst, PART)])[0].errno == errno.EBUSY
        for i in range(1, PARTS):
            w.write(_pattern(i), i * PART)
        w.publish_part(1)
        w.publish_part(1)  # again: nothing happens
        r.wait_part(1, timeout=30)
        w.seal()
        r.wait_part(PARTS - 1, timeout=30)
        assert bytes(r.memoryview()) == b"".join(_pattern(i) for i in range(PARTS))


def test_part_arguments(client, ns):
    with pytest.raises(OSError) as e:
        client.create(f"/{ns}/odd", 10, parts=3)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        client.create(f"/{ns}/many", 8192, parts=8192)
    assert e.value.errno == errno.EINVAL
    w = client.create(f"/{ns}/p", 2 * PART, parts=2)
    with pytest.raises(OSError) as e:
        w.publish_part(2)
    assert e.value.errno == errno.EINVAL
    r = client.open_partial(f"/{ns}/p")
    with pytest.raises(OSError) as e:
        r.wait_part(2)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        r.publish_part(0)  # a read handle
    assert e.value.errno == errno.EINVAL
    with pytest.raises(FileNotFoundError):
        client.open_partial(f"/{ns}/none")


def test_sealed_chunk_opens_partial(client, ns):
    path = f"/{ns}/sealed"
    with client.create(path, 2 * PART, parts=2) as w:
        w.write(_pattern(0) + _pattern(1))
        w.seal()
    with client.open_partial(path) as r:
        assert r.parts == 2
        r.wait_part(1, timeout=0)
        assert bytes(r.memoryview()[PART:]) == _pattern(1)
    with client.open(path) as r:
        assert r.parts == 2


def test_abort_wakes_reader_with_econnaborted(server, ns):
    path = f"/{ns}/abort"
    with maru.Client(server.url) as writer, maru.Client(server.url) as reader:
        w = writer.create(path, 2 * PART, parts=2)
        w.write(_pattern(0), 0)
        w.publish_part(0)
        r = reader.open_partial(path)
        r.wait_part(0, timeout=30)
        errors = []

        def wait() -> None:
            try:
                r.wait_part(1)
            except OSError as e:
                errors.append(e)

        t = threading.Thread(target=wait)
        t.start()
        w.release()  # abandons the chunk
        t.join(timeout=30)
        assert [e.errno for e in errors] == [errno.ECONNABORTED]
        # The published part stays readable under the reader's lease.
        dst = np.zeros(PART, dtype=np.uint8)
        assert reader.read_into_batch([(r, dst, 0)]) == [None]
        assert dst.tobytes() == _pattern(0)


def test_killed_writer_wakes_reader(make_server, ns):
    srv = make_server(extra=["--session-timeout-ms", "2000", "--heartbeat-ms", "300"])
    path = f"/{ns}/killed"
    code = textwrap.dedent(f"""
        import sys, maru
        c = maru.Client({srv.url!r})
        w = c.create({path!r}, {2 * PART}, parts=2)
        w.publish_part(0)
        print("published", flush=True)
        sys.stdin.read()
    """)
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout.readline().strip() == b"published"
        with maru.Client(srv.url) as reader:
            r = reader.open_partial(path)
            r.wait_part(0, timeout=30)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            with pytest.raises(OSError) as e:
                r.wait_part(1, timeout=60)
            assert e.value.errno == errno.ECONNABORTED
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_scatter_gather_batches(client, ns):
    chunks = [client.create(f"/{ns}/b{i}", 2 * PART) for i in range(3)]
    srcs = [np.full(PART, i + 1, dtype=np.uint8) for i in range(3)]
    ops = [(c, s, PART) for c, s in zip(chunks, srcs)]
    assert client.write_from_batch(ops) == [None, None, None]
    bad = client.write_from_batch([(chunks[0], srcs[0], 2 * PART)])
    assert bad[0].errno == errno.EINVAL
    assert client.seal_batch(chunks) == [None] * 3
    # Scatter: numpy, a torch CPU tensor and a memoryview as destinations.
    a = np.zeros(PART, dtype=np.uint8)
    t = torch.zeros(PART // 4, dtype=torch.float32)
    m = memoryview(bytearray(PART))
    got = client.read_into_batch([(chunks[0], a, PART), (chunks[1], t.numpy(), PART),
                                  (chunks[2], m, PART), (chunks[0], a, 2 * PART)])
    assert got[:3] == [None, None, None] and got[3].errno == errno.EINVAL
    assert (a == 1).all() and (t.numpy().view(np.uint8) == 2).all() and bytes(m) == b"\3" * PART


def test_async_batches(client, ns):
    chunks = [client.create(f"/{ns}/a{i}", PART) for i in range(4)]
    futures = client.write_from_batch_async(
        [(c, bytes([i + 5]) * PART, 0) for i, c in enumerate(chunks)])
    assert futures.result(timeout=30) == [None] * 4
    assert client.seal_batch(chunks) == [None] * 4
    dsts = [np.zeros(PART, dtype=np.uint8) for _ in chunks]
    fut = client.read_into_batch_async([(c, d, 0) for c, d in zip(chunks, dsts)] +
                                       [(chunks[0], np.zeros(2 * PART, np.uint8), 0)])
    results = fut.result(timeout=30)
    assert results[:4] == [None] * 4 and results[4].errno == errno.EINVAL
    assert [int(d[0]) for d in dsts] == [5, 6, 7, 8]
    assert client.read_into_batch_async([]).result(timeout=30) == []


def test_torch_tensors_by_data_pointer(client, ns):
    """CPU tensors of any dtype (bfloat16 has no numpy form) go in directly."""
    src = torch.arange(PART // 2, dtype=torch.bfloat16)
    chunk = client.create(f"/{ns}/t", PART)
    assert client.write_from_batch([(chunk, src, 0)]) == [None]
    chunk.seal()
    dst = torch.zeros(PART // 2, dtype=torch.bfloat16)
    halves = torch.zeros(2, PART // 4, dtype=torch.bfloat16)
    assert client.read_into_batch([(chunk, dst, 0), (chunk, halves[1], PART // 2)]) == [None, None]
    assert torch.equal(dst, src) and torch.equal(halves[1], src[PART // 4:])
    with pytest.raises(ValueError):
        client.read_into_batch([(chunk, halves.t(), 0)])  # not contiguous


def test_async_batch_keeps_its_buffers(client, ns):
    import gc

    chunk = client.create(f"/{ns}/keep", PART)
    chunk.write(b"\x09" * PART)
    chunk.seal()
    dst = np.zeros(PART, dtype=np.uint8)
    probe = memoryview(dst)  # outlives the batch: the bytes can be checked after
    fut = client.read_into_batch_async([(chunk, dst, 0)])
    del dst, chunk
    gc.collect()
    assert fut.result(timeout=30) == [None]
    assert bytes(probe) == b"\x09" * PART


def test_waits_over_grpc_without_the_fast_lane(make_server, ns):
    srv = make_server(extra=["--no-fast-lane"])
    path = f"/{ns}/grpc"
    with maru.Client(srv.url) as writer, maru.Client(srv.url) as reader:
        w = writer.create(path, 2 * PART, parts=2)
        r = reader.open_partial(path)
        done = []
        t = threading.Thread(target=lambda: done.append(r.wait_part(1, timeout=60)))
        t.start()
        w.publish_part(1)
        t.join(timeout=60)
        assert done == [None]
        r.wait_part(0, timeout=0)  # published with part 1
        w.release()  # abandoned: the path goes
        with pytest.raises(FileNotFoundError):
            reader.open_partial(path)


def test_create_batch_in_parts_and_lookup_keeps_the_count(client, ns):
    paths = [f"/{ns}/cb{i}" for i in range(3)]
    chunks = client.create_batch(paths, [2 * PART] * 3, parts=2)
    assert [c.parts for c in chunks] == [2, 2, 2]
    assert isinstance(client.create_batch([f"/{ns}/odd"], [PART + 1], parts=2)[0], OSError)
    for c in chunks:
        c.publish_part(0)
    assert client.seal_batch(chunks) == [None] * 3
    found = client.lookup_prefix(paths)
    assert [c.parts for c in found] == [2, 2, 2]
    found[0].wait_part(1, timeout=0)
    assert found[0].part_range(1) == (PART, PART)
    with pytest.raises(IndexError):
        found[0].part_range(2)
