"""maru.lmcache: Maru as an LMCache storage backend (``MaruBackend``).

Follows what LMCache's own ``lmcache/v1/storage_backend/maru_backend.py``
calls, at LMCache commit ``b4dd69b4d8c6967b3c737639f513c446a061b3bd``
(``AllocatorBackendInterface`` of abstract_backend.py): the backend is its
own allocator, so LMCache's ``batched_allocate`` hands out memory objects
that already lie in the pool; the engine writes the KV chunk into them;
``batched_submit_put_task`` binds each to its key (``maru_publish``: first
writer wins, no copy); ``contains`` / ``batched_contains`` (with and
without pin, stopping at the first miss); ``get_blocking`` /
``batched_get_blocking`` / ``batched_get_non_blocking`` return memory
objects whose tensors are views INTO the pool (no copy) and hold the
chunk's lease; ``pin`` / ``unpin`` / ``remove``.

Tested here through a harness making LMCache's call sequence on a small
transformer (examples/tiny_llm/test_lmcache.py), not inside LMCache, which
cannot be installed on the build machines. LMCache is not imported: memory
objects are :class:`MaruMemoryObj`, duck-typed after LMCache's
``MemoryObj`` (``tensor``, ``byte_array``, ``metadata``, ``ref_count_up`` /
``ref_count_down``, ``pin`` / ``unpin``, ``get_size`` ...).

Configuration (LMCache's config file)::

    maru_path: "maru://host:port"          # or "maru:///run/maru/maru.sock"
    extra_config:
      maru_namespace: "lmcache"            # directory of the chunks
      maru_instance_id: "vllm-0"           # name in maructl sessions

``maru_path`` forms: ``maru://host:port`` (TCP), ``maru:///path/to.sock``,
``unix:///path``, ``tcp://host:port``, or a bare absolute socket path.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import logging
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from .chunk import Chunk
from .client import Client
from .keys import check_namespace, escape_component

logger = logging.getLogger(__name__)

LMCACHE_COMMIT = "b4dd69b4d8c6967b3c737639f513c446a061b3bd"


def parse_maru_path(path: str) -> str:
    """The maru-server target for LMCache's ``maru_path``.

    ``maru://host:port`` -> ``tcp://host:port``; ``maru:///sock`` and
    ``/sock`` -> ``unix:///sock``; ``unix://`` and ``tcp://`` unchanged.
    ValueError for anything else (a missing port, a relative socket path).
    """
    if path.startswith(("unix://", "tcp://")):
        return path
    if path.startswith("/"):
        return "unix://" + path
    if not path.startswith("maru://"):
        raise ValueError(f"maru.lmcache: maru_path {path!r}: expected maru://host:port, "
                         "maru:///socket/path, unix://, tcp:// or an absolute path")
    rest = path[len("maru://"):]
    if rest.startswith("/"):
        return "unix://" + rest
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"maru.lmcache: maru_path {path!r}: expected maru://host:port")
    return "tcp://" + rest


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _key_string(key: Any) -> str:
    to_string = getattr(key, "to_string", None)
    return to_string() if to_string is not None else str(key)


@dataclass
class MaruMemoryObjMetadata:
    """What LMCache reads of ``MemoryObj.metadata``."""

    shape: Any
    dtype: Any
    address: int
    phy_size: int
    fmt: Any = None
    ref_count: int = 1
    pin_count: int = 0


class MaruMemoryObj:
    """A memory object over one chunk of the pool, LMCache-style.

    ``tensor`` is a view of the chunk's bytes (no copy): writable while the
    chunk is unpublished (from :meth:`MaruBackend.allocate`), read-only by
    contract once published or when it came from a get. The object holds
    the chunk (its reservation, or its lease) while its reference count is
    above zero; the tensor itself also holds it, so a tensor kept after
    ``ref_count_down`` still reads the bytes it was made from. An allocated
    object whose put lost to another writer of the same key had its space
    given back: its tensor must not be used after the put.
    """

    def __init__(self, chunk: Chunk, shape: Any, dtype: Any, fmt: Any = None) -> None:
        self._chunk: Optional[Chunk] = chunk
        self.tensor = chunk.torch(dtype, tuple(shape))
        self.metadata = MaruMemoryObjMetadata(tuple(shape), dtype, chunk.data_ptr,
                                              chunk.size, fmt)
        self._lock = threading.Lock()

    @property
    def chunk(self) -> Optional[Chunk]:
        """The chunk (None once the last reference went)."""
        return self._chunk

    @property
    def byte_array(self) -> memoryview:
        """The bytes, as a memoryview into the pool."""
        return memoryview(self.tensor.numpy()).cast("B")

    @property
    def raw_data(self) -> Any:
        """The tensor (LMCache's name for the underlying storage)."""
        return self.tensor

    def numpy(self) -> Any:
        """A numpy array over the same bytes (no copy)."""
        return self.tensor.numpy()

    def get_size(self) -> int:
        """Bytes of the object."""
        return self.metadata.phy_size

    def get_physical_size(self) -> int:
        """Bytes of the object."""
        return self.metadata.phy_size

    def get_shape(self) -> Any:
        """The tensor's shape."""
        return self.tensor.shape

    def get_dtype(self) -> Any:
        """The tensor's dtype."""
        return self.metadata.dtype

    def get_memory_format(self) -> Any:
        """The LMCache memory format given at allocation."""
        return self.metadata.fmt

    def is_valid(self) -> bool:
        """False once the last reference went."""
        return self._chunk is not None

    def ref_count_up(self) -> None:
        """One more holder."""
        with self._lock:
            self.metadata.ref_count += 1

    def ref_count_down(self) -> None:
        """One holder fewer; at zero the chunk handle is released."""
        with self._lock:
            self.metadata.ref_count -= 1
            if self.metadata.ref_count > 0 or self._chunk is None:
                return
            chunk, self._chunk = self._chunk, None
        chunk.release()

    def get_ref_count(self) -> int:
        """Current holders."""
        return self.metadata.ref_count

    def pin(self) -> bool:
        """Marks the object in use by a retrieval (LMCache bookkeeping)."""
        with self._lock:
            self.metadata.pin_count += 1
        return True

    def unpin(self) -> bool:
        """Ends one :meth:`pin`."""
        with self._lock:
            self.metadata.pin_count = max(0, self.metadata.pin_count - 1)
        return True

    @property
    def is_pinned(self) -> bool:
        """True while pinned."""
        return self.metadata.pin_count > 0

    @property
    def can_evict(self) -> bool:
        """True when neither pinned nor held by more than its owner."""
        return not self.is_pinned and self.metadata.ref_count <= 1


class MaruBackend:
    """LMCache storage backend (and allocator) on a Maru pool.

    ``config``: LMCache's ``LMCacheEngineConfig`` (or a dict of it):
    ``maru_path``, ``extra_config``, ``use_layerwise``. ``metadata``:
    ``LMCacheMetadata`` (or a dict): ``get_shapes()``/``shapes``,
    ``get_dtypes()``/``dtypes``, ``chunk_size``, ``use_mla``,
    ``world_size``, ``worker_id``. ``loop``: an asyncio loop to run puts on
    (as LMCache passes); None: a worker thread of the backend's own.
    """

    def __init__(self, config: Any, metadata: Any,
                 loop: Optional[asyncio.AbstractEventLoop] = None,
                 dst_device: str = "cpu") -> None:
        if _get(config, "use_layerwise", False):
            raise NotImplementedError("maru.lmcache: layer-wise KV is not supported yet")
        path = _get(config, "maru_path")
        if not path:
            raise ValueError("maru.lmcache: maru_path must be set")
        extra: Dict[str, Any] = dict(_get(config, "extra_config") or {})
        self.config, self.metadata, self.loop, self.dst_device = config, metadata, loop, dst_device
        self._namespace = check_namespace(extra.get("maru_namespace", "lmcache"))
        self._shape = self._metadata_first("shapes")
        self._dtype = self._metadata_first("dtypes")
        chunk_tokens = int(_get(metadata, "chunk_size", self._shape[-2]))
        itemsize = _itemsize(self._dtype)
        self._token_bytes = math.prod(self._shape) * itemsize // chunk_tokens
        use_mla = bool(_get(metadata, "use_mla", False))
        self._mla_as_worker0 = bool(
            extra.get("remote_enable_mla_worker_id_as0", use_mla) and use_mla
            and _get(metadata, "world_size", 1) > 1 and _get(metadata, "worker_id", 0) != 0)
        self._client = Client(parse_maru_path(path), instance=extra.get("maru_instance_id"))
        self._put_lock = threading.Lock()
        self._put_done = threading.Condition(self._put_lock)
        self._put_tasks: set = set()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="maru-lmcache-put")

    def __str__(self) -> str:
        return self.__class__.__name__

    def _metadata_first(self, name: str) -> Any:
        """The first of LMCache's per-tensor shapes or dtypes (one KV tensor)."""
        getter = getattr(self.metadata, f"get_{name}", None)
        value = getter() if getter is not None else _get(self.metadata, name)
        if value is None:
            raise ValueError(f"maru.lmcache: metadata has no {name}")
        if name == "shapes":
            return _first_shape(value)
        return value[0] if isinstance(value, (list, tuple)) else value

    @property
    def client(self) -> Client:
        """The :class:`maru.Client` underneath."""
        return self._client

    def _key(self, key: Any) -> Any:
        return key.with_new_worker_id(0) if self._mla_as_worker0 else key

    def path(self, key: Any) -> str:
        """The chunk path of ``key``: ``/<namespace>/<key.to_string()>`` escaped."""
        return f"{self._namespace}/{escape_component(_key_string(self._key(key)).encode())}"

    # --- allocator ---------------------------------------------------------

    def get_memory_allocator(self) -> "MaruBackend":
        """The allocator: this backend (allocations are chunks of the pool)."""
        return self

    def get_allocator_backend(self) -> "MaruBackend":
        """The allocator backend: this backend."""
        return self

    def allocate(self, shapes: Any, dtypes: Any, fmt: Any = None, eviction: bool = True,
                 busy_loop: bool = True) -> Optional[MaruMemoryObj]:
        """``maru_alloc``: an unnamed chunk of the pool as a memory object;
        None when the pool has no room (eviction included)."""
        shape = _first_shape(shapes)
        dtype = dtypes[0] if isinstance(dtypes, (list, tuple)) else dtypes
        size = math.prod(shape) * _itemsize(dtype)
        try:
            chunk = self._client.alloc(size)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                logger.debug("maru.lmcache: allocate %d bytes: %s", size, e)
                return None
            raise
        return MaruMemoryObj(chunk, shape, dtype, fmt)

    def batched_allocate(self, shapes: Any, dtypes: Any, batch_size: int, fmt: Any = None,
                         eviction: bool = True,
                         busy_loop: bool = True) -> Optional[List[MaruMemoryObj]]:
        """``batch_size`` allocations, or None (and none kept) if one fails."""
        objs: List[MaruMemoryObj] = []
        for _ in range(batch_size):
            obj = self.allocate(shapes, dtypes, fmt, eviction, busy_loop)
            if obj is None:
                for made in objs:
                    made.ref_count_down()
                return None
            objs.append(obj)
        return objs

    # --- put -----------------------------------------------------------------

    def exists_in_put_tasks(self, key: Any) -> bool:
        """True while a put of ``key`` is pending."""
        with self._put_lock:
            return key in self._put_tasks

    def submit_put_task(self, key: Any, memory_obj: MaruMemoryObj,
                        on_complete_callback: Optional[Callable[[Any], None]] = None
                        ) -> concurrent.futures.Future:
        """Binds one allocated, written memory object to ``key`` (async)."""
        futures = self.batched_submit_put_task([key], [memory_obj],
                                               on_complete_callback=on_complete_callback)
        return futures[0] if futures else _done(None)

    def batched_submit_put_task(self, keys: Sequence[Any], memory_objs: List[MaruMemoryObj],
                                transfer_spec: Any = None,
                                on_complete_callback: Optional[Callable[[Any], None]] = None
                                ) -> Optional[List[concurrent.futures.Future]]:
        """Publishes each object's chunk under its key: the KV is in the
        pool already, so this only names it (one ``maru_publish`` per key;
        each chunk names the previous one of the batch as its parent). The
        future's result is the list of keys now stored."""
        if self._mla_as_worker0:
            return None
        keys, objs = list(keys), list(memory_objs)
        for obj in objs:
            obj.ref_count_up()  # held until the publish is done
        with self._put_lock:
            self._put_tasks.update(keys)
        if self.loop is not None:
            future = asyncio.run_coroutine_threadsafe(
                asyncio.to_thread(self._publish_all, keys, objs, on_complete_callback),
                self.loop)
        else:
            future = self._executor.submit(self._publish_all, keys, objs, on_complete_callback)
        return [future]

    def _publish_all(self, keys: List[Any], objs: List[MaruMemoryObj],
                     callback: Optional[Callable[[Any], None]]) -> List[Any]:
        stored = []
        try:
            prev: Optional[str] = None
            for key, obj in zip(keys, objs):
                path = self.path(key)
                if self._publish(path, obj, prev):
                    stored.append(key)
                prev = path
        finally:
            with self._put_done:
                self._put_tasks.difference_update(keys)
                self._put_done.notify_all()
            for obj in objs:
                obj.ref_count_down()
        for key in stored:
            if callback is not None:
                try:
                    callback(key)
                except Exception as e:  # LMCache's callbacks must not stop the others
                    logger.warning("maru.lmcache: on_complete_callback(%s): %s", key, e)
        return stored

    def _publish(self, path: str, obj: MaruMemoryObj, parent: Optional[str]) -> bool:
        chunk = obj.chunk
        if chunk is None or not chunk.writable:
            return False
        try:
            chunk.publish(path, parent)
        except FileExistsError:
            return True  # first writer won: the same key is the same KV
        except OSError as e:
            logger.warning("maru.lmcache: publish %s: %s", path, e)
            return False
        return True

    # --- contains ------------------------------------------------------------

    def contains(self, key: Any, pin: bool = False) -> bool:
        """True if ``key`` is stored; ``pin``: and pin it against eviction."""
        path = self.path(key)
        if pin:
            try:
                self._client.pin(path)
            except FileNotFoundError:
                return False
            return True
        return self._client.count_prefix([path]) == 1

    def batched_contains(self, keys: List[Any], pin: bool = False) -> int:
        """How many of ``keys``, from the first, are stored (one round trip);
        ``pin``: those are pinned too (one more), and only those."""
        paths = [self.path(k) for k in keys]
        n = self._client.count_prefix(paths) if paths else 0
        if not pin or n == 0:
            return n
        errors = self._client.pin_batch(paths[:n])
        hit = next((i for i, e in enumerate(errors) if e is not None), n)
        pinned_after = [p for p, e in zip(paths[hit:n], errors[hit:]) if e is None]
        if pinned_after:  # evicted in between: pins past the gap would leak
            self._client.unpin_batch(pinned_after)
        return hit

    async def batched_async_contains(self, lookup_id: str, keys: List[Any],
                                     pin: bool = False) -> int:
        """:meth:`batched_contains` off the event loop."""
        return await asyncio.to_thread(self.batched_contains, keys, pin)

    # --- get -----------------------------------------------------------------

    def _as_obj(self, chunk: Chunk) -> Optional[MaruMemoryObj]:
        tokens, rest = divmod(chunk.size, self._token_bytes)
        if rest or tokens == 0:
            logger.warning("maru.lmcache: %s has %d bytes, not whole tokens of %d",
                           chunk.path, chunk.size, self._token_bytes)
            chunk.release()
            return None
        shape = list(self._shape)
        shape[-2] = tokens  # the last chunk of a sequence may be shorter
        return MaruMemoryObj(chunk, shape, self._dtype)

    def get_blocking(self, key: Any) -> Optional[MaruMemoryObj]:
        """The stored KV of ``key`` as a memory object over the pool, or None."""
        try:
            chunk = self._client.open(self.path(key))
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.EBUSY:  # still being written
                return None
            raise
        return self._as_obj(chunk)

    def batched_get_blocking(self, keys: List[Any]) -> List[Optional[MaruMemoryObj]]:
        """Memory objects of the stored prefix of ``keys`` (one round trip);
        None from the first missing key on."""
        chunks = self._client.lookup_prefix([self.path(k) for k in keys]) if keys else []
        objs: List[Optional[MaruMemoryObj]] = []
        for i, chunk in enumerate(chunks):
            obj = self._as_obj(chunk)
            if obj is None:  # not KV of this model: a miss, and so is the rest
                self._client.release_batch(chunks[i + 1:])
                break
            objs.append(obj)
        return objs + [None] * (len(keys) - len(objs))

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[Any],
                                       transfer_spec: Any = None) -> List[MaruMemoryObj]:
        """The leading hits of ``keys`` (stops at the first miss), pinned
        for the retrieval as LMCache expects."""
        def fetch() -> List[MaruMemoryObj]:
            objs = []
            for obj in self.batched_get_blocking(keys):
                if obj is None:
                    break
                obj.pin()
                objs.append(obj)
            return objs
        return await asyncio.to_thread(fetch)

    def get_non_blocking(self, key: Any) -> concurrent.futures.Future:
        """:meth:`get_blocking` on the backend's worker thread."""
        return self._executor.submit(self.get_blocking, key)

    def submit_prefetch_task(self, key: Any) -> bool:
        """Nothing to prefetch: the pool is this host's memory. True if stored."""
        return self.contains(key)

    # --- pin, unpin, remove --------------------------------------------------

    def pin(self, key: Any) -> bool:
        """Pins ``key`` against eviction; False if it is not stored."""
        return self.contains(key, pin=True)

    def unpin(self, key: Any) -> bool:
        """Ends one pin of ``key``; False if it is not stored."""
        try:
            self._client.unpin(self.path(key))
        except FileNotFoundError:
            return False
        return True

    def batched_unpin(self, keys: List[Any]) -> None:
        """Unpins ``keys`` in one round trip."""
        if keys:
            self._client.unpin_batch([self.path(k) for k in keys])

    def remove(self, key: Any, force: bool = True) -> bool:
        """Unlinks ``key``; holders of its objects keep reading their bytes."""
        try:
            self._client.unlink(self.path(key))
        except FileNotFoundError:
            return False
        return True

    def batched_remove(self, keys: List[Any], force: bool = True) -> int:
        """Unlinks ``keys`` in one round trip; returns how many were removed."""
        if not keys:
            return 0
        errors = self._client.unlink_batch([self.path(k) for k in keys])
        return sum(1 for e in errors if e is None)

    # --- lifecycle -----------------------------------------------------------

    def close(self) -> None:
        """Waits for pending puts, then closes the connection."""
        with self._put_done:
            self._put_done.wait_for(lambda: not self._put_tasks)
        self._executor.shutdown(wait=True)
        self._client.close()


def _is_shape_list(value: Any) -> bool:
    # [torch.Size, ...] or [[2, L, T, H], ...] versus one shape [2, L, T, H]
    return isinstance(value, (list, tuple)) and bool(value) and \
        not isinstance(value[0], int) and hasattr(value[0], "__len__")


def _first_shape(shapes: Any) -> tuple:
    return tuple(shapes[0]) if _is_shape_list(shapes) else tuple(shapes)


def _itemsize(dtype: Any) -> int:
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int):
        return size
    import torch

    return torch.empty((), dtype=dtype).element_size()


def _done(value: Any) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(value)
    return future

