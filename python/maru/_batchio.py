"""The connectors' one seam to the copy calls: scatter/gather batches.

An op is ``(chunk, buffer, chunk_offset)``: copy ``len(buffer)`` bytes
between the chunk at ``chunk_offset`` and ``buffer`` (any object exporting
a contiguous buffer, a CPU torch tensor, or a :func:`raw_buffer`).
:func:`read_into_batch` and :func:`write_from_batch` return None or the
OSError per op, as ``Client.read_into_batch`` / ``write_from_batch`` do.

The engines' connectors (maru.sglang, maru.lmcache) copy only through here,
so how a batch reaches the library is decided in this one file.
:func:`read_into_prefix` takes ops ``(index, buffer, chunk_offset)`` into
the chunks of a :meth:`Client.lookup_views` answer instead.
"""

from __future__ import annotations

import ctypes
from typing import Any, List, Optional, Sequence, Tuple

from ._maru import BATCH_MAX, Prefix
from .chunk import Chunk
from .client import Client, errno_error

Op = Tuple[Chunk, Any, int]


def raw_buffer(address: int, length: int) -> Any:
    """A writable buffer over ``length`` bytes at ``address`` of this process.

    For engines that describe their host memory as (pointer, length) pairs
    (SGLang's ``get_page_buffer_meta``); the caller keeps that memory alive.
    """
    return (ctypes.c_char * length).from_address(address)


def tensor_bytes(tensor: Any) -> Any:
    """A CPU tensor's bytes, as a flat uint8 tensor sharing its storage.

    Any dtype: numpy has no bfloat16 (nor float8), so a tensor goes to the
    library as bytes, never through ``.numpy()`` of its own dtype. Raises
    ValueError for a tensor that is not on the CPU or not contiguous.
    """
    if tensor.device.type != "cpu":
        raise ValueError(f"maru: a {tensor.device.type} tensor; the copy calls take CPU memory")
    if not tensor.is_contiguous():
        raise ValueError("maru: a tensor that is not contiguous")
    import torch  # loaded already: a tensor exists

    flat = tensor.reshape(-1)
    return flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)


def _as_buffer(obj: Any) -> Any:
    # torch tensors (1.13) do not export the buffer protocol, which the
    # binding takes: the numpy view of their bytes shares the storage.
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return obj
    if hasattr(obj, "element_size") and hasattr(obj, "data_ptr"):
        return tensor_bytes(obj).numpy()
    numpy = getattr(obj, "numpy", None)
    if numpy is not None:
        return numpy()
    return obj


def _in_calls(call: Any, ops: Sequence[Op]) -> List[Optional[OSError]]:
    # One library call per BATCH_MAX ops (a layer_first page has two pieces
    # per layer: 128 pages of a 32-layer model are 8192 ops).
    errors: List[Optional[OSError]] = []
    for start in range(0, len(ops), BATCH_MAX):
        errors += call([(c, _as_buffer(b), off) for c, b, off in ops[start:start + BATCH_MAX]])
    return errors


def read_into_batch(client: Client, ops: Sequence[Op]) -> List[Optional[OSError]]:
    """``Client.read_into_batch``: chunk bytes into the caller's buffers, one
    call of the library per ``maru.BATCH_MAX`` ops (GIL released)."""
    return _in_calls(client.read_into_batch, ops)


def read_into_prefix(prefix: Prefix, ops: Sequence[Tuple[int, Any, int]]) -> List[Optional[OSError]]:
    """``Prefix.read_into_batch``: ops ``(index, buffer, chunk_offset)``
    into chunks of a :meth:`Client.lookup_views` answer, one call of the
    library per ``maru.BATCH_MAX`` ops (GIL released); None or the OSError
    per op."""
    errors: List[Optional[OSError]] = []
    for start in range(0, len(ops), BATCH_MAX):
        results = prefix.read_into_batch([(i, _as_buffer(b), off)
                                          for i, b, off in ops[start:start + BATCH_MAX]])
        errors += [errno_error(rc) if rc else None for rc in results]
    return errors


def write_from_batch(client: Client, ops: Sequence[Op]) -> List[Optional[OSError]]:
    """``Client.write_from_batch``: the caller's buffers into writable chunks,
    one call of the library per ``maru.BATCH_MAX`` ops (GIL released)."""
    return _in_calls(client.write_from_batch, ops)
