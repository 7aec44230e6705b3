"""Retention hints (maru.Client.hint / hint_batch) against a real server."""

import errno
import os
import subprocess
import sys

import pytest

import maru


def test_hint_values_and_errors(client, ns):
    path = f"/{ns}/a"
    client.put(path, b"x" * 4096)
    for hint in (maru.Hint.KEEP, maru.Hint.DROP, maru.Hint.NONE, 1):
        client.hint(path, hint)
    for bad in (3, -1, "keep", None, 1.0, True, 1 << 40):
        with pytest.raises(OSError) as e:
            client.hint(path, bad)  # type: ignore[arg-type]
        assert e.value.errno == errno.EINVAL
    with pytest.raises(FileNotFoundError):
        client.hint(f"/{ns}/missing", maru.Hint.KEEP)
    with pytest.raises(IsADirectoryError):
        client.hint(f"/{ns}", maru.Hint.KEEP)
    with pytest.raises(OSError) as e:
        client.hint("relative", maru.Hint.KEEP)
    assert e.value.errno == errno.EINVAL
    with client.create(f"/{ns}/writing", 10):
        with pytest.raises(OSError) as e:
            client.hint(f"/{ns}/writing", maru.Hint.KEEP)
        assert e.value.errno == errno.EBUSY
    assert client.count_prefix([path]) == 1  # nothing lost


def test_hint_batch_per_path_errors(client, ns):
    a, b = f"/{ns}/a", f"/{ns}/b"
    client.put(a, b"1")
    client.put(b, b"2")
    errs = client.hint_batch([a, f"/{ns}/missing", a, b], maru.Hint.KEEP)
    assert errs[0] is None and errs[3] is None
    assert isinstance(errs[1], FileNotFoundError)
    assert isinstance(errs[2], FileExistsError)  # named twice
    assert client.hint_batch([], maru.Hint.DROP) == []
    with pytest.raises(OSError) as e:
        client.hint_batch([a], 5)
    assert e.value.errno == errno.EINVAL


def test_hint_all_takes_any_number(client, ns):
    """hint_all: one hint_batch per BATCH_MAX paths; counts those that took it."""
    paths = [f"/{ns}/c{i}" for i in range(3)]
    for p in paths:
        client.put(p, b"c")
    many = paths + [f"/{ns}/missing{i}" for i in range(maru.BATCH_MAX)] + paths[:1]
    assert client.hint_all(many, maru.Hint.KEEP) == 4  # the last one is a batch of its own
    with pytest.raises(OSError) as e:
        client.hint_batch(many, maru.Hint.KEEP)
    assert e.value.errno == errno.E2BIG
    assert client.hint_all([], maru.Hint.DROP) == 0
    with pytest.raises(OSError) as e:
        client.hint_all(paths, 7)
    assert e.value.errno == errno.EINVAL


def test_hints_reorder_eviction(make_server, ns):
    server = make_server(pool_size=16 << 20,
                         extra=["--high-watermark", "1", "--low-watermark", "1"])
    size = 1 << 20
    with maru.Client(server.url) as c:
        c.put(f"/{ns}/kept", b"k" * size)
        c.put(f"/{ns}/dropped", b"d" * size)
        for i in range(3):
            c.put(f"/{ns}/plain{i}", b"p" * size)
        c.hint(f"/{ns}/kept", maru.Hint.KEEP)
        c.hint(f"/{ns}/dropped", maru.Hint.DROP)

        def stored(path: str) -> bool:
            return c.count_prefix([path]) == 1

        n = 0
        while stored(f"/{ns}/plain0"):
            assert n < 64, "the pool never evicted"
            c.put(f"/{ns}/new{n}", b"n" * size)
            n += 1
        assert not stored(f"/{ns}/dropped")
        assert stored(f"/{ns}/kept")


def test_a_chains_drop_stops_at_a_prefix_another_chain_reads(make_server, ns):
    """hint_batch of a chain, prefix first, with DROP: the server takes it
    tail first (a chain read to its end is dropped whole), up to the chunk
    another (read) chain extends, and after the reads made before it
    (through the shared-memory index: no message), which do not undo it."""
    server = make_server(pool_size=16 << 20,
                         extra=["--high-watermark", "1", "--low-watermark", "1"])
    size = 1 << 20
    shared, mine, theirs = f"/{ns}/shared", f"/{ns}/mine", f"/{ns}/theirs"
    with maru.Client(server.url) as c:
        c.put(shared, b"s" * size)
        c.put(mine, b"m" * size, parent=shared)
        c.put(theirs, b"t" * size, parent=shared)
        solo = [f"/{ns}/solo0", f"/{ns}/solo1"]
        c.put(solo[0], b"0" * size)
        c.put(solo[1], b"1" * size, parent=solo[0])
        c.put(f"/{ns}/plain", b"p" * size)
        for chain in ([shared, theirs], solo):  # read to their ends
            for chunk in c.lookup_prefix(chain):
                chunk.release()
        assert c.hint_batch([shared, mine], maru.Hint.DROP) == [None, None]
        assert c.hint_batch(solo, maru.Hint.DROP) == [None, None]

        def stored(path: str) -> bool:
            return c.count_prefix([path]) == 1

        n = 0
        while any(stored(p) for p in [mine] + solo):  # the dropped go first
            assert n < 64, "the pool never evicted"
            c.put(f"/{ns}/new{n}", b"n" * size)
            n += 1
        assert c.count_prefix([shared, theirs]) == 2 and stored(f"/{ns}/plain")


def test_an_aborted_extension_does_not_stop_a_drop(make_server, ns):
    """A chunk created under a prefix and never sealed stops a drop on the
    prefix while it is written, and no longer once aborted."""
    server = make_server(pool_size=16 << 20,
                         extra=["--high-watermark", "1", "--low-watermark", "1"])
    size = 1 << 20
    prefix, child = f"/{ns}/prefix", f"/{ns}/child"
    with maru.Client(server.url) as c:
        c.put(prefix, b"p" * size)
        c.put(f"/{ns}/plain", b"q" * size)
        with c.create(child, size, parent=prefix):
            pass  # released unsealed: aborted
        for chunk in c.lookup_prefix([prefix]):
            chunk.release()
        c.hint(prefix, maru.Hint.DROP)
        n = 0
        while c.count_prefix([prefix]) == 1:  # the dropped one goes first
            assert n < 64, "the pool never evicted"
            c.put(f"/{ns}/new{n}", b"n" * size)
            n += 1
        assert c.count_prefix([f"/{ns}/plain"]) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another user")
def test_hint_of_another_uids_chunk_is_permission_error(server, client, ns):
    path = f"/{ns}/roots"
    client.put(path, b"r")
    os.chmod(os.path.dirname(server.socket), 0o755)
    code = f"""
import os, sys
os.setgid(65534); os.setuid(65534)
import maru
c = maru.Client({server.url!r})
try:
    c.hint({path!r}, maru.Hint.DROP)
except PermissionError as e:
    sys.exit(0 if e.errno == 13 else 3)
sys.exit(2)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()
