"""maru.Client: the Pythonic API, one method per call of maru_direct.h."""

from __future__ import annotations

import enum
import errno
from concurrent.futures import Future
from typing import Any, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _maru
from .chunk import Chunk
from .completion import completions

_CHECKSUMS = {None: _maru.CHECKSUM_NONE, "xxh3": _maru.CHECKSUM_XXH3,
              "crc32c": _maru.CHECKSUM_CRC32C}


class PoolInfo(NamedTuple):
    """Capacity and usage of the pool (``maru_pool_info``)."""

    total: int  #: allocatable bytes
    free: int  #: bytes free now
    unit: int  #: allocation unit: chunks take whole units
    files: int  #: files and directories


class Region(NamedTuple):
    """One pool mapping of this process (``maru_pool_regions``)."""

    base: int  #: address of the mapping
    length: int  #: bytes
    device: int  #: the pool device's index


def errno_error(rc: int, path: Optional[str] = None) -> OSError:
    """The OSError for a negative errno: OSError picks the subclass
    (FileNotFoundError for ENOENT, FileExistsError for EEXIST, ...)."""
    err = -rc if rc < 0 else rc
    if path is None:
        return OSError(err, _maru.strerror(err))
    return OSError(err, _maru.strerror(err), path)


class Hint(enum.IntEnum):
    """Retention hints (``MARU_HINT_*``): what a client expects of a chunk's reads."""

    NONE = _maru.HINT_NONE  #: forget an earlier hint
    KEEP = _maru.HINT_KEEP  #: a reader is expected (its conversation is open)
    DROP = _maru.HINT_DROP  #: none is expected (its conversation ended)


def _hint_value(hint: Union[Hint, int]) -> int:
    """The hint as the C call takes it; OSError(EINVAL) for anything else."""
    if isinstance(hint, bool) or not isinstance(hint, int) or hint not in set(Hint):
        raise OSError(errno.EINVAL, f"not a retention hint: {hint!r} (maru.Hint)")
    return int(hint)


def _errors(results: Sequence[int], paths: Sequence[str]) -> List[Optional[OSError]]:
    return [errno_error(rc, p) if rc else None for rc, p in zip(results, paths)]


#: One op of a scatter/gather batch: (chunk, buffer, chunk offset).
BatchOp = Tuple[Chunk, Any, int]


def _handle_ops(ops: Sequence[BatchOp]) -> list:
    return [(chunk._live(), buf, offset) for chunk, buf, offset in ops]


def _op_errors(results: Sequence[int]) -> List[Optional[OSError]]:
    return [errno_error(rc) if rc else None for rc in results]


def _create_flags(contiguous: bool) -> int:
    return _maru.CREATE_CONTIGUOUS if contiguous else 0


