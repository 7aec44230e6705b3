"""maru.Chunk: one chunk handle, its bytes and zero-copy views of them."""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple

from . import _maru

if TYPE_CHECKING:  # optional dependencies, imported when used
    import numpy
    import torch


def _element_count(size: int, itemsize: int, shape: Optional[Sequence[int]]) -> int:
    if shape is None:
        if size % itemsize:
            raise ValueError(f"maru: {size} bytes are not a whole number of {itemsize}-byte items")
        return size // itemsize
    count = math.prod(shape)
    if count * itemsize > size:
        raise ValueError(f"maru: shape {tuple(shape)} needs {count * itemsize} bytes, "
                         f"the chunk has {size}")
    return count


class Chunk:
    """A chunk of the pool, held by this process.

    A chunk from :meth:`Client.create` or :meth:`Client.alloc` is writable
    until :meth:`seal` / :meth:`publish`; one from :meth:`Client.open` or
    :meth:`Client.lookup_prefix` is read-only. Either way its bytes are in
    the shared pool mapping, and :meth:`memoryview`, :meth:`numpy` and
    :meth:`torch` return views of them without a copy.

    Lifetime: the handle (and with it the lease that keeps the bytes from
    being reused, or the reservation of an unsealed chunk) is owned by an
    internal buffer exporter that every view references. :meth:`release`
    (or leaving a ``with`` block) drops this object's reference; the handle
    is released when the last view is garbage-collected too. A tensor that
    outlives its chunk therefore still reads the bytes it was made from, even
    after the file is unlinked, replaced or evicted. Releasing an unsealed
    chunk abandons it (once no view is left).

    Do not write through a view after :meth:`seal`: sealed chunks are
    immutable and other processes read them (torch has no read-only tensors;
    numpy arrays of sealed chunks are read-only).
    """

    __slots__ = ("_handle", "_path")

    def __init__(self, handle: _maru.ChunkHandle, path: Optional[str] = None) -> None:
        self._handle: Optional[_maru.ChunkHandle] = handle
        self._path = path

    def _live(self) -> _maru.ChunkHandle:
        if self._handle is None:
            raise ValueError("maru: operation on a released chunk")
        return self._handle

    @property
    def path(self) -> Optional[str]:
        """The chunk's path, or None for an unpublished chunk from alloc()."""
        return self._path

    @property
    def size(self) -> int:
        """Bytes in the chunk."""
        return self._live().size

    def __len__(self) -> int:
        return self.size

    @property
    def data_ptr(self) -> int:
        """The address of the chunk's bytes in this process (in the pool mapping)."""
        return self._live().data_ptr

    @property
    def writable(self) -> bool:
        """True until the chunk is sealed or published."""
        return self._live().writable

    @property
    def released(self) -> bool:
        """True once :meth:`release` was called."""
        return self._handle is None

    def memoryview(self) -> memoryview:
        """A memoryview of the bytes (writable until sealed); it holds the lease."""
        return memoryview(self._live())

    def numpy(self, dtype: Any = "uint8", shape: Optional[Sequence[int]] = None) -> "numpy.ndarray":
        """A numpy array over the chunk's bytes, without a copy.

        ``shape`` None: a flat array of the whole chunk. Read-only for a
        sealed chunk. The array holds the lease until it is gone.
        """
        import numpy as np

        dt = np.dtype(dtype)
        handle = self._live()
        count = _element_count(handle.size, dt.itemsize, shape)
        array = np.frombuffer(handle, dtype=dt, count=count)
        return array if shape is None else array.reshape(tuple(shape))

    def torch(self, dtype: "Optional[torch.dtype]" = None,
              shape: Optional[Sequence[int]] = None) -> "torch.Tensor":
        """A CPU tensor over the chunk's bytes (``torch.frombuffer``), without a copy.

        ``dtype`` defaults to ``torch.uint8``; ``shape`` None gives a flat
        tensor of the whole chunk. The tensor holds the lease until it is
        gone. torch cannot mark tensors read-only: do not write into the
        tensor of a sealed chunk.
        """
        import torch

        dtype = torch.uint8 if dtype is None else dtype
        handle = self._live()
        itemsize = torch.empty((), dtype=dtype).element_size()
        count = _element_count(handle.size, itemsize, shape)
        if count == 0:  # frombuffer refuses empty buffers; nothing to share
            return torch.empty(tuple(shape) if shape is not None else (0,), dtype=dtype)
        with warnings.catch_warnings():
            # A sealed chunk exports a read-only buffer; torch warns that it
            # cannot mark the tensor read-only. Documented above.
            warnings.simplefilter("ignore", UserWarning)
            tensor = torch.frombuffer(handle, dtype=dtype, count=count)
        return tensor if shape is None else tensor.view(tuple(shape))

    def write(self, data: Any, offset: int = 0) -> None:
        """Copies a bytes-like object into the (writable) chunk at ``offset``, GIL released."""
        self._live().write(data, offset)

    def read_into(self, dst: Any, offset: int = 0) -> None:
        """``maru_read_into``: copies ``len(dst)`` bytes from ``offset`` into ``dst``."""
        self._live().read_into(dst, offset)

    def seal(self) -> None:
        """``maru_seal``: publishes a chunk from :meth:`Client.create`; it becomes read-only."""
        self._live().seal()

    def publish(self, path: str, parent: Optional[str] = None) -> None:
        """``maru_publish``: names a chunk from :meth:`Client.alloc` at ``path`` and seals it.

        Raises FileExistsError if ``path`` exists or is being written (first
        writer wins). The chunk then keeps its space and its bytes, and views
        taken before stay valid: publish it elsewhere, or release it (the
        space is reused only once the chunk and every view are gone).
        """
        self._live().publish(path, parent)
        self._path = path

    # --- layer-wise ------------------------------------------------------

    @property
    def parts(self) -> int:
        """``maru_chunk_parts``: the parts the chunk is written in (1: one piece)."""
        return self._live().parts

    def part_range(self, i: int) -> Tuple[int, int]:
        """(offset, length) of part ``i``: the chunk's size split in :attr:`parts` equal parts."""
        handle = self._live()
        parts = handle.parts
        if not 0 <= i < parts:
            raise IndexError(f"maru: part {i} of a chunk of {parts} parts")
        length = handle.size // parts
        return i * length, length

    def publish_part(self, upto: int) -> None:
        """``maru_publish_part`` (writer): parts ``[0, upto]`` are final; readers wake.

        Monotonic: publishing a published part again does nothing.
        :meth:`seal` publishes the rest.
        """
        self._live().publish_part(upto)

    def wait_part(self, i: int, timeout: Optional[float] = None) -> None:
        """``maru_wait_part`` (reader of :meth:`Client.open_partial`): returns once
        part ``i`` is published (at once for a sealed chunk), GIL released.

        ``timeout`` in seconds (None: no limit). Raises ``TimeoutError``
        (errno ETIMEDOUT), or ``OSError(errno.ECONNABORTED)`` if the writer
        aborted or died: the chunk will never be sealed and parts not yet
        published must not be used.
        """
        timeout_ms = -1 if timeout is None else max(0, math.ceil(timeout * 1000))
        self._live().wait_part(i, min(timeout_ms, 2**31 - 1))

    def verify(self) -> bool:
        """``maru_verify``: False if the bytes no longer match the checksum recorded at seal."""
        return self._live().verify()

    def lease_check(self) -> None:
        """``maru_lease_check``: call after reading; returns if the bytes read were the chunk's.

        Raises ``OSError(errno.ESTALE)`` if the lease may have lapsed since the
        open (this process was stopped or stalled past half the session
        timeout, or a resumed session lost it): what was read may be another
        chunk's bytes; discard it and release the chunk. No round trip.
        """
        self._live().lease_check()

    def release(self) -> None:
        """Drops this handle's reference; see the class notes on lifetime. Idempotent."""
        self._handle = None

    def __enter__(self) -> "Chunk":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        if self._handle is None:
            return f"<maru.Chunk {self._path!r} released>"
        state = "writable" if self._handle.writable else "sealed"
        return f"<maru.Chunk {self._path!r} {self._handle.size} bytes {state}>"
