"""Fixtures: a real maru-server on a real pool file under /dev/shm, started
by the one launcher of the tests and the examples (python/testing/maru_node.py,
imported from the build tree as the package is)."""

from __future__ import annotations

import itertools
import uuid
from typing import Callable, Iterator, List

import pytest

import maru
from maru_node import MaruNode

_counter = itertools.count()


def _node(pool_size: int = 64 << 20, unit: int = 64 << 10, **kwargs: object) -> MaruNode:
    """A node as the tests want it: a small pool that processes of other
    uids may map (tests that drop privileges)."""
    return MaruNode(pool_size=pool_size, unit=unit, mode="666", **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def server() -> Iterator[MaruNode]:
    """One server for the session; tests keep apart by namespace."""
    with _node() as s:
        yield s


@pytest.fixture
def make_server() -> Iterator[Callable[..., MaruNode]]:
    """Starts servers of a test's own (e.g. with a small pool); stopped after it."""
    made: List[MaruNode] = []

    def make(**kwargs: object) -> MaruNode:
        s = _node(**kwargs)
        made.append(s)
        return s.start()

    try:
        yield make
    finally:
        for s in made:
            s.close()


@pytest.fixture
def ns() -> str:
    """A namespace (directory) of this test's own."""
    return f"t{next(_counter)}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(server: MaruNode) -> Iterator[maru.Client]:
    with maru.Client(server.url, instance="pytest") as c:
        yield c


@pytest.fixture
def handler(server: MaruNode, ns: str) -> Iterator[maru.MaruHandler]:
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

