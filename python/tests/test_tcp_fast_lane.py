"""The fast lane over TCP from the Python package: a client of a token
server over TCP uses it without being told (the server's FastLaneTcp
counter grows), and MARU_FAST_LANE=0 keeps a client on gRPC."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import maru
from maru_node import token_tcp_node


def _lane_requests(node) -> int:
    out = subprocess.run([node.maructl, "stats", "--json", "--server", node.url],
                         check=True, capture_output=True, text=True).stdout
    ops = json.loads(out)["operations"]
    return sum(o["count"] for o in ops if o["op"] == "FastLaneTcp")


def _store_and_read(url: str, path: str) -> None:
    with maru.Client(url) as c:
        c.put(path, b"\x07" * 4096)
        with c.open(path) as chunk:
            assert bytes(chunk.memoryview()[:4]) == b"\x07" * 4


def test_a_tcp_client_takes_the_fast_lane_and_can_refuse_it(tmp_path):
    with token_tcp_node(tmp_path) as node:
        url = f"tcp://127.0.0.1:{node.port}"
        _store_and_read(url, "/lane/a")
        used = _lane_requests(node)
        assert used >= 2  # the create and the seal at least
        # A process told MARU_FAST_LANE=0 does the same over gRPC only.
        env = dict(os.environ, MARU_FAST_LANE="0")
        code = ("import sys; sys.path[:0] = %r; import test_tcp_fast_lane as t; "
                "t._store_and_read(%r, '/lane/b')" % (sys.path, url))
        subprocess.run([sys.executable, "-c", code], env=env, check=True,
                       cwd=os.path.dirname(__file__))
        assert _lane_requests(node) == used
