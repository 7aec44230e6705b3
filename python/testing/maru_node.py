"""A maru-server of our own on a pool file in /dev/shm: the one launcher of
the Python tests (python/tests/conftest.py), the tiny model's tests, its
demo and its benchmarks (examples/tiny_llm).

As tests/harness.cc does: `maructl mkpool` a uniquely named pool, start
`maru-server` on a Unix socket in a temporary directory, wait until the
socket answers, and at the end stop it by pid and remove what was made.

The build copies this file to build/python/maru_node.py, beside the
package, so that whoever runs with PYTHONPATH=build/python imports it; the
binaries it starts are those of that build tree ($MARU_BUILD_ROOT, else
the tree the copy lies in). It is not installed.
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator, List, Optional

_counter = itertools.count()


def build_root() -> Path:
    """The meson build tree whose binaries a node runs."""
    env = os.environ.get("MARU_BUILD_ROOT")
    return Path(env) if env else Path(__file__).resolve().parents[1]


def _die_with_parent() -> None:
    # A server outlives no test that crashed: the kernel stops it with us.
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Polls `condition` until it holds or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


def stop(proc: Optional[subprocess.Popen], timeout: float = 20.0) -> None:
    """Stops a child of ours by pid: SIGTERM, then SIGKILL if it lingers.
    A child a test left stopped (SIGSTOP) is woken first."""
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGCONT)
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class MaruNode:
    """A maru-server on its own pool file, started and stopped by pid.

    ``MaruNode(pool_size, unit, extra)`` formats nothing until
    :meth:`start` (or ``with``); ``extra`` are more maru-server flags;
    ``mode`` is the pool file's (666 lets processes of other uids map it).
    """

    def __init__(self, pool_size: int = 256 << 20, unit: int = 64 << 10,
                 extra: Optional[List[str]] = None, mode: str = "600",
                 index_size: Optional[str] = "0") -> None:
        build = build_root()
        self.maructl = str(build / "tools" / "maructl")
        self.binary = str(build / "src" / "meta" / "maru-server")
        name = f"maru-node-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
        self.pool = f"/dev/shm/{name}.pool"
        self.dir = tempfile.mkdtemp(prefix="maru-node-")
        self.socket = os.path.join(self.dir, "maru.sock")
        self.url = "unix://" + self.socket
        self.log = os.path.join(self.dir, "server.log")
        self.extra = extra or []
        self.proc: Optional[subprocess.Popen] = None
        self.pool_size, self.unit, self.mode = pool_size, unit, mode
        # mkpool's --index-size: "0" (an index file) keeps all of a small
        # pool for chunks, which the full-pool tests count on; None: the
        # region mkpool reserves by default.
        self.index_size = index_size

    def _answers(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(self.socket)
            except OSError:
                return False
            return True

    def start(self) -> "MaruNode":
        """Formats the pool and starts the server; raises if it does not answer."""
        try:
            subprocess.run([self.maructl, "mkpool", self.pool, "--size", str(self.pool_size),
                            "--unit", str(self.unit), "--mode", self.mode,
                            *([] if self.index_size is None else ["--index-size", self.index_size])],
                           check=True, capture_output=True)
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    [self.binary, "--pool", self.pool, "--db", os.path.join(self.dir, "db"),
                     "--listen", self.url, "--log-level", "warn", *self.extra],
                    stdout=log, stderr=log, preexec_fn=_die_with_parent)
            if not wait_for(lambda: self.proc.poll() is not None or self._answers()) \
                    or self.proc.poll() is not None:
                raise RuntimeError("maru-server did not start:\n" + self.read_log())
        except BaseException:
            self.close()
            raise
        return self

    def read_log(self) -> str:
        try:
            return Path(self.log).read_text(errors="replace")
        except OSError:
            return ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def deferred_bytes(self) -> int:
        """Bytes of unlinked chunks that a lease still holds (``maructl df``)."""
        out = subprocess.run([self.maructl, "df", "--json", "--server", self.url],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)["deferred"]

    def stop(self) -> None:
        """Stops the server; the pool and its directory stay until close()."""
        stop(self.proc)
        self.proc = None

    def close(self) -> None:
        """Stops the server and removes the pool and its directory."""
        self.stop()
        try:
            os.unlink(self.pool)
        except FileNotFoundError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "MaruNode":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def free_port() -> int:
    """A TCP port on loopback nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def token_tcp_node(work: Path, pool_size: int = 96 << 20) -> Iterator[MaruNode]:
    """A server on a Unix socket and on TCP (``node.port``), TCP callers
    identified by a token mapped to this uid (docs/security.md, "TCP"); the
    clients of this process and its children get the token through
    MARU_TOKEN_FILE while it runs."""
    token = uuid.uuid4().hex
    tokens = work / "tokens"
    tokens.write_text(f"{token} {os.getuid()}:{os.getgid()}\n")
    tokens.chmod(0o600)
    client_token = work / "token"
    client_token.write_text(token + "\n")
    client_token.chmod(0o600)
    port = free_port()
    saved = os.environ.get("MARU_TOKEN_FILE")
    os.environ["MARU_TOKEN_FILE"] = str(client_token)
    try:
        with MaruNode(pool_size=pool_size, extra=["--listen", f"tcp://127.0.0.1:{port}",
                                                  "--token-file", str(tokens)]) as n:
            n.port = port
            yield n
    finally:
        if saved is None:
            os.environ.pop("MARU_TOKEN_FILE", None)
        else:
            os.environ["MARU_TOKEN_FILE"] = saved