class Client:
    """A connection to maru-server and the pool behind it.

    ``server`` is ``"unix:///path"`` or ``"tcp://host:port"`` (None:
    ``$MARU_SERVER``, else ``unix:///run/maru/maru.sock``); ``instance`` names
    this client in ``maructl sessions``, marutop and /metrics.

    Every method releases the GIL while it waits for the library, and raises
    ``OSError`` carrying the errno (``FileNotFoundError``, ``FileExistsError``,
    ``PermissionError``, ``OSError(ENOSPC)``...) on failure. Batch methods
    take at most ``maru.BATCH_MAX`` requests (more: ``OSError(E2BIG)``).

    A client may be shared by threads. It does not survive ``fork()``: in a
    child forked after the connection was made every call raises
    :class:`maru.ForkError` (use multiprocessing "spawn", or fork+exec).

    :meth:`close` (or leaving a ``with`` block) ends the client; the session
    with the server ends once the last chunk and view of it are gone too,
    so that no view ever points into an unmapped pool.
    """

    def __init__(self, server: Optional[str] = None, *, instance: Optional[str] = None) -> None:
        self._conn = _maru.Connection(server, instance)

    # --- lifetime -------------------------------------------------------

    def close(self) -> None:
        """Closes the client (idempotent); see the class notes."""
        self._conn.close()

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._conn.closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- storing --------------------------------------------------------

    def create(self, path: str, size: int, *, parent: Optional[str] = None,
               contiguous: bool = False, checksum: Optional[str] = None,
               mode: int = 0, parts: int = 0) -> Chunk:
        """``maru_create_ex``: reserves ``size`` bytes for a new chunk at ``path``.

        Write into it (:meth:`Chunk.write`, or a view), then :meth:`Chunk.seal`.
        ``parent``: the chunk this one extends (a prefix chain);
        ``contiguous``: one extent, inside a :meth:`pool_regions` mapping;
        ``checksum``: None, "xxh3" or "crc32c", computed at seal; ``mode``:
        permission bits (0: 0644); ``parts``: layer-wise, the chunk is
        published in this many equal parts (:meth:`Chunk.publish_part`; 0 or
        1: one; ``size % parts`` must be 0). FileExistsError if ``path``
        exists or is being written.
        """
        handle = self._conn.create(path, size, parent, mode, _CHECKSUMS[checksum],
                                  _create_flags(contiguous), parts)
        return Chunk(handle, path)

    def alloc(self, size: int, *, contiguous: bool = False, checksum: Optional[str] = None,
              mode: int = 0) -> Chunk:
        """``maru_alloc``: reserves ``size`` bytes under no name; :meth:`Chunk.publish` names it."""
        handle = self._conn.alloc(size, mode, _CHECKSUMS[checksum], _create_flags(contiguous))
        return Chunk(handle)

    def put(self, path: str, data: object, **create_options: object) -> None:
        """Stores a bytes-like object at ``path``: create, copy (GIL released), seal."""
        size = memoryview(data).nbytes  # type: ignore[arg-type]
        with self.create(path, size, **create_options) as chunk:  # type: ignore[arg-type]
            chunk.write(data)
            chunk.seal()

    def create_batch(self, paths: Sequence[str], sizes: Sequence[int], *,
                     parents: Optional[Sequence[Optional[str]]] = None,
                     contiguous: bool = False, checksum: Optional[str] = None,
                     mode: int = 0, parts: int = 0) -> List[Union[Chunk, OSError]]:
        """``maru_create_batch``: :meth:`create` of many chunks in one round trip.

        Returns a Chunk, or the OSError of that chunk, per path.
        """
        paths = list(paths)
        results = self._conn.create_batch(paths, list(sizes), list(parents or []), mode,
                                          _CHECKSUMS[checksum], _create_flags(contiguous),
                                          parts)
        return [Chunk(handle, p) if handle is not None else errno_error(rc, p)
                for (handle, rc), p in zip(results, paths)]

    def seal_batch(self, chunks: Sequence[Chunk]) -> List[Optional[OSError]]:
        """``maru_seal_batch``: seals chunks of this client in one round trip.

        Returns None, or the OSError of that chunk, per chunk.
        """
        chunks = list(chunks)
        results = _maru.seal_batch([c._live() for c in chunks])
        return [errno_error(rc, c.path) if rc else None for rc, c in zip(results, chunks)]

    # --- loading --------------------------------------------------------

    def open(self, path: str) -> Chunk:
        """``maru_open``: a sealed chunk, read-only, with a lease.

        FileNotFoundError if missing; ``OSError(EBUSY)`` while being written.
        """
        return Chunk(self._conn.open(path), path)

    def open_partial(self, path: str) -> Chunk:
        """``maru_open_partial``: a read-only chunk that is sealed or still being
        written in parts; :meth:`Chunk.wait_part` before reading a part.

        FileNotFoundError if neither; PermissionError as for :meth:`open`.
        """
        return Chunk(self._conn.open_partial(path), path)

    # --- scatter/gather copies -------------------------------------------

    def read_into_batch(self, ops: Sequence[BatchOp]) -> List[Optional[OSError]]:
        """``maru_read_into_batch``: copies chunk bytes into the caller's buffers.

        ``ops``: ``(chunk, dst, chunk_offset)`` each; ``dst`` is any writable
        contiguous buffer (numpy array, CPU torch tensor, memoryview,
        bytearray) and ``len(dst)`` bytes (its size in bytes) are copied
        from ``chunk_offset``. One C call, GIL released. Returns None or the
        OSError per op.
        """
        return _op_errors(_maru.read_into_batch(_handle_ops(ops)))

    def write_from_batch(self, ops: Sequence[BatchOp]) -> List[Optional[OSError]]:
        """``maru_write_from_batch``: copies the caller's buffers into writable chunks.

        ``ops``: ``(chunk, src, chunk_offset)`` each, ``src`` any contiguous
        buffer. One C call, GIL released. Returns None or the OSError per op.
        """
        return _op_errors(_maru.write_from_batch(_handle_ops(ops)))

    def read_into_batch_async(self, ops: Sequence[BatchOp]) -> "Future[List[Optional[OSError]]]":
        """:meth:`read_into_batch` in the background (``maru_read_into_batch_async``).

        Returns a :class:`concurrent.futures.Future` whose result is the
        list :meth:`read_into_batch` returns. The future holds the buffers
        and chunks until the batch is done; do not release or write the
        chunks, or use the destination buffers, before then.
        """
        batch = _maru.BatchFuture(_handle_ops(ops), True)
        return completions().watch(batch, _op_errors)

    def write_from_batch_async(self, ops: Sequence[BatchOp]) -> "Future[List[Optional[OSError]]]":
        """:meth:`write_from_batch` in the background (``maru_write_from_batch_async``);
        see :meth:`read_into_batch_async`."""
        batch = _maru.BatchFuture(_handle_ops(ops), False)
        return completions().watch(batch, _op_errors)

    def lookup_prefix(self, paths: Sequence[str]) -> List[Chunk]:
        """``maru_lookup_prefix``: opens the longest existing prefix of ``paths``
        in one round trip (stops at the first missing or unreadable path)."""
        paths = list(paths)
        return [Chunk(handle, p) for handle, p in zip(self._conn.lookup_prefix(paths), paths)]

    def lookup_views(self, paths: Sequence[str]) -> "_maru.Prefix":
        """:meth:`lookup_prefix` as one object, for prefixes of many keys.

        Returns a :class:`maru.Prefix` of the longest existing prefix of
        ``paths`` (a sequence of str): ``len(p)`` chunks, leased. Nothing is
        made per chunk until asked for: ``p[i]`` is a read-only memoryview
        of chunk ``i`` (it keeps that chunk's lease while it lives),
        ``p.sizes`` their sizes, ``p.read_into_batch(ops)`` copies
        ``(index, buffer, chunk_offset)`` ops in one library call (0 or a
        negative errno per op), ``p.lease_check()`` says how many chunks,
        from the first, certainly held their leases since the lookup, and
        ``p.release()`` (or leaving ``with p:``) gives every handle back in
        one call. A 128-key lookup and release costs about 1.2x the C calls,
        where :meth:`lookup_prefix` and :meth:`release_batch` cost 5-6x.
        """
        return self._conn.lookup_views(paths)

    def count_prefix(self, paths: Sequence[str]) -> int:
        """``maru_count_prefix``: how many of ``paths``, from the start, exist
        (one round trip, no lease taken)."""
        return self._conn.count_prefix(paths)

    def release_batch(self, chunks: Iterable[Chunk]) -> None:
        """``maru_release_batch``: :meth:`Chunk.release` of each chunk (of this
        client or another), with the handles that this frees released in one
        call of the library, GIL released, instead of one call each: what a
        :meth:`lookup_prefix` answer should go back with. A chunk that a view
        (memoryview, array, tensor) still holds keeps its lease until the
        view is gone, as with :meth:`Chunk.release`.
        """
        with _maru.ReleaseBatch():
            for chunk in chunks:
                chunk.release()

    # --- namespace and lifecycle ---------------------------------------

    def unlink(self, path: str) -> None:
        """``maru_unlink``: removes a chunk; holders keep reading their bytes."""
        self._conn.unlink(path)

    def pin(self, path: str, ttl_ms: int = 0) -> None:
        """``maru_pin`` / ``maru_pin_ttl``: pins against eviction (``ttl_ms`` 0: until unpinned)."""
        self._conn.pin(path, ttl_ms)

    def unpin(self, path: str) -> None:
        """``maru_unpin``."""
        self._conn.unpin(path)

    def pin_batch(self, paths: Sequence[str], ttl_ms: int = 0) -> List[Optional[OSError]]:
        """``maru_pin_batch``: None or the OSError per path, one round trip."""
        paths = list(paths)
        return _errors(self._conn.pin_batch(paths, ttl_ms), paths)

    def unpin_batch(self, paths: Sequence[str]) -> List[Optional[OSError]]:
        """``maru_unpin_batch``: None or the OSError per path, one round trip."""
        paths = list(paths)
        return _errors(self._conn.unpin_batch(paths), paths)

    def unlink_batch(self, paths: Sequence[str]) -> List[Optional[OSError]]:
        """``maru_unlink_batch``: None or the OSError per path, one round trip."""
        paths = list(paths)
        return _errors(self._conn.unlink_batch(paths), paths)

    def hint(self, path: str, hint: Union[Hint, int]) -> None:
        """``maru_hint``: tells eviction what to expect of the chunk's reads.

        :attr:`Hint.KEEP` while the conversation it belongs to is open,
        :attr:`Hint.DROP` once it ended, :attr:`Hint.NONE` to forget. A hint
        only reorders eviction (the default policy, ``frequency``; ``lru``
        and ``prefix`` ignore hints); it never pins, and the policy refuses
        a drop on a chunk another chain in use extends. OSError: EINVAL (not
        a hint), ENOENT, EISDIR, EACCES (only the owner, root or a writer may
        hint), EBUSY (not sealed).
        """
        err = self.hint_batch([path], hint)[0]
        if err is not None:
            raise err

    def hint_batch(self, paths: Sequence[str], hint: Union[Hint, int]) -> List[Optional[OSError]]:
        """``maru_hint_batch``: one hint on many chunks (a conversation's chain),
        one round trip; None or the OSError per path. A bad hint raises."""
        paths = list(paths)
        return _errors(self._conn.hint_batch(paths, _hint_value(hint)), paths)

    def hint_all(self, paths: Sequence[str], hint: Union[Hint, int]) -> int:
        """:meth:`hint_batch` on any number of chunks (a chain, prefix
        first), one round trip per ``maru.BATCH_MAX``, the tail's batch
        first as the server takes a batch (so a drop goes from the tail up
        to a shared prefix): how many the server accepted (chunks missing,
        being written or named twice in a batch are not; an accepted drop
        may still be refused by the policy, see ``maru_hint``). OSError:
        EINVAL (not a hint), or what the connection raises (a lost server),
        before or between batches."""
        value, paths = _hint_value(hint), list(paths)
        taken = 0
        for start in reversed(range(0, len(paths), _maru.BATCH_MAX)):
            taken += self._conn.hint_batch(paths[start:start + _maru.BATCH_MAX], value).count(0)
        return taken

    def pool_info(self) -> PoolInfo:
        """``maru_pool_info``: capacity and usage of the pool."""
        return PoolInfo(**self._conn.pool_info())

    def pool_regions(self) -> List[Region]:
        """``maru_pool_regions``: this process's pool mappings (for cudaHostRegister);
        empty on a host that reaches the pool through maru-agent."""
        return [Region(*r) for r in self._conn.pool_regions()]
