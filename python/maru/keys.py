"""Keys of the original Maru API as paths of the Maru namespace.

This is the one place where keys become paths: every ``MaruHandler`` method
goes through :func:`key_component` (:func:`key_to_path` is it under a
namespace).
"""

from __future__ import annotations

import re
from typing import Union

Key = Union[int, str, bytes]

# Bytes kept as they are in a path component; every other byte is written
# %XX (two upper-case hex digits), '%' itself included.
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
_ALL_SAFE = re.compile(rb"[A-Za-z0-9_.-]+")  # hashes and the like: nothing to escape


def check_namespace(namespace: str) -> str:
    """Returns ``namespace`` as an absolute directory path ("kv" -> "/kv").

    Raises ValueError for an empty namespace or an empty, "." or ".."
    component: a namespace is a directory of its own, never the root.
    """
    parts = namespace.strip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"maru: bad namespace {namespace!r}")
    return "/" + "/".join(parts)


def escape_component(raw: bytes) -> str:
    """Escapes ``raw`` into one path component.

    Bytes outside ``[A-Za-z0-9._-]`` become ``%XX``, so '/' cannot make a
    new component; a component of dots only ("." or "..") has its dots
    escaped too, so it cannot name the directory or its parent. The mapping
    is one-to-one.
    """
    if not raw:
        raise ValueError("maru: empty key")
    if raw.strip(b".") == b"":
        return "%2E" * len(raw)
    if _ALL_SAFE.fullmatch(raw):
        return raw.decode("ascii")
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in raw)


def key_component(key: Key) -> str:
    """The path component of ``key`` (see :func:`key_to_path`)."""
    if isinstance(key, str):
        return escape_component(key.encode("utf-8"))
    if isinstance(key, bool):
        raise TypeError("maru: keys are int, str or bytes, not bool")
    if isinstance(key, int):
        return f"{key:d}"
    if isinstance(key, (bytes, bytearray, memoryview)):
        return escape_component(bytes(key))
    raise TypeError(f"maru: keys are int, str or bytes, not {type(key).__name__}")


def key_to_path(key: Key, namespace: str = "kv") -> str:
    """The path of the chunk that stores ``key``: ``/<namespace>/<key>``.

    - ``int``: in decimal (``12345`` -> ``/kv/12345``, ``-1`` -> ``/kv/-1``);
    - ``str``: its UTF-8 bytes, escaped by :func:`escape_component`
      (``"a/b"`` -> ``/kv/a%2Fb``, ``".."`` -> ``/kv/%2E%2E``);
    - ``bytes``: escaped the same way.

    So ``12345``, ``"12345"`` and ``b"12345"`` name the same chunk (the
    original Maru took keys as strings and as integers), and no key can
    leave its namespace. A key longer than 255 bytes once escaped is
    refused by the library (``OSError(ENAMETOOLONG)``).
    """
    return f"{check_namespace(namespace)}/{key_component(key)}"
