"""Client.lookup_views: a prefix's chunks as one maru.Prefix, given back in one call."""

import gc
import threading

import numpy as np
import pytest

import maru
from maru_node import wait_for


def test_lookup_views_stops_at_the_first_missing_and_reads_each_chunk(client, ns):
    paths = [f"/{ns}/{i}" for i in range(5)]
    for p in paths[:3] + paths[4:]:
        client.put(p, p.encode() * 3)
    with client.lookup_views(paths) as prefix:
        assert isinstance(prefix, maru.Prefix)
        assert len(prefix) == 3
        assert prefix.sizes == [len(p.encode()) * 3 for p in paths[:3]]
        assert [bytes(prefix[i]) for i in range(3)] == [p.encode() * 3 for p in paths[:3]]
        assert bytes(prefix[-1]) == paths[2].encode() * 3
        assert [bytes(v) for v in prefix] == [p.encode() * 3 for p in paths[:3]]  # iterates
        assert prefix[0].readonly
        with pytest.raises(IndexError):
            prefix[3]
        assert prefix.lease_check() == 3
    assert prefix.released
    with pytest.raises(ValueError):
        prefix.sizes
    prefix.release()  # idempotent
    assert len(client.lookup_views([])) == 0
    assert len(client.lookup_views((f"/{ns}/missing", paths[0]))) == 0


def test_read_into_batch_copies_ops_and_reports_each(client, ns):
    paths = [f"/{ns}/r{i}" for i in range(3)]
    data = [bytes([i + 1]) * (4096 * (i + 1)) for i in range(3)]
    for p, d in zip(paths, data):
        client.put(p, d)
    prefix = client.lookup_views(paths)
    into = [np.zeros(len(d), np.uint8) for d in data]
    half = bytearray(100)
    results = prefix.read_into_batch([(0, into[0], 0), (2, into[2], 0), (1, half, 4000),
                                      (1, into[1], 0)])
    assert results == [0, 0, 0, 0]
    assert [x.tobytes() for x in into] == data and bytes(half) == data[1][4000:4100]
    # Out of the chunk's range: that op alone fails, with its errno.
    bad = bytearray(10)
    assert prefix.read_into_batch([(0, bytearray(4), 0), (0, bad, 4090)])[1] < 0
    with pytest.raises(IndexError):
        prefix.read_into_batch([(5, bad, 0)])
    with pytest.raises(ValueError):
        prefix.read_into_batch([(0, bad)])
    prefix.release()
    with pytest.raises(ValueError):
        prefix.read_into_batch([(0, bad, 0)])


def test_bad_paths_are_refused_before_any_lookup(client, ns):
    with pytest.raises(TypeError):
        client.lookup_views(f"/{ns}/a")  # one str, not a sequence of them
    with pytest.raises(TypeError):
        client.lookup_views([f"/{ns}/a", 7])
    with pytest.raises(ValueError):
        client.lookup_views([f"/{ns}/a\0b"])
    with pytest.raises(OSError):
        client.lookup_views(["relative"])
    with pytest.raises(TypeError):
        client.count_prefix(f"/{ns}/a")


def test_release_gives_back_what_no_view_holds_and_the_rest_with_its_views(make_server, ns):
    unit = 64 << 10  # what a chunk of 4096 bytes takes
    server = make_server(unit=unit)
    paths = [f"/{ns}/b{i}" for i in range(50)]
    with maru.Client(server.url) as c:
        for p in paths:
            c.put(p, b"x" * 4096)
        prefix = c.lookup_views(paths)
        view = np.frombuffer(prefix[7], np.uint8)  # holds chunk 7 through the memoryview
        prefix.release()
        for p in paths:
            c.unlink(p)
        # Only the chunk a view still holds keeps its bytes from reuse...
        assert wait_for(lambda: server.deferred_bytes() == unit)
        assert view.tobytes() == b"x" * 4096
        del view
        gc.collect()
        # ... until the view goes.
        assert wait_for(lambda: server.deferred_bytes() == 0)


def test_a_prefix_dropped_without_release_gives_its_handles_back(make_server, ns):
    unit = 64 << 10
    server = make_server(unit=unit)
    paths = [f"/{ns}/d{i}" for i in range(4)]
    with maru.Client(server.url) as c:
        for p in paths:
            c.put(p, b"y" * 4096)
        prefix = c.lookup_views(paths)
        for p in paths:
            c.unlink(p)
        assert wait_for(lambda: server.deferred_bytes() == 4 * unit)
        del prefix
        gc.collect()
        assert wait_for(lambda: server.deferred_bytes() == 0)


def test_release_on_another_thread_waits_for_copies_in_flight(client, ns):
    """A copy or lease check running (GIL released) when another thread
    releases finishes on handles still held; later ones raise ValueError."""
    paths = [f"/{ns}/t{i}" for i in range(8)]
    for p in paths:
        client.put(p, b"z" * (1 << 20))
    for _ in range(20):
        prefix = client.lookup_views(paths)
        into = [bytearray(1 << 20) for _ in paths]
        outcome = []

        def copy() -> None:
            try:
                while True:
                    outcome.append(prefix.read_into_batch([(i, b, 0) for i, b in enumerate(into)]))
                    prefix.lease_check()
            except ValueError:
                outcome.append("released")

        t = threading.Thread(target=copy)
        t.start()
        prefix.release()
        t.join()
        assert outcome[-1] == "released"
        assert all(r == [0] * len(paths) for r in outcome[:-1])
