"""Each batch call against what the single calls of the C library say."""

import errno

import pytest

import maru


def _seed(client, ns, n):
    paths = [f"/{ns}/{i}" for i in range(n)]
    for p in paths:
        client.put(p, p.encode())
    return paths


def _single(call, path):
    try:
        call(path)
    except OSError as e:
        return e.errno
    return 0


def test_count_prefix_matches_lookup_prefix(client, ns):
    paths = _seed(client, ns, 5)
    for probe in (paths, paths[:2] + [f"/{ns}/nope"] + paths[2:], [f"/{ns}/nope"] + paths):
        assert client.count_prefix(probe) == len(client.lookup_prefix(probe))


def test_pin_unpin_unlink_batch_match_single_calls(client, ns):
    paths = _seed(client, ns, 3)
    probe = [paths[0], f"/{ns}/missing", paths[2], "relative"]
    batched = client.pin_batch(probe)
    assert [e.errno if e else 0 for e in batched] == [_single(client.pin, p) for p in probe]
    assert isinstance(batched[1], FileNotFoundError) and batched[1].filename == probe[1]
    batched = client.unpin_batch(probe)
    assert [e.errno if e else 0 for e in batched] == [0, errno.ENOENT, 0, errno.EINVAL]
    batched = client.unlink_batch(probe)
    assert [e.errno if e else 0 for e in batched] == [0, errno.ENOENT, 0, errno.EINVAL]
    assert [_single(client.open, p) for p in paths] == [errno.ENOENT, 0, errno.ENOENT]


def test_create_batch_and_seal_batch(client, ns):
    client.put(f"/{ns}/taken", b"t")
    paths = [f"/{ns}/n0", f"/{ns}/taken", f"/{ns}/n1"]
    created = client.create_batch(paths, [10, 10, 20], contiguous=True)
    assert isinstance(created[1], FileExistsError)
    assert [c.size for c in (created[0], created[2])] == [10, 20]
    for c in (created[0], created[2]):
        c.write(c.path.encode()[-2:])
    assert client.seal_batch([created[0], created[2]]) == [None, None]
    assert not created[0].writable
    for p in (paths[0], paths[2]):
        with client.open(p) as c:
            assert bytes(c.memoryview()[:2]) == p.encode()[-2:]
    assert client.seal_batch([]) == []


def test_create_batch_with_parents(client, ns):
    client.put(f"/{ns}/root", b"r")
    created = client.create_batch([f"/{ns}/child"], [4], parents=[f"/{ns}/root"])
    assert client.seal_batch(created) == [None]


def test_batch_limit(client, ns):
    with pytest.raises(OSError) as e:
        client.count_prefix([f"/{ns}/{i}" for i in range(maru.BATCH_MAX + 1)])
    assert e.value.errno == errno.E2BIG


def test_seal_batch_takes_one_connection(server, client, ns):
    with maru.Client(server.url) as other:
        a = client.create(f"/{ns}/a", 1)
        b = other.create(f"/{ns}/b", 1)
        with pytest.raises(ValueError):
            client.seal_batch([a, b])
