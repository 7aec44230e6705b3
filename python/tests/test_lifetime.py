"""Views hold the lease: no view ever points at bytes the pool reused."""

import gc
import threading

import numpy as np
import pytest

import maru
from maru_node import wait_for


def test_tensor_outlives_release_unlink_and_reuse(make_server, ns):
    server = make_server(pool_size=8 << 20, unit=64 << 10)
    size = 1 << 20
    pattern = (np.arange(size, dtype=np.uint64) * 2654435761 % 251).astype(np.uint8)
    with maru.Client(server.url) as c:
        c.put(f"/{ns}/kept", pattern)
        with c.open(f"/{ns}/kept") as chunk:
            tensor = chunk.torch()
            start, end = chunk.data_ptr, chunk.data_ptr + size
        del chunk
        gc.collect()
        c.unlink(f"/{ns}/kept")
        # Fill the pool several times over: eviction recycles everything it
        # may, never the bytes the tensor still leases.
        for i in range(24):
            with c.create(f"/{ns}/fill{i}", size) as filler:
                assert filler.data_ptr + size <= start or end <= filler.data_ptr
                filler.numpy()[:] = 0xFF
                filler.seal()
        assert np.array_equal(tensor.numpy(), pattern)


def test_release_of_an_unsealed_chunk_waits_for_its_views(client, ns):
    path = f"/{ns}/pending"
    chunk = client.create(path, 4096)
    view = chunk.numpy()
    chunk.release()
    view[:] = 3  # still our reservation
    with pytest.raises(FileExistsError):
        client.create(path, 1)  # still being written: not abandoned yet
    del view
    gc.collect()
    client.put(path, b"now free")  # the last view took the reservation with it


def test_release_batch_releases_what_no_view_holds(make_server, ns):
    unit = 64 << 10  # what a chunk of 4096 bytes takes
    server = make_server(unit=unit)
    paths = [f"/{ns}/b{i}" for i in range(100)]
    with maru.Client(server.url) as c:
        for p in paths:
            c.put(p, b"x" * 4096)
        chunks = c.lookup_prefix(paths)
        assert len(chunks) == len(paths)
        view = chunks[7].numpy()
        writing = c.create(f"/{ns}/w", 4096)
        c.release_batch(chunks + [writing])
        assert all(chunk.released for chunk in chunks) and writing.released
        with pytest.raises(ValueError):
            chunks[0].size
        c.put(f"/{ns}/w", b"abandoned")  # the reservation went with the batch
        for p in paths:
            c.unlink(p)
        # Only the chunk a view still holds keeps its bytes from reuse...
        assert wait_for(lambda: server.deferred_bytes() == unit)
        assert view.tobytes() == b"x" * 4096
        del view
        gc.collect()
        # ... until the view goes.
        assert wait_for(lambda: server.deferred_bytes() == 0)
        c.release_batch([])


def _release_on_another_thread(chunk: maru.Chunk) -> None:
    """Released at once: batches keep only what dies on their own thread."""
    t = threading.Thread(target=chunk.release)
    t.start()
    t.join()


def test_release_batches_release_at_their_last_exit_in_any_order(make_server, ns):
    unit = 64 << 10
    server = make_server(unit=unit)
    with maru.Client(server.url) as c:
        names = [f"/{ns}/{n}" for n in ("a", "b", "c")]
        for name in names:
            c.put(name, b"x" * 4096)
        a, b, c_ = (c.open(name) for name in names)
        for name in names:
            c.unlink(name)
        assert server.deferred_bytes() == 3 * unit  # each held by its lease
        outer, inner = maru._maru.ReleaseBatch(), maru._maru.ReleaseBatch()
        outer.__enter__()
        inner.__enter__()
        a.release()  # kept by the batches
        outer.__exit__(None, None, None)  # out of order: the inner one is still entered
        del outer
        gc.collect()
        _release_on_another_thread(b)
        # The server frees b's bytes at its next look at the leases; a's
        # would go with them had the batch released it.
        assert wait_for(lambda: server.deferred_bytes() == 2 * unit)
        inner.__exit__(None, None, None)  # the last exit releases a
        assert wait_for(lambda: server.deferred_bytes() == unit)
        c_.release()  # and releases are at once again
        assert wait_for(lambda: server.deferred_bytes() == 0)


def test_views_outlive_the_client(server, ns):
    c = maru.Client(server.url)
    c.put(f"/{ns}/v", b"still here")
    with c.open(f"/{ns}/v") as chunk:
        view = chunk.memoryview()
        array = chunk.numpy()
    c.close()
    assert bytes(view) == b"still here"  # the pool stays mapped for them
    assert array.tobytes() == b"still here"
    del view, array


def test_memoryinfo_view_holds_the_lease(handler):
    handler.store("k", data=b"value")
    info = handler.retrieve("k")
    assert handler.delete("k")
    assert bytes(info.view) == b"value"
