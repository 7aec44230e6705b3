"""The connector's one seam onto the ``maru`` package.

Everything the scheduler and worker sides do with the pool goes through
:class:`ChunkStore`: count a prefix, open chunks to load, wait for a layer,
copy batches in and out, publish a layer, seal. A chunk is written in
``parts`` equal parts, one per model layer, so that a reader may take layer
i while the writer still computes layer i+1.

A server that cannot be reached makes a call wait for it (up to the
library's ``MARU_RETRY_MS``, 30 s by default, for a restart) and then fail;
after such a failure the store does not call the server again for
``retry_after_s`` (its round trips fail at once with ENOTCONN, and vLLM
computes), so a server that is down costs one wait per interval, not one
per request.
"""

from __future__ import annotations

import errno
import time
from concurrent.futures import Future
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ..chunk import Chunk
from ..client import Client, Hint

#: (chunk, buffer, offset in the chunk): one copy of a batch.
CopyOp = Tuple[Chunk, Any, int]

#: Errors that say the server cannot be reached (not that a chunk is missing).
UNREACHABLE = frozenset({errno.ENOTCONN, errno.ECONNREFUSED, errno.ECONNRESET,
                         errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT})


class ChunkStore:
    """Chunk operations of the connector, over one :class:`maru.Client`."""

    def __init__(self, client: Client, retry_after_s: float = 5.0) -> None:
        self.client = client
        self.retry_after_s = retry_after_s
        self.down_until = 0.0  # monotonic time before which the server is not asked

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """One round trip, unless the server was found unreachable lately."""
        if time.monotonic() < self.down_until:
            raise OSError(errno.ENOTCONN, "maru: the server was unreachable; not asked "
                          f"again for up to {self.retry_after_s:g} s")
        try:
            return fn(*args, **kwargs)
        except OSError as e:
            if e.errno in UNREACHABLE:
                self.down_until = time.monotonic() + self.retry_after_s
            raise

    def count(self, paths: Sequence[str], count_writing: bool) -> int:
        """How many of ``paths``, from the start, a reader may load: sealed
        chunks, and with ``count_writing`` also chunks still being written."""
        if not paths:
            return 0
        n = self._call(self.client.count_prefix, paths)
        if not count_writing:
            return n
        while n < len(paths):  # one probe per chunk in flight: few at a time
            try:
                self._call(self.client.open_partial, paths[n]).release()
            except OSError:
                break
            n += 1
        return n

    def open_load(self, paths: Sequence[str]) -> Tuple[List[Chunk], int]:
        """Read handles on the longest prefix of ``paths`` that is there, and
        how many of them (from the start) are sealed: the sealed prefix in
        one round trip (``lookup_prefix``), then one ``open_partial`` per
        chunk still being written. Each handle holds a lease on its bytes."""
        out: List[Chunk] = self._call(self.client.lookup_prefix, paths) if paths else []
        sealed = len(out)
        for path in paths[sealed:]:
            try:
                out.append(self._call(self.client.open_partial, path))
            except OSError:
                break
        return out, sealed

    def wait_layer(self, chunk: Chunk, layer: int, timeout_s: float) -> None:
        """Returns once part ``layer`` of ``chunk`` is final. Raises
        TimeoutError, or OSError(ECONNABORTED) if its writer gave up or died:
        the bytes of that part must then not be used."""
        chunk.wait_part(layer, timeout_s)

    def read(self, ops: Sequence[CopyOp]) -> List[Optional[OSError]]:
        """Copies chunk bytes into the buffers: one library call for the
        byte buffers, torch copies for tensor views (strided or on a device)."""
        return _split(ops, self.client.read_into_batch, into_chunk=False)

    def create(self, paths: Sequence[str], sizes: Sequence[int],
               parents: Sequence[Optional[str]], parts: int) -> List[Union[Chunk, OSError]]:
        """Reserves the chunks in one round trip, each in ``parts`` parts."""
        if not paths:
            return []
        return self._call(self.client.create_batch, paths, sizes, parents=parents, parts=parts)

    def write(self, ops: Sequence[CopyOp]) -> List[Optional[OSError]]:
        """Copies the buffers into writable chunks: one library call for the
        byte buffers, torch copies for tensor views."""
        return _split(ops, self.client.write_from_batch, into_chunk=True)

    def write_async(self, ops: Sequence[CopyOp]) -> "Future[List[Optional[OSError]]]":
        """:meth:`write`, submitted: the copies run while the caller goes on;
        the buffers must stay unchanged until the future is done. Tensor
        views are copied before it returns."""
        if ops and not any(is_tensor(op[1]) for op in ops):
            return self.client.write_from_batch_async(ops)
        return _done(self.write(ops))

    def publish(self, chunk: Chunk, layer: int) -> None:
        """Makes parts [0, layer] of ``chunk`` readable to waiting readers."""
        chunk.publish_part(layer)

    def hint(self, paths: Sequence[str], hint: Hint) -> int:
        """Gives ``paths`` a retention hint; how many the server accepted
        (chunks evicted, never stored or still being written are not)."""
        return self._call(self.client.hint_all, paths, hint)

    def seal(self, chunks: Sequence[Chunk]) -> List[Optional[OSError]]:
        """Seals the chunks in one round trip (publishing what is left)."""
        return self.client.seal_batch(chunks) if chunks else []

    def release(self, chunks: Sequence[Chunk]) -> None:
        """Releases the chunks together (abandoning those not sealed)."""
        self.client.release_batch(chunks)


