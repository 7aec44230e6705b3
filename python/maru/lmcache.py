"""maru.lmcache: Maru as an LMCache storage backend (``MaruBackend``), and
LMCache memory objects over chunks of the pool.

Written against LMCache's own source at commit
``b4dd69b4d8c6967b3c737639f513c446a061b3bd`` (its in-tree maru backend,
``lmcache/v1/storage_backend/maru_backend.py``; the interfaces of
``abstract_backend.py`` it subclasses; ``memory_management.py`` @
``c132a592ae0a2eef62db997a0c8b2029d3f8c015``; python/contracts/lmcache.json).
When ``lmcache`` is importable the classes here subclass LMCache's own
(``AllocatorBackendInterface``, ``MemoryAllocatorInterface``,
``TensorMemoryObj``) and use its ``MemoryObjMetadata`` and
``MemoryFormat``; otherwise the stand-ins of :mod:`maru._upstream.lmcache`.

``MaruBackend`` is a storage plugin: LMCache's plugin launcher
(``storage_plugin_launcher`` in ``lmcache/v1/storage_backend/__init__.py``)
builds it as ``MaruBackend(config=, dst_device=, metadata=,
local_cpu_backend=, loop=)`` from this config (docs/integrations.md)::

    chunk_size: 256
    storage_plugins: ["MaruBackend"]
    extra_config:
      storage_plugin.MaruBackend.module_path: maru.lmcache
      storage_plugin.MaruBackend.class_name: MaruBackend
      maru_server: "unix:///run/maru/maru.sock"   # or maru://host:port, tcp://host:port
      maru_namespace: "lmcache"                  # directory of the chunks
      maru_instance_id: "vllm-0"                 # name in maructl sessions

(Do not set LMCache's ``maru_path`` with it: that builds LMCache's own
maru backend, on ``maru.MaruHandler`` and ``maru_lmcache``, under the same
name.)

It is an allocator backend: ``allocate`` hands out memory objects that lie
in the pool (an unnamed chunk each, ``maru_alloc``), and a put of one only
names it (``maru_publish``); objects from elsewhere (LMCache's local CPU
backend) are copied into new chunks. Gets return objects whose tensors are
views INTO the pool (no copy) holding the chunk's lease.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import logging
import math
import threading
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import _batchio
from .chunk import Chunk
from .client import Client, Hint
from .keys import check_namespace, escape_component

try:  # LMCache's own classes when it is installed
    from lmcache.v1.memory_management import (MemoryAllocatorInterface, MemoryFormat,
                                              MemoryObjMetadata, TensorMemoryObj)
    from lmcache.v1.storage_backend.abstract_backend import AllocatorBackendInterface
    LMCACHE_IMPORTED = True
except ImportError:
    from ._upstream.lmcache import (AllocatorBackendInterface,  # type: ignore[assignment]
                                    MemoryAllocatorInterface, MemoryFormat,
                                    MemoryObjMetadata, TensorMemoryObj)
    LMCACHE_IMPORTED = False

logger = logging.getLogger(__name__)

#: The LMCache commit whose maru backend and interfaces this module follows.
LMCACHE_COMMIT = "b4dd69b4d8c6967b3c737639f513c446a061b3bd"

#: The request tag (``kv_transfer_params: {"lmcache.tag.maru_retain": ...}``)
#: that carries a retention hint; see :func:`split_retain`.
RETAIN_TAG = "maru_retain"
_RETAIN_HINTS = {"keep": Hint.KEEP, "drop": Hint.DROP, "none": Hint.NONE}

#: errnos of "no room" that allocate() answers with None.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def parse_maru_path(path: str) -> str:
    """The maru-server target for an LMCache Maru address.

    ``maru://host:port`` -> ``tcp://host:port``; ``maru:///sock`` and
    ``/sock`` -> ``unix:///sock``; ``unix://`` and ``tcp://`` unchanged.
    ValueError for anything else (a missing port, a relative socket path).
    """
    if path.startswith(("unix://", "tcp://")):
        return path
    if path.startswith("/"):
        return "unix://" + path
    if not path.startswith("maru://"):
        raise ValueError(f"maru.lmcache: maru server {path!r}: expected maru://host:port, "
                         "maru:///socket/path, unix://, tcp:// or an absolute path")
    rest = path[len("maru://"):]
    if rest.startswith("/"):
        return "unix://" + rest
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"maru.lmcache: maru server {path!r}: expected maru://host:port")
    return "tcp://" + rest


def split_retain(key_string: str) -> Tuple[str, Optional[str]]:
    """Splits the ``maru_retain`` tag off an LMCache key string.

    LMCache (``CacheEngineKey.to_string``) appends a request's tags
    (``kv_transfer_params`` entries ``lmcache.tag.NAME: VALUE``) to the key
    as ``@NAME%VALUE``, after its five fields. Returns the key without the
    ``maru_retain`` tag (so a hint never changes where a chunk is stored)
    and the tag's value, or None.
    """
    parts = key_string.split("@")
    if len(parts) <= 5:
        return key_string, None
    kept, value = parts[:5], None
    for segment in parts[5:]:
        name, sep, tag_value = segment.partition("%")
        if sep and name == RETAIN_TAG:
            value = tag_value
        else:
            kept.append(segment)
    return "@".join(kept), value


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _key_string(key: Any) -> str:
    to_string = getattr(key, "to_string", None)
    return to_string() if to_string is not None else str(key)


def _itemsize(dtype: Any) -> int:
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int):
        return size
    import torch

    return torch.empty((), dtype=dtype).element_size()


def _is_shape_list(value: Any) -> bool:
    # [torch.Size, ...] or [[2, L, T, H], ...] versus one shape [2, L, T, H]
    return isinstance(value, (list, tuple)) and bool(value) and \
        not isinstance(value[0], int) and hasattr(value[0], "__len__")


def shapes_and_dtypes(shapes: Any, dtypes: Any) -> Tuple[list, list]:
    """LMCache's one-or-many shapes and dtypes as lists of ``torch.Size``
    and dtypes of the same length (ValueError otherwise)."""
    import torch

    shape_list = [torch.Size(s) for s in shapes] if _is_shape_list(shapes) \
        else [torch.Size(shapes)]
    dtype_list = list(dtypes) if isinstance(dtypes, (list, tuple)) else [dtypes]
    if len(shape_list) != len(dtype_list):
        raise ValueError(f"maru.lmcache: {len(shape_list)} shapes and {len(dtype_list)} dtypes")
    return shape_list, dtype_list


def size_bytes(shapes: Sequence[Any], dtypes: Sequence[Any]) -> int:
    """Bytes of tensors of these shapes and dtypes."""
    return sum(math.prod(s) * _itemsize(d) for s, d in zip(shapes, dtypes))


def view_tensor(view: memoryview) -> Any:
    """A flat uint8 CPU tensor over ``view`` (``torch.frombuffer``, no
    copy); it holds ``view``, and with it whatever the view holds (a
    chunk's lease)."""
    import torch

    with warnings.catch_warnings():
        # A sealed chunk exports a read-only buffer; torch warns that it
        # cannot mark the tensor read-only (docs/python.md).
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(view, dtype=torch.uint8)


def _empty_tensor() -> Any:
    import torch

    return torch.empty(0, dtype=torch.uint8)


class MaruMemoryObj(TensorMemoryObj):
    """LMCache's ``TensorMemoryObj`` over a chunk of the pool.

    ``raw_data`` is a flat uint8 tensor over the chunk's bytes (no copy)
    and holds the chunk's lease (or, for an allocation, its reservation);
    so does every tensor made from it (``tensor``, ``get_tensor``) and
    ``byte_array``. Those stay valid whatever happens to the object or the
    key. When the allocator frees the object (its reference count reached
    zero), the object lets go of the chunk: it becomes invalid, and the
    lease goes once no tensor made from it is left. An allocation whose put
    lost to another writer of the same key had its space given back: its
    tensor must not be used after the put.
    """

    def __init__(self, raw_data: Any, metadata: Any, parent_allocator: Any,
                 chunk: Optional[Chunk] = None) -> None:
        super().__init__(raw_data, metadata, parent_allocator)
        self._chunk = chunk

    @property
    def chunk(self) -> Optional[Chunk]:
        """The chunk handle, when the object has one (None once freed)."""
        return self._chunk

    @property
    def byte_array(self) -> memoryview:
        """The logical bytes, a memoryview into the pool that holds the lease."""
        return memoryview(self.raw_data[:self.get_size()].numpy())

    def numpy(self) -> Any:
        """A numpy array over the tensor's bytes (no copy)."""
        return self.tensor.numpy()

    def drop_lease(self) -> None:
        """Lets go of the chunk: the object becomes invalid; the lease goes
        once no tensor made from it is left (an unpublished allocation's
        space is then given back)."""
        with self.lock:
            self.valid = False
            chunk, self._chunk = self._chunk, None
            self.raw_data = _empty_tensor()
        if chunk is not None:
            chunk.release()


class AllOrNone:
    """``batched_allocate`` over ``allocate``, for the pool's allocators: all
    the objects asked for, or None and none kept."""

    def batched_allocate(self, shapes: Any, dtypes: Any, batch_size: int,
                         fmt: Any = MemoryFormat.UNDEFINED,
                         allocator_type: Optional[str] = None) -> Optional[List[MaruMemoryObj]]:
        """``batch_size`` allocations, or None (and none kept) if one fails."""
        objs: List[MaruMemoryObj] = []
        for _ in range(batch_size):
            obj = self.allocate(shapes, dtypes, fmt, allocator_type)  # type: ignore[attr-defined]
            if obj is None:
                self.batched_free(objs)  # type: ignore[attr-defined]
                return None
            objs.append(obj)
        return objs


class MaruAllocator(AllOrNone, MemoryAllocatorInterface):
    """LMCache memory allocator on a Maru pool (``MaruBackend``'s): each
    memory object is an unnamed chunk of exactly its size (``maru_alloc``),
    freed (given back, once no tensor of it is left) when its reference
    count reaches zero."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def wrap(self, chunk: Chunk, shapes: list, dtypes: list, fmt: Any) -> MaruMemoryObj:
        """A memory object (reference count 1) over ``chunk``."""
        meta = MemoryObjMetadata(shape=shapes[0], dtype=dtypes[0], address=chunk.data_ptr,
                                 phy_size=chunk.size, ref_count=1, fmt=fmt,
                                 shapes=shapes if len(shapes) > 1 else None,
                                 dtypes=dtypes if len(dtypes) > 1 else None)
        return MaruMemoryObj(view_tensor(chunk.memoryview()), meta, self, chunk)

    def allocate(self, shapes: Any, dtypes: Any, fmt: Any = MemoryFormat.UNDEFINED,
                 allocator_type: Optional[str] = None) -> Optional[MaruMemoryObj]:
        """``maru_alloc`` of the object's bytes; None when the pool has no room
        (eviction included)."""
        shape_list, dtype_list = shapes_and_dtypes(shapes, dtypes)
        size = size_bytes(shape_list, dtype_list)
        try:
            chunk = self._client.alloc(size)
        except OSError as e:
            if e.errno in _NO_ROOM:
                logger.debug("maru.lmcache: allocate %d bytes: %s", size, e)
                return None
            raise
        return self.wrap(chunk, shape_list, dtype_list, fmt)

    def free(self, memory_obj: Any, allocator_type: Optional[str] = None) -> None:
        """Lets go of the object's chunk (:meth:`MaruMemoryObj.drop_lease`)."""
        if isinstance(memory_obj, MaruMemoryObj):
            memory_obj.drop_lease()

    def batched_free(self, memory_objs: List[Any], allocator_type: Optional[str] = None,
                     update_stats: bool = True) -> None:
        """:meth:`free` of each object."""
        for obj in memory_objs:
            self.free(obj, allocator_type)


class MaruBackend(AllocatorBackendInterface):
    """LMCache storage backend (and allocator backend) on a Maru pool.

    ``config``: LMCache's ``LMCacheEngineConfig`` (or a dict of it):
    ``extra_config`` (``maru_server``, ``maru_namespace``,
    ``maru_instance_id``, ``remote_enable_mla_worker_id_as0``),
    ``maru_path`` (the server, when ``extra_config`` has no
    ``maru_server``), ``use_layerwise`` (refused). ``metadata``:
    ``LMCacheMetadata`` (or a dict): ``get_shapes()``/``shapes``,
    ``get_dtypes()``/``dtypes``, ``chunk_size``, ``use_mla``,
    ``world_size``, ``worker_id``. ``loop``: LMCache's event loop, on which
    puts run (None: a worker thread of the backend's own).
    ``local_cpu_backend``: LMCache's local CPU backend, or None; when given
    it is this backend's allocator backend for puts
    (:meth:`get_allocator_backend`).
    """

    def __init__(self, config: Any, metadata: Any,
                 loop: Optional[asyncio.AbstractEventLoop] = None,
                 dst_device: str = "cpu", local_cpu_backend: Any = None) -> None:
        super().__init__(dst_device=dst_device)
        if _get(config, "use_layerwise", False):
            raise NotImplementedError("maru.lmcache: layer-wise KV is not supported yet")
        extra: Dict[str, Any] = dict(_get(config, "extra_config") or {})
        path = extra.get("maru_server") or _get(config, "maru_path")
        if not path:
            raise ValueError("maru.lmcache: extra_config maru_server (or maru_path) must be set")
        self.config, self.metadata, self.loop = config, metadata, loop
        self.local_cpu_backend = local_cpu_backend
        self._namespace = check_namespace(extra.get("maru_namespace", "lmcache"))
        self._shape = self._metadata_first("shapes")
        self._dtype = self._metadata_first("dtypes")
        self._use_mla = bool(_get(metadata, "use_mla", False))
        self._fmt = MemoryFormat.KV_MLA_FMT if self._use_mla else MemoryFormat.KV_2LTD
        self._token_dim = self._fmt.token_dim()
        chunk_tokens = int(_get(metadata, "chunk_size", self._shape[self._token_dim]))
        self._token_bytes = math.prod(self._shape) * _itemsize(self._dtype) // chunk_tokens
        self._mla_as_worker0 = bool(
            extra.get("remote_enable_mla_worker_id_as0", self._use_mla) and self._use_mla
            and _get(metadata, "world_size", 1) > 1 and _get(metadata, "worker_id", 0) != 0)
        self._client = Client(parse_maru_path(path), instance=extra.get("maru_instance_id"))
        self.memory_allocator = self.initialize_allocator(config, metadata)
        self.hinted = 0  #: chunks whose retention hint the server accepted
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
            return tuple(value[0]) if _is_shape_list(value) else tuple(value)
        return value[0] if isinstance(value, (list, tuple)) else value

    @property
    def client(self) -> Client:
        """The :class:`maru.Client` underneath."""
        return self._client

    def _key(self, key: Any) -> Any:
        return key.with_new_worker_id(0) if self._mla_as_worker0 else key

    def _split(self, key: Any) -> Tuple[str, Optional[str]]:
        name, retain = split_retain(_key_string(self._key(key)))
        return f"{self._namespace}/{escape_component(name.encode())}", retain

    def path(self, key: Any) -> str:
        """The chunk path of ``key``: ``/<namespace>/<key.to_string()>``
        escaped, without its ``maru_retain`` tag."""
        return self._split(key)[0]

    # --- retention hints ----------------------------------------------------

    def _hint(self, keys: Sequence[Any]) -> None:
        """``maru_hint_batch`` of the keys that carry a ``maru_retain`` tag,
        one round trip per hint value present (none without tags). Never
        raises: a failed hint is logged."""
        by_hint: Dict[Hint, List[str]] = {}
        for key in keys:
            path, retain = self._split(key)
            if retain is None:
                continue
            hint = _RETAIN_HINTS.get(retain.lower())
            if hint is None:
                logger.warning("maru.lmcache: %s=%r is not keep, drop or none; ignored",
                               RETAIN_TAG, retain[:40])
                continue
            by_hint.setdefault(hint, []).append(path)
        for hint, paths in by_hint.items():
            try:
                self.hinted += self._client.hint_all(paths, hint)
            except Exception as e:  # a hint must never fail LMCache's request
                logger.warning("maru.lmcache: hint %s on %d chunks: %s", hint.name,
                               len(paths), e)

    # --- allocator ---------------------------------------------------------

    def initialize_allocator(self, config: Any, metadata: Any) -> MaruAllocator:
        """This backend's allocator: chunks of the pool."""
        return MaruAllocator(self._client)

    def get_memory_allocator(self) -> MaruAllocator:
        """The allocator (:class:`MaruAllocator`)."""
        return self.memory_allocator

    def get_allocator_backend(self) -> Any:
        """LMCache's local CPU backend when one was given, else this backend.

        LMCache's storage manager hands a backend the objects of the
        backend this returns: with the local CPU backend, the objects
        LMCache filled (one copy, into new chunks, at the put); with this
        backend, it first allocates objects here and copies into them
        (``allocate_and_copy_objects``), skipping keys ``contains`` finds
        and pairing the rest with the leading keys of the batch.
        """
        return self.local_cpu_backend if self.local_cpu_backend is not None else self

    def allocate(self, shapes: Any, dtypes: Any, fmt: Any = MemoryFormat.KV_2LTD,
                 eviction: bool = True, busy_loop: bool = True) -> Optional[MaruMemoryObj]:
        """An unnamed chunk of the pool as a memory object (its tensor a view
        of the pool that LMCache's GPU connector writes into); None when the
        pool has no room (eviction included). ``fmt`` None: KV_2LTD
        (KV_MLA_FMT for MLA)."""
        return self.memory_allocator.allocate(shapes, dtypes, self._fmt if fmt is None else fmt)

    def batched_allocate(self, shapes: Any, dtypes: Any, batch_size: int,
                         fmt: Any = MemoryFormat.KV_2LTD, eviction: bool = True,
                         busy_loop: bool = True) -> Optional[List[MaruMemoryObj]]:
        """``batch_size`` allocations, or None (and none kept) if one fails."""
        return self.memory_allocator.batched_allocate(shapes, dtypes, batch_size,
                                                      self._fmt if fmt is None else fmt)

    def calculate_chunk_budget(self) -> int:
        """How many full chunks the pool holds."""
        full = self._token_bytes * int(_get(self.metadata, "chunk_size",
                                            self._shape[self._token_dim]))
        return max(1, self._client.pool_info().total // max(1, full))

    # --- put -----------------------------------------------------------------

    def exists_in_put_tasks(self, key: Any) -> bool:
        """True while a put of ``key`` is pending."""
        with self._put_lock:
            return key in self._put_tasks

    def submit_put_task(self, key: Any, memory_obj: Any,
                        on_complete_callback: Optional[Callable[[Any], None]] = None
                        ) -> concurrent.futures.Future:
        """Stores one object under ``key`` (async)."""
        futures = self.batched_submit_put_task([key], [memory_obj],
                                               on_complete_callback=on_complete_callback)
        return futures[0] if futures else _done([])

    def batched_submit_put_task(self, keys: Sequence[Any], objs: List[Any],
                                transfer_spec: Any = None,
                                on_complete_callback: Optional[Callable[[Any], None]] = None
                                ) -> Optional[List[concurrent.futures.Future]]:
        """Stores each object under its key, on LMCache's loop (or a worker
        thread): an object of this backend's allocator is named
        (``maru_publish``, no copy); any other is copied into a new chunk
        (``maru_create_batch``, one copy, ``maru_seal_batch``). Each chunk
        names the previous one of the batch as its parent. First writer
        wins. Each object is held (``ref_count_up``) until its put is done.
        Keys with a ``maru_retain`` tag are hinted after. One future per
        batch; its result is the list of keys now stored."""
        if self._mla_as_worker0:
            return None
        keys, objs = list(keys), list(objs)
        if len(keys) != len(objs):
            raise ValueError("maru.lmcache: keys and memory objects must have the same length")
        for obj in objs:
            obj.ref_count_up()
        with self._put_lock:
            self._put_tasks.update(keys)
        if self.loop is not None:
            future = asyncio.run_coroutine_threadsafe(
                asyncio.to_thread(self._put_all, keys, objs, on_complete_callback), self.loop)
        else:
            future = self._executor.submit(self._put_all, keys, objs, on_complete_callback)
        return [future]

    def _put_all(self, keys: List[Any], objs: List[Any],
                 callback: Optional[Callable[[Any], None]]) -> List[Any]:
        stored: List[Any] = []
        try:
            paths = [self.path(k) for k in keys]
            parents = [None] + paths[:-1]
            copies = []
            for i, obj in enumerate(objs):
                chunk = obj.chunk if isinstance(obj, MaruMemoryObj) else None
                if chunk is not None and chunk.writable:
                    if self._publish(paths[i], chunk, parents[i]):
                        stored.append(keys[i])
                else:
                    copies.append(i)
            if copies:
                done = self._copy_in([paths[i] for i in copies], [objs[i] for i in copies],
                                     [parents[i] for i in copies])
                stored += [keys[i] for i, ok in zip(copies, done) if ok]
            self._hint(stored)
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

    def _publish(self, path: str, chunk: Chunk, parent: Optional[str]) -> bool:
        try:
            chunk.publish(path, parent)
        except FileExistsError:
            return True  # first writer won: the same key is the same KV
        except OSError as e:
            logger.warning("maru.lmcache: publish %s: %s", path, e)
            return False
        return True

    def _copy_in(self, paths: List[str], objs: List[Any],
                 parents: List[Optional[str]]) -> List[bool]:
        """Copies other allocators' objects into new chunks: one create
        batch, one copy batch, one seal batch (per ``maru.BATCH_MAX``)."""
        import torch

        srcs = [obj.tensor.contiguous().view(-1).view(torch.uint8) for obj in objs]
        created = self._client.create_batch(paths, [int(s.numel()) for s in srcs],
                                            parents=parents)
        done = [isinstance(c, FileExistsError) for c in created]  # first writer won
        chunks = [(i, c) for i, c in enumerate(created) if isinstance(c, Chunk)]
        try:
            errors = _batchio.write_from_batch(self._client, [(c, srcs[i], 0) for i, c in chunks])
            ready = [(i, c) for (i, c), err in zip(chunks, errors) if err is None]
            sealed = self._client.seal_batch([c for _, c in ready]) if ready else []
            for (i, _), err in zip(ready, sealed):
                done[i] = err is None
        finally:
            self._client.release_batch(c for _, c in chunks)
        for path, c in zip(paths, created):
            if isinstance(c, OSError) and not isinstance(c, FileExistsError):
                logger.warning("maru.lmcache: store %s: %s", path, c)
        return done

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
        """How many of ``keys``, from the first, are stored (one call,
        answered from the pool's index when it can); ``pin``: those are
        pinned too (one round trip), and only those."""
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
        import torch

        shape = list(self._shape)
        shape[self._token_dim] = tokens  # the last chunk of a sequence may be shorter
        return self.memory_allocator.wrap(chunk, [torch.Size(shape)], [self._dtype], self._fmt)

    def get_blocking(self, key: Any) -> Optional[MaruMemoryObj]:
        """The stored KV of ``key`` as a memory object over the pool
        (reference count 1: the caller's), or None."""
        try:
            chunk = self._client.open(self.path(key))
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.EBUSY:  # still being written
                return None
            raise
        obj = self._as_obj(chunk)
        if obj is not None:
            self._hint([key])
        return obj

    def batched_get_blocking(self, keys: List[Any]) -> List[Optional[MaruMemoryObj]]:
        """Memory objects of the stored prefix of ``keys`` (one call);
        None from the first missing key on."""
        chunks = self._client.lookup_prefix([self.path(k) for k in keys]) if keys else []
        objs: List[Optional[MaruMemoryObj]] = []
        for i, chunk in enumerate(chunks):
            obj = self._as_obj(chunk)
            if obj is None:  # not KV of this model: a miss, and so is the rest
                self._client.release_batch(chunks[i + 1:])
                break
            objs.append(obj)
        self._hint(keys[:len(objs)])
        return objs + [None] * (len(keys) - len(objs))

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[Any],
                                       transfer_spec: Any = None) -> List[MaruMemoryObj]:
        """The leading hits of ``keys`` (stops at the first miss), each with
        the caller's reference and pinned for the retrieval, which releases
        both (``ref_count_down``, ``unpin``)."""
        def fetch() -> List[MaruMemoryObj]:
            objs = []
            for obj in self.batched_get_blocking(keys):
                if obj is None:
                    break
                obj.pin()
                objs.append(obj)
            return objs
        return await asyncio.to_thread(fetch)

    def get_non_blocking(self, key: Any,
                         location: Optional[str] = None) -> concurrent.futures.Future:
        """:meth:`get_blocking` on the backend's worker thread."""
        return self._executor.submit(self.get_blocking, key)

    def submit_prefetch_task(self, key: Any) -> bool:
        """Nothing to prefetch: the pool is this host's memory. True if stored."""
        return self.contains(key)

    def touch_cache(self) -> None:
        """Nothing: the server keeps the chunks' access statistics itself."""
        return None

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
        self.memory_allocator.close()
        self._client.close()


def _done(value: Any) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(value)
    return future
