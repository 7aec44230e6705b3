"""A handle on an instance.py (or connector_instance.py) process: send a
request, read its answer."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence

HERE = Path(__file__).resolve().parent


class InstanceProcess:
    def __init__(self, server: str, directory: str = "/tiny_llm", block: int = 32,
                 layout: str = "block", name: str = "tiny-llm", script: str = "instance.py",
                 extra: Sequence[str] = (), argv: Optional[List[str]] = None,
                 prefix: Sequence[str] = ()):
        """Starts ``script`` (instance.py, or another of the same protocol:
        the standard flags plus ``extra``, or its own ``argv``) and waits for
        its {"ready": true}. ``prefix`` runs it elsewhere: on another host,
        e.g. ``nsenter -t PID -n -m`` (a command that execs what follows, so
        that the pid is the instance's)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [str(HERE), env.get("PYTHONPATH", "")] if p)
        if argv is None:
            argv = ["--server", server, "--dir", directory, "--block", str(block),
                    "--layout", layout, "--name", name, *extra]
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, str(HERE / script), *argv],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._read()  # {"ready": true}: the model is built, the store connected

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise RuntimeError(f"instance process exited ({code}) without answering")
        return json.loads(line)

    def send(self, **req) -> None:
        """Writes one request line without waiting for the answer."""
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()

    def read(self) -> dict:
        """Reads one answer line."""
        return self._read()

    def request(self, **req) -> dict:
        self.send(**req)
        return self._read()

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind runs in the instance."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self, timeout: Optional[float] = 60) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc.stdout.close()

    def __enter__(self) -> "InstanceProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
