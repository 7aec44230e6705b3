"""The original Maru's Python API (MaruConfig, MaruHandler) over libmaru_direct.

Code written for the original Maru (xcena-dev/maru at 4fd29cef) runs
unchanged::

    from maru import MaruConfig, MaruHandler

    with MaruHandler(MaruConfig(server_url="unix:///run/maru/maru.sock")) as h:
        handle = h.alloc(size=len(data))
        handle.buf[:] = data
        h.store(key="12345", handle=handle)
        info = h.retrieve("12345")   # info.view: a memoryview INTO the pool

Keys (int, str or bytes) are chunks at ``/<namespace>/<key>``
(:func:`maru.key_to_path`).

The original's region/page model, mapped onto chunks: a *region* is one
chunk this handler holds, of one page (page index 0), named by a region id
of this handler. :meth:`MaruHandler.alloc` makes an *owned* region (an
unnamed chunk, ``maru_alloc``); :meth:`MaruHandler.retrieve` and
:meth:`MaruHandler.batch_retrieve` make a *read* region per chunk read.
The handler keeps weak references to regions only: a region lives, and
:meth:`MaruHandler.get_buffer_view` answers for it, while anything (the
handle's ``buf``, a MemoryInfo's ``view``, a tensor made from either) still
holds the chunk's lease; once nothing does, the lease is released (an
unstored allocation is given back) and the region id answers None. Every
view handed out holds the lease, so no view ever points at memory the pool
could reuse. See docs/python.md for what maps how.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import logging
import os
import threading
import uuid
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Union

from . import _maru
from .chunk import Chunk
from .client import Client, Region
from .keys import Key, check_namespace, key_component

logger = logging.getLogger(__name__)

_ABSENT = (FileNotFoundError,)

#: errnos of "the pool (or a quota) has no room", which alloc() raises as AllocError.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _parse_env_bool(name: str) -> Optional[bool]:
    """The original's optional boolean environment variable: None if unset,
    ValueError for a value that is not a boolean."""
    raw = os.environ.get(name)
    if raw is None:
        return None
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"{name} must be one of: 1/0, true/false, yes/no, on/off (got {raw!r})")


@dataclasses.dataclass
class MaruConfig:
    """Client configuration: the original's fields, defaults, environment
    overrides and checks, in its order, then two of ours.

    Used as in the original: ``server_url`` (``"tcp://host:port"``,
    ``"unix:///path"``; None, ours: ``$MARU_SERVER``, else
    ``unix:///run/maru/maru.sock``), ``instance_id`` (this client's name in
    ``maructl sessions``; None: a UUID), ``chunk_size_bytes`` (the page
    size: :meth:`MaruHandler.alloc` refuses more, and
    :meth:`MaruHandler.get_chunk_size` returns it), ``auto_connect``
    (connect on ``__enter__``).

    Accepted, checked as in the original, and without effect here, because
    the pool is shared and nothing is reserved per client (quotas bound a
    client; the library has its own transport): ``pool_size``,
    ``auto_expand``, ``expand_size``, ``rm_address``, ``timeout_ms`` (set
    ``MARU_TIMEOUT_MS``), ``use_async_rpc``, ``max_inflight``,
    ``eager_map`` (the pool is mapped whole at connect; ``MARU_POPULATE``
    decides prefaulting), ``enable_stats`` (the server exports its own
    statistics). ``MARU_EAGER_MAP`` and ``MARU_STAT`` override
    ``eager_map`` and ``enable_stats`` as in the original.

    Ours: ``namespace`` (the directory keys live in) and ``contiguous``
    (allocate every chunk as one extent, see ``maru.Client.create``).
    """

    server_url: Optional[str] = "tcp://localhost:5555"
    instance_id: Optional[str] = None
    pool_size: int = 1024 * 1024 * 100
    chunk_size_bytes: int = 1024 * 1024
    auto_connect: bool = True
    timeout_ms: int = 2000
    use_async_rpc: bool = True
    max_inflight: int = 64
    eager_map: bool = True
    auto_expand: bool = True
    expand_size: Optional[int] = None
    rm_address: str = "127.0.0.1:9850"
    enable_stats: bool = False
    namespace: str = "kv"
    contiguous: bool = False

    def __post_init__(self) -> None:
        if self.instance_id is None:
            self.instance_id = str(uuid.uuid4())
        env_eager_map = _parse_env_bool("MARU_EAGER_MAP")
        if env_eager_map is not None:
            self.eager_map = env_eager_map
        env_stats = _parse_env_bool("MARU_STAT")
        if env_stats is not None:
            self.enable_stats = env_stats
        if self.chunk_size_bytes <= 0:
            raise ValueError(f"chunk_size_bytes must be positive, got {self.chunk_size_bytes}")
        if self.pool_size < self.chunk_size_bytes:
            raise ValueError(f"pool_size ({self.pool_size}) must be >= "
                             f"chunk_size_bytes ({self.chunk_size_bytes})")
        if self.expand_size is not None:
            if not self.auto_expand:
                raise ValueError("expand_size requires auto_expand=True")
            if self.expand_size < self.chunk_size_bytes:
                raise ValueError(f"expand_size ({self.expand_size}) must be >= "
                                 f"chunk_size_bytes ({self.chunk_size_bytes})")
        check_namespace(self.namespace)


class AllocError(OSError, ValueError):
    """:meth:`MaruHandler.alloc` found no room (``errno`` ENOSPC, EDQUOT or
    EFBIG): an OSError carrying the errno, and a ValueError, which is what
    the original raised ("pool exhausted") and what code written for it
    catches."""


@dataclasses.dataclass(eq=False)
class AllocHandle:
    """Space from :meth:`MaruHandler.alloc`: write into ``buf``, then
    :meth:`MaruHandler.store` it under a key. The original's dataclass,
    field for field (a handle made from a region id, as LMCache's adapter
    makes one, works with :meth:`MaruHandler.store` and
    :meth:`MaruHandler.free` too).

    ``buf`` is a writable memoryview into the pool that holds the chunk's
    reservation. Do not write into it after ``store``: the chunk is then
    published and immutable. If the key already existed, or after
    ``free``, ``buf`` is released (using it raises ValueError).
    """

    buf: memoryview
    _region_id: int
    _page_index: int
    _size: int

    @property
    def region_id(self) -> int:
        """Region of the allocated page (one chunk)."""
        return self._region_id

    @property
    def page_index(self) -> int:
        """Page in the region: 0 (a region is one page)."""
        return self._page_index

    @property
    def size(self) -> int:
        """Requested bytes."""
        return self._size


@dataclasses.dataclass
class MemoryInfo:
    """A retrieved value: ``view`` is a read-only memoryview INTO the pool,
    ``region_id``/``page_index`` name it for
    :meth:`MaruHandler.get_buffer_view` (the original's dataclass).

    The view holds the chunk's lease: its bytes stay valid, whatever
    happens to the key, until the view (and every view made from it) is
    gone.
    """

    view: memoryview
    region_id: int = 0
    page_index: int = 0

    @property
    def size(self) -> int:
        """Bytes in the value."""
        return self.view.nbytes


class RegionInfo(NamedTuple):
    """One region of a handler (:meth:`RegionTable.get_region`)."""

    region_id: int
    size: int  #: bytes of the chunk (the region's one page)
    owned: bool  #: made by alloc() (else by a read)
    writable: bool  #: not yet stored


class RegionTable:
    """A handler's regions, by id, held by weak reference to the chunk's
    handle (``maru._maru.ChunkHandle``, which holds the lease): an entry goes
    when the last view of the chunk does. What the original's DaxMapper and
    OwnedRegionManager answer (``MaruHandler.mapper`` /
    ``.owned_region_manager``)."""

    def __init__(self, chunk_size: int) -> None:
        self._chunk_size = chunk_size
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._owned: "weakref.WeakValueDictionary[int, _maru.ChunkHandle]" = \
            weakref.WeakValueDictionary()
        self._read: "weakref.WeakValueDictionary[int, _maru.ChunkHandle]" = \
            weakref.WeakValueDictionary()

    def add(self, handle: _maru.ChunkHandle, owned: bool) -> int:
        """Registers a chunk's handle; returns its new region id."""
        with self._lock:
            rid = next(self._ids)
            (self._owned if owned else self._read)[rid] = handle
        return rid

    def handle(self, region_id: int) -> Optional[_maru.ChunkHandle]:
        """The chunk handle of a live region, or None."""
        with self._lock:
            handle = self._owned.get(region_id)
            return handle if handle is not None else self._read.get(region_id)

    def owned_handle(self, region_id: int) -> Optional[_maru.ChunkHandle]:
        """The chunk handle of a live owned region, or None."""
        with self._lock:
            return self._owned.get(region_id)

    def drop(self, region_id: int) -> None:
        """Forgets a region (its lease goes with its last view)."""
        with self._lock:
            self._owned.pop(region_id, None)
            self._read.pop(region_id, None)

    def clear(self) -> None:
        """Forgets every region."""
        with self._lock:
            self._owned.clear()
            self._read.clear()

    def get_region(self, region_id: int) -> Optional[RegionInfo]:
        """The region, or None if it is gone (or never was)."""
        with self._lock:
            owned = region_id in self._owned
            handle = self._owned.get(region_id) if owned else self._read.get(region_id)
            if handle is None:
                return None
            return RegionInfo(region_id, handle.size, owned, handle.writable)

    def get_buffer_view(self, region_id: int, offset: int, size: int) -> Optional[memoryview]:
        """A view of ``[offset, offset+size)`` of the region's chunk that
        holds its lease; None if the region is gone or the range passes
        the chunk's end (no view ever reaches past a chunk)."""
        handle = self.handle(region_id)
        if handle is None or offset < 0 or size < 0 or offset + size > handle.size:
            return None
        return memoryview(handle)[offset:offset + size]

    def get_region_ids(self) -> List[int]:
        """Owned regions alive, oldest first (the original's OwnedRegionManager)."""
        with self._lock:
            return sorted(self._owned.keys())

    def get_read_region_ids(self) -> List[int]:
        """Read regions alive, oldest first."""
        with self._lock:
            return sorted(self._read.keys())

    def is_owned(self, region_id: int) -> bool:
        """True if the region was made by alloc() and is alive."""
        with self._lock:
            return region_id in self._owned

    def get_owned_region(self, region_id: int) -> Optional[RegionInfo]:
        """The owned region, or None."""
        info = self.get_region(region_id)
        return info if info is not None and info.owned else None

    def get_first_region_id(self) -> Optional[int]:
        """The oldest owned region alive, or None."""
        ids = self.get_region_ids()
        return ids[0] if ids else None

    def get_chunk_size(self) -> int:
        """The configured page size (``chunk_size_bytes``)."""
        return self._chunk_size

    def get_stats(self) -> Dict[str, Any]:
        """Owned regions in the original's ``store_regions`` layout (a region
        is one page: page counts are region counts)."""
        regions = [r for r in (self.get_owned_region(i) for i in self.get_region_ids()) if r]
        allocated = sum(1 for r in regions if r.writable)
        return {
            "num_regions": len(regions),
            "total_pool_size": sum(r.size for r in regions),
            "total_page_count": len(regions),
            "total_free_pages": 0,
            "total_allocated_pages": len(regions),
            "utilization": 1.0 if regions else 0.0,
            "unstored_pages": allocated,
            "regions": [{"region_id": r.region_id, "pool_size": r.size,
                         "chunk_size": r.size, "page_count": 1, "free_pages": 0,
                         "allocated_pages": 1, "utilization": 1.0} for r in regions],
        }


Data = Union[MemoryInfo, memoryview, bytes, bytearray]


def _as_bytes_view(data: Data) -> memoryview:
    view = data.view if isinstance(data, MemoryInfo) else memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _release_view(view: memoryview) -> None:
    # A write after the space went back must raise, not land in space the
    # pool hands out again; views made from it keep the lease until they go.
    try:
        view.release()
    except BufferError:
        pass


def _slices(n: int) -> range:
    return range(0, n, _maru.BATCH_MAX)


class MaruHandler:
    """The original Maru's handler, on libmaru_direct.

    Thread-safe: methods may be called from any thread; every call releases
    the GIL while it waits for the server. Errors other than "not there"
    raise ``OSError`` with the errno (``PermissionError``,
    ``OSError(ENAMETOOLONG)``...), where the original returned False;
    :meth:`alloc` without room raises :class:`AllocError` (an OSError and a
    ValueError). Calls before :meth:`connect` or after :meth:`close` raise
    RuntimeError, as in the original. Not usable in a child forked after
    :meth:`connect` (:class:`maru.ForkError`).
    """

    def __init__(self, config: Optional[MaruConfig] = None) -> None:
        self._config = config or MaruConfig()
        self._namespace = check_namespace(self._config.namespace)
        self._client: Optional[Client] = None
        self._regions: Optional[RegionTable] = None
        self._on_region_added: Optional[Callable[[int, int], None]] = None

    # --- connection -----------------------------------------------------

    def connect(self) -> bool:
        """Connects to the server and maps the pool. Returns True (also when
        already connected); raises OSError if the server cannot be reached
        (the original returned False)."""
        if self._client is None:
            self._client = Client(self._config.server_url, instance=self._config.instance_id)
            self._regions = RegionTable(self._config.chunk_size_bytes)
            logger.debug("connected to %s as %s", self._config.server_url,
                         self._config.instance_id)
        return True

    def close(self) -> None:
        """Closes the connection (idempotent). Views already handed out stay
        valid: the session ends once the last of them is gone; region ids
        answer nothing any more."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._regions is not None:
            self._regions.clear()
            self._regions = None

    def __enter__(self) -> "MaruHandler":
        if self._config.auto_connect:
            self.connect()
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        """True between connect() and close()."""
        return self._client is not None

    @property
    def instance_id(self) -> str:
        """This client's name."""
        return self._config.instance_id  # type: ignore[return-value]

    @property
    def client(self) -> Client:
        """The :class:`maru.Client` underneath (connected)."""
        return self._live()

    def _live(self) -> Client:
        if self._client is None:
            raise RuntimeError("Not connected. Call connect() first.")
        return self._client

    def _table(self) -> RegionTable:
        self._live()
        assert self._regions is not None
        return self._regions

    def _path(self, key: Key) -> str:
        # maru.key_to_path, with the namespace checked once
        return f"{self._namespace}/{key_component(key)}"

    # --- regions and pages ----------------------------------------------

    @property
    def mapper(self) -> Optional[RegionTable]:
        """The region table (the original's DaxMapper: ``get_buffer_view``,
        ``get_region``); None when not connected."""
        return self._regions

    @property
    def owned_region_manager(self) -> Optional[RegionTable]:
        """The region table (the original's OwnedRegionManager:
        ``get_region_ids``, ``is_owned``, ``get_owned_region``,
        ``get_chunk_size``, ``get_stats``); None when not connected."""
        return self._regions

    @property
    def allocator(self) -> None:
        """None: pages are not carved from a client-side region here, the
        server allocates each chunk (the original's first PagedMemoryAllocator)."""
        return None

    @property
    def pool_handle(self) -> Optional[Region]:
        """The first of this process's pool mappings (``maru_pool_regions``),
        or None when not connected or the pool is reached through maru-agent
        (the original's handle of its first owned region)."""
        if self._client is None:
            return None
        regions = self._client.pool_regions()
        return regions[0] if regions else None

    def get_chunk_size(self) -> int:
        """The page size, ``MaruConfig.chunk_size_bytes``."""
        return self._config.chunk_size_bytes

    def get_buffer_view(self, region_id: int, offset: int, size: int) -> Optional[memoryview]:
        """A memoryview of bytes ``[offset, offset+size)`` of a region's chunk,
        holding its lease: writable while an owned region is not stored,
        read-only after and for read regions. None if the region is gone,
        unknown or not connected, or the range passes the chunk's end."""
        if self._regions is None:
            return None
        return self._regions.get_buffer_view(region_id, offset, size)

    def get_region_page_count(self, region_id: int) -> Optional[int]:
        """1 for a live region (a region is one chunk), None otherwise."""
        if self._regions is None or self._regions.get_region(region_id) is None:
            return None
        return 1

    def get_owned_region_ids(self) -> List[int]:
        """Ids of the live regions alloc() made; empty if not connected."""
        return self._regions.get_region_ids() if self._regions is not None else []

    def set_on_region_added(self, callback: Optional[Callable[[int, int], None]]) -> None:
        """Registers ``callback(region_id, page_count)``, called for every
        region :meth:`alloc` makes before alloc returns; on registration it
        is called at once for each owned region alive. None unregisters."""
        self._on_region_added = callback
        if callback is not None and self._regions is not None:
            for rid in self._regions.get_region_ids():
                if self._regions.get_region(rid) is not None:
                    callback(rid, 1)

    # --- storing --------------------------------------------------------

    def alloc(self, size: int) -> AllocHandle:
        """``maru_alloc``: reserves ``size`` bytes under no key yet, as a new
        owned region of one page.

        Write into ``handle.buf``, then :meth:`store` it (or :meth:`free`).
        ValueError if ``size`` is not in ``(0, chunk_size_bytes]``;
        :class:`AllocError` (OSError ENOSPC/EDQUOT/EFBIG and ValueError)
        when the pool has no room, eviction included.
        """
        table = self._table()
        chunk_size = self._config.chunk_size_bytes
        if size > chunk_size:
            raise ValueError(f"Requested size {size} exceeds chunk_size {chunk_size}")
        if size <= 0:
            raise ValueError(f"Requested size {size} must be positive")
        try:
            chunk = self._live().alloc(size, contiguous=self._config.contiguous)
        except OSError as e:
            if e.errno in _NO_ROOM:
                raise AllocError(e.errno, f"Cannot allocate page of {size} bytes: "
                                 f"{e.strerror}") from e
            raise
        buf = chunk.memoryview()
        rid = table.add(chunk._live(), owned=True)
        chunk.release()  # buf holds the reservation now
        callback = self._on_region_added
        if callback is not None:
            callback(rid, 1)
        return AllocHandle(buf=buf, _region_id=rid, _page_index=0, _size=size)

    def free(self, handle: AllocHandle) -> None:
        """Gives back a handle from :meth:`alloc`: before :meth:`store` the
        space is given back (once no view made from ``buf`` is left); after
        it, the handler forgets the region (the key stays stored; delete it
        with :meth:`delete`). ``handle.buf`` is released (using it raises
        ValueError). ValueError if the region is not this handler's
        (already freed, or never allocated here)."""
        table = self._table()
        if table.owned_handle(handle._region_id) is None:
            raise ValueError(f"region {handle._region_id} is not an allocation of this "
                             "handler (freed, or never allocated here)")
        table.drop(handle._region_id)
        _release_view(handle.buf)

    def store(self, key: Key, handle: Union[AllocHandle, Data, None] = None,
              prefix: Optional[bytes] = None, *, data: Optional[Data] = None,
              info: Optional[Data] = None) -> bool:
        """Stores a value under ``key``; True when the key holds a value.

        With an :class:`AllocHandle` (``store(key, handle)``), as the
        original: ``maru_publish`` names the written space (no copy); if the
        key exists the handle's space is given back once no view of it is
        left. First writer wins: True either way, and the key keeps its first value (the same
        key means the same content). ValueError if the handle's region is
        not an unstored allocation of this handler.

        Ours: with data instead of a handle (a MemoryInfo, memoryview or
        bytes, positionally or as ``data=``/``info=``; optional ``prefix``
        bytes first), it is copied (GIL released) into a new chunk.
        """
        if handle is not None and not isinstance(handle, AllocHandle):
            if data is not None or info is not None:
                raise ValueError("Cannot specify data twice")
            data, handle = handle, None
        if handle is not None:
            if info is not None or data is not None:
                raise ValueError("Cannot specify both handle and data/info")
            return self._publish_all([key], [handle])[0]
        src = data if data is not None else info
        if src is None:
            raise TypeError("Must provide handle, data or info")
        return self._put(key, _as_bytes_view(src), prefix)

    def _publish_all(self, keys: List[Key], handles: List[AllocHandle]) -> List[bool]:
        """Publishes handles under keys: one ``maru_publish`` per key. A key
        stored already (first writer wins) leaves its allocation to the
        handle's views, whose space the pool reuses only once they are gone."""
        table = self._table()
        chunk_handles = []
        for h in handles:
            chunk_handle = table.owned_handle(h._region_id)
            if chunk_handle is None or not chunk_handle.writable:
                raise ValueError(f"region {h._region_id} is not an unstored allocation of "
                                 "this handler (stored, freed, or never allocated here)")
            if h._size > chunk_handle.size:
                raise ValueError(f"handle size {h._size} exceeds its region's {chunk_handle.size}")
            chunk_handles.append(chunk_handle)
        results: List[bool] = []
        for key, h, chunk_handle in zip(keys, handles, chunk_handles):
            try:
                Chunk(chunk_handle).publish(self._path(key))
            except FileExistsError:  # stored already: the key keeps its first value
                table.drop(h._region_id)
                _release_view(h.buf)
            results.append(True)
        return results

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

    def batch_store(self, keys: Sequence[Key], handles: Sequence[Union[AllocHandle, Data]],
                    prefixes: Optional[Sequence[Optional[bytes]]] = None) -> List[bool]:
        """Stores many values; True per key that holds its value.

        With AllocHandles (the original's form, ``batch_store(keys,
        handles)``): one existence check of all keys, then one
        ``maru_publish`` round trip per key not stored yet (maru_direct.h
        has no batched publish; the original registered all in one).

        Ours, with data in ``handles`` (MemoryInfo, memoryview, bytes;
        optional per-key ``prefixes``): ``maru_create_batch``, the copies (GIL released),
        then ``maru_seal_batch``: two round trips in all.
        """
        keys, infos = list(keys), list(handles)
        if len(keys) != len(infos):
            raise ValueError("keys and handles must have the same length")
        if prefixes is not None and len(prefixes) != len(keys):
            raise ValueError("prefixes must have the same length as keys")
        if not keys:
            return []
        if all(isinstance(i, AllocHandle) for i in infos):
            return self._publish_all(keys, infos)  # type: ignore[arg-type]
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

    def _read_info(self, chunk: Chunk) -> MemoryInfo:
        view = chunk.memoryview()
        rid = self._table().add(chunk._live(), owned=False)
        chunk.release()  # the view holds the lease now
        return MemoryInfo(view=view, region_id=rid, page_index=0)

    def retrieve(self, key: Key) -> Optional[MemoryInfo]:
        """``maru_open``: the value as a zero-copy MemoryInfo (a new read
        region), or None if the key is not there (or still being written)."""
        try:
            chunk = self._live().open(self._path(key))
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.EBUSY:
                return None
            raise
        return self._read_info(chunk)

    def batch_retrieve(self, keys: Sequence[Key]) -> List[Optional[MemoryInfo]]:
        """Every key's value as a zero-copy MemoryInfo (None where it is
        missing or being written), as the original: no stop at a miss.

        ``maru_lookup_prefix`` of the keys, and again from the key after
        each miss: 1 + (misses not at the end) calls, each answered from
        the pool's index without a message when the index can, else one
        round trip (see docs/python.md)."""
        paths = [self._path(k) for k in keys]
        client = self._live()
        out: List[Optional[MemoryInfo]] = [None] * len(paths)
        i = 0
        while i < len(paths):
            chunks = client.lookup_prefix(paths[i:i + _maru.BATCH_MAX])
            for j, chunk in enumerate(chunks):
                out[i + j] = self._read_info(chunk)
            i += len(chunks) + (0 if len(chunks) == _maru.BATCH_MAX else 1)
        return out

    def exists(self, key: Key) -> bool:
        """``maru_count_prefix`` of one key: True if it is stored (no lease taken)."""
        return self._live().count_prefix([self._path(key)]) == 1

    def _exists_each(self, paths: List[str]) -> List[bool]:
        client = self._live()
        out = [False] * len(paths)
        i = 0
        while i < len(paths):
            batch = paths[i:i + _maru.BATCH_MAX]
            count = client.count_prefix(batch)
            for j in range(count):
                out[i + j] = True
            i += count + (0 if count == len(batch) else 1)
        return out

    def batch_exists(self, keys: Sequence[Key]) -> List[bool]:
        """True per key that is stored, as the original: every key is
        checked, no stop at a miss, no lease taken.

        ``maru_count_prefix`` of the keys, and again from the key after
        each miss: 1 + (misses not at the end) calls, each answered from
        the pool's index without a message when the index can, else one
        round trip (see docs/python.md)."""
        return self._exists_each([self._path(k) for k in keys])

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
        """``maru_pin``: True if the key exists (and is now pinned against
        eviction), False if not."""
        try:
            self._live().pin(self._path(key))
        except _ABSENT:
            return False
        return True

    def unpin(self, key: Key) -> bool:
        """``maru_unpin``: True if unpinned, False if the key is not there."""
        try:
            self._live().unpin(self._path(key))
        except _ABSENT:
            return False
        return True

    def _per_key(self, call: Callable[[List[str]], List[Optional[OSError]]],
                 keys: Sequence[Key]) -> List[bool]:
        paths = [self._path(k) for k in keys]
        out: List[bool] = []
        for start in _slices(len(paths)):
            out += [e is None for e in call(paths[start:start + _maru.BATCH_MAX])]
        return out

    def batch_pin(self, keys: Sequence[Key]) -> List[bool]:
        """``maru_pin_batch``: True per key that exists and was pinned, one
        round trip per ``maru.BATCH_MAX`` keys."""
        return self._per_key(self._live().pin_batch, keys)

    def batch_unpin(self, keys: Sequence[Key]) -> List[bool]:
        """``maru_unpin_batch``: True per key unpinned, one round trip per
        ``maru.BATCH_MAX`` keys."""
        return self._per_key(self._live().unpin_batch, keys)

    def batch_delete(self, keys: Sequence[Key]) -> List[bool]:
        """``maru_unlink_batch``: True per key deleted (ours), one round trip
        per ``maru.BATCH_MAX`` keys."""
        return self._per_key(self._live().unlink_batch, keys)

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
        ``kv_manager`` {total_entries (files and directories), total_size
        (bytes in use)}, ``allocation_manager`` {num_allocations (this
        handler's live owned regions), total_allocated (bytes in use),
        active_clients (None: not known here)}, ``stats_manager`` (empty),
        ``store_regions`` and ``allocator`` (this handler's owned regions),
        and ours, ``pool`` {total, free, unit, files}."""
        info = self._live().pool_info()
        used = info.total - info.free
        regions = self._table().get_stats()
        stats: Dict[str, Any] = {
            "kv_manager": {"total_entries": info.files, "total_size": used},
            "allocation_manager": {"num_allocations": regions["num_regions"],
                                   "total_allocated": used, "active_clients": None},
            "stats_manager": {},
            "store_regions": regions,
            "pool": info._asdict(),
        }
        if regions["regions"]:
            stats["allocator"] = regions["regions"][0]
        return stats
