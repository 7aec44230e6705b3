"""The original Maru's Python API (MaruConfig, MaruHandler) over libmaru_direct.

Code written for the original Maru runs unchanged::

    from maru import MaruConfig, MaruHandler

    with MaruHandler(MaruConfig(server_url="unix:///run/maru/maru.sock")) as h:
        handle = h.alloc(size=len(data))
        handle.buf[:] = data
        h.store(key=12345, handle=handle)
        info = h.retrieve(12345)      # info.view: a memoryview INTO the pool

Keys (int, str or bytes) are chunks at ``/<namespace>/<key>``
(:func:`maru.key_to_path`). Each batch method is one call of the C library,
hence one round trip; see docs/python.md for where the semantics differ
from the original (prefix-stopping batch_exists and batch_retrieve).
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import uuid
from typing import Any, Dict, List, Optional, Sequence, Union

from .chunk import Chunk
from .client import Client
from .keys import Key, check_namespace, key_to_path

logger = logging.getLogger(__name__)

_ABSENT = (FileNotFoundError,)


@dataclasses.dataclass
class MaruConfig:
    """Client configuration, field for field the original's.

    Used here: ``server_url`` (``"unix:///path"`` or ``"tcp://host:port"``;
    None: ``$MARU_SERVER``, else ``unix:///run/maru/maru.sock``),
    ``instance_id`` (this client's name in ``maructl sessions``; None: a
    generated one), ``auto_connect`` (connect on ``__enter__``), and two of
    ours: ``namespace`` (the directory keys live in) and ``contiguous``
    (allocate every chunk as one extent, see ``maru.Client.create``).

    Accepted and ignored, because the pool has no per-client regions or
    pages and the C library has its own transport: ``pool_size``,
    ``chunk_size_bytes`` (any chunk size works), ``timeout_ms`` (set
    ``MARU_TIMEOUT_MS`` instead), ``use_async_rpc``, ``max_inflight``,
    ``eager_map``, ``pool_id``.
    """

    server_url: Optional[str] = None
    instance_id: Optional[str] = None
    pool_size: int = 104_857_600
    chunk_size_bytes: int = 1_048_576
    auto_connect: bool = True
    timeout_ms: int = 2000
    use_async_rpc: bool = True
    max_inflight: int = 64
    eager_map: bool = True
    pool_id: Optional[int] = None
    namespace: str = "kv"
    contiguous: bool = False

    def __post_init__(self) -> None:
        if self.instance_id is None:
            self.instance_id = f"maru-py-{uuid.uuid4().hex[:12]}"
        check_namespace(self.namespace)


class AllocHandle:
    """Space from :meth:`MaruHandler.alloc`: write into ``buf``, then
    :meth:`MaruHandler.store` it under a key.

    ``buf`` is a writable memoryview into the pool. Do not write into it
    after ``store``: the chunk is then published and immutable. If the key
    already existed, or after ``free``, ``buf`` is released (using it raises
    ValueError): its space was given back.
    """

    __slots__ = ("_chunk", "buf")

    def __init__(self, chunk: Chunk) -> None:
        self._chunk = chunk
        self.buf: memoryview = chunk.memoryview()

    @property
    def size(self) -> int:
        """Bytes allocated."""
        return self.buf.nbytes

    @property
    def chunk(self) -> Chunk:
        """The underlying :class:`maru.Chunk`."""
        return self._chunk

    def _drop(self) -> None:
        # Release `buf` too, so that a write after free() raises instead of
        # landing in space the pool hands out again; views made from it
        # (a numpy array of it, say) keep the lease until they go.
        try:
            self.buf.release()
        except BufferError:
            pass
        self._chunk.release()


@dataclasses.dataclass
class MemoryInfo:
    """A retrieved value: ``view`` is a read-only memoryview INTO the pool.

    The view holds the chunk's lease: its bytes stay valid, whatever happens
    to the key, until the view (and every view made from it) is gone.
    """

    view: memoryview

    @property
    def size(self) -> int:
        """Bytes in the value."""
        return self.view.nbytes


Data = Union[MemoryInfo, memoryview, bytes, bytearray]


def _as_bytes_view(data: Data) -> memoryview:
    view = data.view if isinstance(data, MemoryInfo) else memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


class MaruHandler:
    """The original Maru's handler, on libmaru_direct.

    Thread-safe: methods may be called from any thread; every call releases
    the GIL while it waits for the server. Errors other than "not there"
    raise ``OSError`` with the errno (``FileExistsError``,
    ``PermissionError``, ``OSError(ENOSPC)``...), where the original
    returned False or raised ValueError. Not usable in a child forked after
    :meth:`connect` (:class:`maru.ForkError`).
    """

    def __init__(self, config: Optional[MaruConfig] = None) -> None:
        self._config = config or MaruConfig()
        self._namespace = check_namespace(self._config.namespace)
        self._client: Optional[Client] = None

    # --- connection -----------------------------------------------------

    def connect(self) -> bool:
        """Connects to the server and maps the pool. Returns True (also when
        already connected); raises OSError if the server cannot be reached."""
        if self._client is None:
            self._client = Client(self._config.server_url, instance=self._config.instance_id)
            logger.debug("connected to %s as %s", self._config.server_url,
                         self._config.instance_id)
        return True

    def close(self) -> None:
        """Closes the connection (idempotent). Memoryviews already handed out
        stay valid: the session ends once the last of them is gone."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> "MaruHandler":
        if self._config.auto_connect:
            self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        """True between connect() and close()."""
        return self._client is not None

    @property
    def instance_id(self) -> Optional[str]:
        """This client's name."""
        return self._config.instance_id

    @property
    def client(self) -> Client:
        """The :class:`maru.Client` underneath (connected)."""
        return self._live()

    def _live(self) -> Client:
        if self._client is None:
            raise RuntimeError("Not connected. Call connect() first.")
        return self._client

    def _path(self, key: Key) -> str:
        return key_to_path(key, self._namespace)

    # --- storing --------------------------------------------------------

    def alloc(self, size: int) -> AllocHandle:
        """``maru_alloc``: reserves ``size`` bytes under no key yet.

        Write into ``handle.buf``, then :meth:`store` it (or :meth:`free`).
        Raises ``OSError(ENOSPC)`` when the pool is full and nothing can be
        evicted.
        """
        chunk = self._live().alloc(size, contiguous=self._config.contiguous)
        return AllocHandle(chunk)

    def free(self, handle: AllocHandle) -> None:
        """Gives back a handle from :meth:`alloc`: abandons it if not stored,
        else drops its lease. Does not delete a stored key (use delete).

        ``handle.buf`` is released with it (using it raises ValueError); the
        space goes back once no other view made from it is left.
        """
        handle._drop()

    def store(self, key: Key, info: Union[AllocHandle, Data, None] = None,
              prefix: Optional[bytes] = None, *, data: Optional[Data] = None,
              handle: Optional[AllocHandle] = None) -> bool:
        """Stores a value under ``key``; True when the key holds it.

        With an :class:`AllocHandle` (``store(key, handle)`` or
        ``handle=``), ``maru_publish`` names the written space, one round
        trip. With data (``info``/``data``: MemoryInfo, memoryview, bytes;
        optional ``prefix`` bytes first), it is copied (GIL released) into a
        new chunk. First writer wins: a key that exists already returns True
        and keeps its value (the same key means the same content), and a
        handle's space is given back.
        """
        if isinstance(info, AllocHandle):
            handle, info = info, None
        if handle is not None:
            if info is not None or data is not None:
                raise ValueError("Cannot specify both handle and data/info")
            return self._publish(key, handle)
        src = data if data is not None else info
        if src is None:
            raise TypeError("Must provide handle, data or info")
        return self._put(key, _as_bytes_view(src), prefix)

    def _publish(self, key: Key, handle: AllocHandle) -> bool:
        try:
            handle._chunk.publish(self._path(key))
        except FileExistsError:
            handle._drop()  # the library freed its space
        return True

    def _put(self, key: Key, src: memoryview, prefix: Optional[bytes]) -> bool:
        head = prefix or b""
        try:
            chunk = self._live().create(self._path(key), len(head) + src.nbytes,
                                        contiguous=self._config.contiguous)
        except FileExistsError:
            return True
        with chunk:
            chunk.write(head)
            chunk.write(src, len(head))
            chunk.seal()
        return True

    def batch_store(self, keys: Sequence[Key], infos: Sequence[Union[AllocHandle, Data]],
                    prefixes: Optional[Sequence[Optional[bytes]]] = None) -> List[bool]:
        """Stores many values; True per key that holds its value.

        With data (MemoryInfo, memoryview, bytes; optional per-key
        ``prefixes``): ``maru_create_batch``, the copies (GIL released), then
        ``maru_seal_batch``: two round trips in all.

        With AllocHandles: maru_direct.h has no batched publish, so this is
        one ``maru_publish`` round trip per handle. Prefer the data form (or
        ``maru.Client.create_batch``) where the round trips matter.
        """
        keys, infos = list(keys), list(infos)
        if len(keys) != len(infos):
            raise ValueError("keys and infos must have the same length")
        if prefixes is not None and len(prefixes) != len(keys):
            raise ValueError("prefixes must have the same length as keys")
        if infos and all(isinstance(i, AllocHandle) for i in infos):
            return [self._publish(k, h) for k, h in zip(keys, infos)]  # type: ignore[arg-type]
        if any(isinstance(i, AllocHandle) for i in infos):
            raise TypeError("batch_store takes all AllocHandles or all data")
        return self._store_data_batch(keys, [_as_bytes_view(i) for i in infos],  # type: ignore
                                      [p or b"" for p in (prefixes or [None] * len(keys))])

    def _store_data_batch(self, keys: List[Key], views: List[memoryview],
                          heads: List[bytes]) -> List[bool]:
        client = self._live()
        created = client.create_batch([self._path(k) for k in keys],
                                      [len(h) + v.nbytes for h, v in zip(heads, views)],
                                      contiguous=self._config.contiguous)
        results = [isinstance(c, FileExistsError) for c in created]
        chunks = [(i, c) for i, c in enumerate(created) if isinstance(c, Chunk)]
        try:
            for i, chunk in chunks:
                chunk.write(heads[i])
                chunk.write(views[i], len(heads[i]))
            sealed = client.seal_batch([c for _, c in chunks]) if chunks else []
            for (i, _), err in zip(chunks, sealed):
                results[i] = err is None
        finally:
            for _, chunk in chunks:
                chunk.release()
        return results

    # --- loading --------------------------------------------------------

    def retrieve(self, key: Key) -> Optional[MemoryInfo]:
        """``maru_open``: the value as a zero-copy MemoryInfo, or None if the
        key is not there (or still being written)."""
        try:
            chunk = self._live().open(self._path(key))
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.EBUSY:
                return None
            raise
        return MemoryInfo(view=chunk.memoryview())

    def batch_retrieve(self, keys: Sequence[Key]) -> List[Optional[MemoryInfo]]:
        """``maru_lookup_prefix``: zero-copy values of the longest prefix of
        ``keys`` that exists, one round trip. Stops at the first missing
        key: every entry after it is None (the original looked up each key)."""
        keys = list(keys)
        chunks = self._live().lookup_prefix([self._path(k) for k in keys])
        hits: List[Optional[MemoryInfo]] = [MemoryInfo(view=c.memoryview()) for c in chunks]
        return hits + [None] * (len(keys) - len(hits))

    def exists(self, key: Key) -> bool:
        """``maru_count_prefix`` of one key: True if it is stored (no lease taken)."""
        return self._live().count_prefix([self._path(key)]) == 1

    def batch_exists(self, keys: Sequence[Key]) -> List[bool]:
        """``maru_count_prefix``: one round trip, no lease. Prefix semantics:
        True for the keys before the first missing one, False from there on
        (the original checked each key; inference engines use the prefix)."""
        keys = list(keys)
        count = self._live().count_prefix([self._path(k) for k in keys])
        return [i < count for i in range(len(keys))]

    # --- lifecycle ------------------------------------------------------

    def delete(self, key: Key) -> bool:
        """``maru_unlink``: True if the key was deleted, False if it was not
        there. Readers holding it keep their bytes."""
        try:
            self._live().unlink(self._path(key))
        except _ABSENT:
            return False
        return True

    def pin(self, key: Key) -> bool:
        """``maru_pin``: protects the key from eviction; False if not there."""
        try:
            self._live().pin(self._path(key))
        except _ABSENT:
            return False
        return True

    def unpin(self, key: Key) -> bool:
        """``maru_unpin``: makes the key evictable again; False if not there."""
        try:
            self._live().unpin(self._path(key))
        except _ABSENT:
            return False
        return True

    def batch_pin(self, keys: Sequence[Key]) -> List[bool]:
        """``maru_pin_batch``: True per key that exists and was pinned, one round trip."""
        errors = self._live().pin_batch([self._path(k) for k in keys])
        return [e is None for e in errors]

    def batch_unpin(self, keys: Sequence[Key]) -> List[bool]:
        """``maru_unpin_batch``: True per key unpinned, one round trip."""
        errors = self._live().unpin_batch([self._path(k) for k in keys])
        return [e is None for e in errors]

    def batch_delete(self, keys: Sequence[Key]) -> List[bool]:
        """``maru_unlink_batch``: True per key deleted, one round trip (ours)."""
        errors = self._live().unlink_batch([self._path(k) for k in keys])
        return [e is None for e in errors]

    # --- health and statistics -----------------------------------------

    def healthcheck(self) -> bool:
        """True if connected and the server answers (``maru_pool_info``)."""
        if self._client is None:
            return False
        try:
            self._client.pool_info()
        except OSError as e:
            logger.warning("Healthcheck failed: %s", e)
            return False
        return True

    def get_stats(self) -> Dict[str, Any]:
        """Pool statistics (``maru_pool_info``) in the original's layout:
        ``kv_manager`` {total_entries, total_size}, ``allocation_manager``
        {total_allocated}, and ``pool`` {total, free, unit, files}.
        ``total_entries`` counts files and directories."""
        info = self._live().pool_info()
        used = info.total - info.free
        return {
            "kv_manager": {"total_entries": info.files, "total_size": used},
            "allocation_manager": {"total_allocated": used},
            "pool": info._asdict(),
        }
