"""Negative errnos of the C library become OSError subclasses carrying errno."""

import errno
import os
import subprocess
import sys

import pytest

import maru


def test_enoent_is_file_not_found(client, ns):
    path = f"/{ns}/missing"
    with pytest.raises(FileNotFoundError) as e:
        client.open(path)
    assert e.value.errno == errno.ENOENT and e.value.filename == path
    with pytest.raises(FileNotFoundError):
        client.unlink(path)


def test_eexist_is_file_exists(client, ns):
    path = f"/{ns}/x"
    client.put(path, b"1")
    with pytest.raises(FileExistsError) as e:
        client.create(path, 1)
    assert e.value.errno == errno.EEXIST


def test_ebusy_while_being_written(client, ns):
    path = f"/{ns}/busy"
    with client.create(path, 10):
        with pytest.raises(OSError) as e:
            client.open(path)
        assert e.value.errno == errno.EBUSY


def test_a_nul_in_a_path_is_refused_not_cut_short(server, client, ns):
    """The C library's strings end at a NUL: "/ns/a\\0b" would be "/ns/a"."""
    short, bad = f"/{ns}/a", f"/{ns}/a\0b"
    calls = [lambda: client.put(bad, b"1"),
             lambda: client.create(short, 1, parent=bad),
             lambda: client.open(bad),
             lambda: client.open_partial(bad),
             lambda: client.lookup_prefix([short, bad]),
             lambda: client.lookup_views([short, bad]),
             lambda: client.count_prefix([bad]),
             lambda: client.create_batch([bad], [1]),
             lambda: client.unlink(bad),
             lambda: client.pin(bad),
             lambda: client.unpin_batch([bad]),
             lambda: client.hint_batch([bad], maru.Hint.KEEP),
             lambda: client.alloc(1).publish(bad),
             lambda: maru.Client(server.url, instance="a\0b")]
    for call in calls:
        with pytest.raises(ValueError, match="null byte"):
            call()
    assert client.count_prefix([short]) == 0  # nothing was made at the short path


def test_einval_and_enametoolong(client, ns):
    with pytest.raises(OSError) as e:
        client.open("relative/path")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        client.create(f"/{ns}/" + "n" * 256, 1)
    assert e.value.errno == errno.ENAMETOOLONG


def test_enospc_and_efbig(make_server, ns):
    server = make_server(pool_size=8 << 20)
    with maru.Client(server.url) as c:
        with pytest.raises(OSError) as e:
            c.create(f"/{ns}/huge", 1 << 30)
        assert e.value.errno in (errno.EFBIG, errno.ENOSPC)
        # Unsealed reservations cannot be evicted: the pool fills up.
        held = c.create(f"/{ns}/a", 6 << 20)
        with pytest.raises(OSError) as e:
            c.create(f"/{ns}/b", 4 << 20)
        assert e.value.errno == errno.ENOSPC
        held.release()


def test_connect_refused():
    with pytest.raises(OSError) as e:
        maru.Client("unix:///nonexistent-maru-dir/maru.sock")
    assert e.value.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTCONN)


def test_strerror():
    assert maru.strerror(-errno.ESTALE) == maru.strerror(errno.ESTALE)
    assert isinstance(maru.errno_error(-errno.EACCES, "/p"), PermissionError)


def test_misuse_is_a_value_error(client, ns):
    with client.create(f"/{ns}/m", 4) as chunk:
        with pytest.raises(ValueError):
            chunk.write(b"12345")  # past the end
        chunk.seal()
        with pytest.raises(ValueError):
            chunk.write(b"1")  # sealed chunks are immutable
    with pytest.raises(ValueError):
        chunk.size  # released


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another user")
def test_eacces_is_permission_error(server, client, ns):
    path = f"/{ns}/private"
    with client.create(path, 4, mode=0o600) as chunk:
        chunk.seal()
    os.chmod(os.path.dirname(server.socket), 0o755)
    code = f"""
import os, sys
os.setgid(65534); os.setuid(65534)
import maru
c = maru.Client({server.url!r})
try:
    c.open({path!r})
except PermissionError as e:
    sys.exit(0 if e.errno in (13, 1) else 3)
sys.exit(2)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()
