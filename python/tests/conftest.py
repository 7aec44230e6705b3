"""Fixtures: a real maru-server on a real pool file under /dev/shm.

As tests/harness.cc does: `maructl mkpool` a pool with a unique name,
`maru-server --pool --db --listen unix://...`, wait until the socket
answers, and at the end stop it by pid and remove what was made.
"""

from __future__ import annotations

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

import pytest

import maru

_counter = itertools.count()


def build_root() -> Path:
    """The meson build tree: $MARU_BUILD_ROOT, else the one maru was imported from."""
    env = os.environ.get("MARU_BUILD_ROOT")
    if env:
        return Path(env)
    return Path(maru.__file__).resolve().parents[2]


def _die_with_parent() -> None:
    # If the test process dies, so does the server it started.
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    """Polls `condition` until it holds or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


class Server:
    """A maru-server on its own pool file, started and stopped by pid."""

    def __init__(self, pool_size: int = 64 << 20, unit: int = 64 << 10,
                 extra: Optional[List[str]] = None) -> None:
        build = build_root()
        self.maructl = str(build / "tools" / "maructl")
        self.binary = str(build / "src" / "meta" / "maru-server")
        name = f"maru-pytest-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
        self.pool = f"/dev/shm/{name}.pool"
        self.dir = tempfile.mkdtemp(prefix="maru-pytest-")
        self.socket = os.path.join(self.dir, "maru.sock")
        self.url = "unix://" + self.socket
        self.log = os.path.join(self.dir, "server.log")
        self.extra = extra or []
        self.proc: Optional[subprocess.Popen] = None
        subprocess.run([self.maructl, "mkpool", self.pool, "--size", str(pool_size),
                        "--unit", str(unit), "--mode", "666"],
                       check=True, capture_output=True)

    def _answers(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(self.socket)
            except OSError:
                return False
            return True

    def start(self) -> "Server":
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "--pool", self.pool, "--db", os.path.join(self.dir, "db"),
                 "--listen", self.url, *self.extra],
                stdout=log, stderr=log, preexec_fn=_die_with_parent)
        up = wait_for(lambda: self.proc.poll() is not None or self._answers())
        if not up or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("maru-server did not start:\n" + self.read_log())
        return self

    def read_log(self) -> str:
        try:
            return Path(self.log).read_text(errors="replace")
        except OSError:
            return ""

    def deferred_bytes(self) -> int:
        """Bytes of unlinked chunks that a lease still holds (``maructl df``)."""
        out = subprocess.run([self.maructl, "df", "--json", "--server", self.url],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)["deferred"]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # in case a test left it stopped
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        try:
            os.unlink(self.pool)
        except FileNotFoundError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """One server for the session; tests keep apart by namespace."""
    s = Server()
    try:
        yield s.start()
    finally:
        s.cleanup()


@pytest.fixture
def make_server() -> Iterator[Callable[..., Server]]:
    """Starts servers of a test's own (e.g. with a small pool); stopped after it."""
    made: List[Server] = []

    def make(**kwargs: object) -> Server:
        s = Server(**kwargs)  # type: ignore[arg-type]
        made.append(s)
        return s.start()

    try:
        yield make
    finally:
        for s in made:
            s.cleanup()


@pytest.fixture
def ns() -> str:
    """A namespace (directory) of this test's own."""
    return f"t{next(_counter)}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(server: Server) -> Iterator[maru.Client]:
    with maru.Client(server.url, instance="pytest") as c:
        yield c


@pytest.fixture
def handler(server: Server, ns: str) -> Iterator[maru.MaruHandler]:
    config = maru.MaruConfig(server_url=server.url, namespace=ns)
    with maru.MaruHandler(config) as h:
        yield h


def pool_mappings(pool: str) -> List[tuple]:
    """(start, end) of this process's mappings of the pool file."""
    out = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith(pool):
                lo, hi = line.split()[0].split("-")
                out.append((int(lo, 16), int(hi, 16)))
    return out


def in_pool(address: int, length: int, pool: str) -> bool:
    """True if [address, address+length) lies in mappings of the pool file
    (back to back mappings count as one, as in tests/harness.cc)."""
    at, end = address, address + length
    for lo, hi in sorted(pool_mappings(pool)):
        if lo <= at < hi:
            at = hi
    return at >= end