def _done(result: Any) -> Future:
    future: Future = Future()
    future.set_result(result)
    return future


def is_tensor(buf: Any) -> bool:
    """True for a torch tensor (a strided view, or memory the library cannot
    reach): copied with torch, not by the library's batch calls."""
    return hasattr(buf, "data_ptr") and hasattr(buf, "element_size")


def _split(ops: Sequence[CopyOp], batch: Any, into_chunk: bool) -> List[Optional[OSError]]:
    if not ops:
        return []
    tensors = [i for i, op in enumerate(ops) if is_tensor(op[1])]
    if not tensors:
        return batch(ops)
    out: List[Optional[OSError]] = [None] * len(ops)
    plain = [i for i, op in enumerate(ops) if not is_tensor(op[1])]
    for i, err in zip(plain, batch([ops[i] for i in plain]) if plain else []):
        out[i] = err
    for i, err in zip(tensors, copy_tensors([ops[i] for i in tensors], into_chunk)):
        out[i] = err
    return out


def copy_tensors(ops: Sequence[CopyOp], into_chunk: bool) -> List[Optional[OSError]]:
    """The copies of a batch between chunks and tensors of any dtype, shape,
    strides and device, through tensor views of the chunks
    (``Chunk.torch()``): the chunk's bytes at the offset are seen as a
    C-ordered tensor of the buffer's dtype and shape. For caches the
    library's batch calls cannot reach (a GPU's: untested on one here) and
    blocks that are not one run (HND)."""
    views: Dict[int, Any] = {}
    errors: List[Optional[OSError]] = []
    for chunk, buf, off in ops:
        try:
            view = views.get(id(chunk))
            if view is None:
                view = views[id(chunk)] = chunk.torch()
            nbytes = buf.numel() * buf.element_size()
            seg = view[off:off + nbytes].view(buf.dtype).view(buf.shape)
            if into_chunk:
                seg.copy_(buf)
            else:
                buf.copy_(seg)
            errors.append(None)
        except (OSError, ValueError, RuntimeError) as e:
            errors.append(e if isinstance(e, OSError) else OSError(errno.EIO, str(e)))
    return errors


def make_store(client: Client, retry_after_s: float = 5.0) -> ChunkStore:
    """The connector's store over ``client``."""
    return ChunkStore(client, retry_after_s)
