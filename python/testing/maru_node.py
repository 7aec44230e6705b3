"""Starts a maru-server of our own on a pool file in /dev/shm (tests, demo, bench).

As tests/harness.cc does: `maructl mkpool` a uniquely named pool, start
`maru-server` on a Unix socket in a temporary directory, wait until the
socket answers, and at the end stop it by pid and remove what was made.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator, List, Optional

REPO = Path(__file__).resolve().parents[2]


def build_root() -> Path:
    return Path(os.environ.get("MARU_BUILD_ROOT", REPO / "build"))


def _die_with_parent() -> None:
    # A server outlives no test that crashed: the kernel stops it with us.
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def wait_for(condition, timeout: float = 30.0) -> bool:
    """Polls `condition` until it holds or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def stop(proc: Optional[subprocess.Popen], timeout: float = 20.0) -> None:
    """Stops a child of ours by pid: SIGTERM, then SIGKILL if it lingers."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class MaruNode:
    """A maru-server on its own pool file, started and stopped by pid."""

    def __init__(self, pool_size: int = 256 << 20, unit: int = 64 << 10,
                 extra: Optional[List[str]] = None):
        build = build_root()
        self.maructl = str(build / "tools" / "maructl")
        self.binary = str(build / "src" / "meta" / "maru-server")
        self.pool = f"/dev/shm/maru-tiny-llm-{os.getpid()}-{uuid.uuid4().hex[:8]}.pool"
        self.dir = tempfile.mkdtemp(prefix="maru-tiny-llm-")
        self.socket = os.path.join(self.dir, "maru.sock")
        self.url = "unix://" + self.socket
        self.log = os.path.join(self.dir, "server.log")
        self.extra = extra or []
        self.proc: Optional[subprocess.Popen] = None
        self.pool_size, self.unit = pool_size, unit

    def _answers(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(self.socket)
            except OSError:
                return False
            return True

    def start(self) -> "MaruNode":
        try:
            subprocess.run([self.maructl, "mkpool", self.pool, "--size", str(self.pool_size),
                            "--unit", str(self.unit), "--mode", "600"],
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

    def close(self) -> None:
        stop(self.proc)
        self.proc = None
        try:
            os.unlink(self.pool)
        except FileNotFoundError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "MaruNode":
        return self.start()

    def __exit__(self, *exc) -> None:
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
