"""The connectors' one seam to the copy calls: scatter/gather batches.

An op is ``(chunk, buffer, chunk_offset)``: copy ``len(buffer)`` bytes
between the chunk at ``chunk_offset`` and ``buffer`` (any object exporting
a contiguous buffer, a CPU torch tensor, or a :func:`raw_buffer`).
:func:`read_into_batch` and :func:`write_from_batch` return None or the
OSError per op, as ``Client.read_into_batch`` / ``write_from_batch`` do.

The engines' connectors (maru.sglang, maru.lmcache) copy only through here,
so how a batch reaches the library is decided in this one file.
"""

from __future__ import annotations

import ctypes
from typing import Any, List, Optional, Sequence, Tuple

from .chunk import Chunk
from .client import Client

Op = Tuple[Chunk, Any, int]


def raw_buffer(address: int, length: int) -> Any:
    """A writable buffer over ``length`` bytes at ``address`` of this process.

    For engines that describe their host memory as (pointer, length) pairs
    (SGLang's ``get_page_buffer_meta``); the caller keeps that memory alive.
    """
    return (ctypes.c_char * length).from_address(address)


def _as_buffer(obj: Any) -> Any:
    # torch tensors do not export the buffer protocol; their numpy view
    # shares the storage (CPU tensors only, contiguous: checked by numpy's
    # buffer export in the binding).
    numpy = getattr(obj, "numpy", None)
    if numpy is not None and not isinstance(obj, (bytes, bytearray, memoryview)):
        return numpy()
    return obj


def _each(ops: Sequence[Op], copy: Any) -> List[Optional[OSError]]:
    # Until Client.read_into_batch / write_from_batch exist (branch
    # layerwise): one library call per op, same results.
    errors: List[Optional[OSError]] = []
    for chunk, buf, off in ops:
        try:
            copy(chunk, _as_buffer(buf), off)
            errors.append(None)
        except OSError as e:
            errors.append(e)
    return errors


def read_into_batch(client: Client, ops: Sequence[Op]) -> List[Optional[OSError]]:
    """Copies chunk bytes into the caller's buffers (one call of the library)."""
    batch = getattr(client, "read_into_batch", None)
    if batch is None:
        return _each(ops, lambda c, b, off: c.read_into(b, off))
    return batch([(c, _as_buffer(b), off) for c, b, off in ops])


def write_from_batch(client: Client, ops: Sequence[Op]) -> List[Optional[OSError]]:
    """Copies the caller's buffers into writable chunks (one call of the library)."""
    batch = getattr(client, "write_from_batch", None)
    if batch is None:
        return _each(ops, lambda c, b, off: c.write(b, off))
    return batch([(c, _as_buffer(b), off) for c, b, off in ops])
