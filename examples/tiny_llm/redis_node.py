"""A redis-server of our own on loopback: a free port below the ephemeral
range, checked to be our process (INFO's process_id), stopped by pid."""
from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile

from maru_node import stop, wait_for
from resp import Resp


def _free_port() -> int:
    for _ in range(200):
        port = random.randrange(20000, 32768)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below 32768")


class RedisNode:
    def __init__(self):
        self.port = _free_port()
        self.dir = tempfile.mkdtemp(prefix="maru-tiny-llm-redis-")
        self.proc = None

    def _ours(self) -> bool:
        try:
            c = Resp("127.0.0.1", self.port, timeout=2)
        except OSError:
            return False
        try:
            info = c.call("INFO", "server").decode()
        finally:
            c.close()
        return f"process_id:{self.proc.pid}\r\n" in info

    def start(self) -> "RedisNode":
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--protected-mode", "yes",
             "--maxmemory", "2gb", "--proto-max-bulk-len", "1gb"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_for(lambda: self.proc.poll() is not None or self._ours(), 20) \
                or self.proc.poll() is not None:
            self.close()
            raise RuntimeError(f"redis-server of our own did not come up on port {self.port}")
        return self

    def close(self) -> None:
        stop(self.proc)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "RedisNode":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
