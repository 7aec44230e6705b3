"""maru.sglang: Maru as an SGLang HiCache storage backend (the L3 tier).

Follows SGLang (sgl-project/sglang) at commit
``001067fffe33427bee0ed2f007fb7551a1d76b44``: ``HiCacheStorage`` of
python/sglang/srt/mem_cache/hicache_storage.py, the dynamic backend of
storage/backend_factory.py, the calls of managers/cache_controller.py
(``HiCacheController``) and of HybridCacheController (the multi-pool "v2"
calls), and the host KV pools' ``get_page_buffer_meta`` (pool_host/mha.py,
pool_host/mla.py). :class:`MaruHiCacheStorage` subclasses SGLang's own
``HiCacheStorage`` when ``sglang`` is importable (the factory checks
``issubclass``), and the stand-in of :mod:`maru._upstream.sglang` (the same
interface, written after that file) otherwise.

SGLang builds it as a dynamic backend, ``cls(storage_config, {})``, then
hands it the host pool with ``register_mem_pool_host``::

    --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "maru",
        "module_path": "maru.sglang", "class_name": "MaruHiCacheStorage",
        "interface_v1": 1, "maru_server": "unix:///run/maru/maru.sock"}'

``"interface_v1": 1`` makes SGLang's controller call the zero-copy
``batch_get_v1``/``batch_set_v1``; without it, it takes the legacy path
(``batch_get``/``batch_set`` of flat page tensors), which works too, in
any dtype (pages are copied as bytes), at the cost of a copy per page.

Extra-config keys of ours: ``maru_server`` (default ``$MARU_SERVER``, else
the default socket), ``maru_namespace`` (directory, default ``sglang``),
``maru_instance_id`` (the client's name in ``maructl sessions``). Any other
``maru_`` key is refused (ValueError): it would be a typo.

One chunk per page, at ``/<namespace>/<model>/<shard>/<page hash>``,
holding the page's bytes as SGLang's flat data page has them
(``get_data_page(flat=True)``), whichever path wrote it. The shard
names what makes the bytes of a page differ between workers: the
tensor-parallel rank and size (MLA pages are the same on every rank: only
rank 0 writes them and every rank reads them), the pipeline and context
parallel ranks, the host layout, and, for the pools of a hybrid model other
than the KV pool, the pool's name. Attention data-parallel ranks hold whole
heads of the same weights, so their pages are interchangeable, as two
instances' are: the DP rank names the client, not the pages.
"""

from __future__ import annotations

import errno
import logging
import re
import threading
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from . import _batchio
from ._maru import BATCH_MAX
from .chunk import Chunk
from .client import Client, Hint
from .keys import check_namespace, escape_component

try:  # the factory requires a subclass of SGLang's own HiCacheStorage
    from sglang.srt.mem_cache import hicache_storage as _hicache
except ImportError:  # SGLang is not installed: the stand-ins
    from ._upstream import sglang as _hicache  # type: ignore[no-redef]

HiCacheStorage = _hicache.HiCacheStorage
HiCacheStorageConfig = _hicache.HiCacheStorageConfig
HiCacheStorageExtraInfo = _hicache.HiCacheStorageExtraInfo
PoolName = _hicache.PoolName
PoolHitPolicy = _hicache.PoolHitPolicy
PoolTransfer = _hicache.PoolTransfer
PoolTransferResult = _hicache.PoolTransferResult
count_pool_hits = _hicache.count_pool_hits
STORAGE_BATCH_SIZE: int = _hicache.STORAGE_BATCH_SIZE
#: True when the classes above are SGLang's own.
SGLANG_IMPORTED: bool = _hicache.__name__.startswith("sglang.")

logger = logging.getLogger(__name__)

SGLANG_COMMIT = "001067fffe33427bee0ed2f007fb7551a1d76b44"

#: The extra-config keys this backend reads.
EXTRA_KEYS = ("maru_server", "maru_namespace", "maru_instance_id")

#: A host pool's layout as a path component.
_LAYOUT = re.compile(r"[A-Za-z0-9_]+")

# A page's pieces: (address in this process, or a buffer/CPU tensor; bytes).
Piece = Tuple[Any, int]


def _field(config: Any, name: str, default: Any = None) -> Any:
    """A field of a HiCacheStorageConfig, or of a dict standing for one."""
    if isinstance(config, dict):
        return config.get(name, default)
    return getattr(config, name, default)


def _pool_key(name: Any) -> str:
    """A pool's name (a PoolName or a string) as text: ``"kv"``, ``"mamba"``."""
    value = getattr(name, "value", name)
    if not isinstance(value, str) or not _LAYOUT.fullmatch(value):
        raise ValueError(f"maru.sglang: bad pool name {name!r}")
    return value


def shard_name(config: Any, layout: str, pool: Any = None) -> str:
    """The directory component that keeps workers with different bytes apart.

    ``tp<rank>of<size>`` (MLA: ``mla``, except for a Mamba pool, whose state
    every rank holds its part of), ``-pp<r>of<n>`` and ``-cp<r>of<n>`` when
    those split the model, the layout, and a side pool's name.
    """
    if _field(config, "should_split_heads", False):
        raise NotImplementedError(
            "maru.sglang: should_split_heads (tp_lcm_size with the page_head layout) "
            "is not supported: leave tp_lcm_size out of the extra config")
    if not isinstance(layout, str) or not _LAYOUT.fullmatch(layout):
        raise ValueError(f"maru.sglang: bad host pool layout {layout!r}")
    name = _pool_key(pool) if pool is not None else "kv"
    if _field(config, "is_mla_model", False) and name != "mamba":
        parts = ["mla"]
    else:
        parts = [f"tp{_field(config, 'tp_rank', 0)}of{_field(config, 'tp_size', 1)}"]
    if _field(config, "pp_size", 1) > 1:
        parts.append(f"pp{_field(config, 'pp_rank', 0)}of{_field(config, 'pp_size', 1)}")
    if _field(config, "attn_cp_size", 1) > 1:
        parts.append(f"cp{_field(config, 'attn_cp_rank', 0)}of{_field(config, 'attn_cp_size', 1)}")
    parts.append(layout)
    if name != "kv":
        parts.append(name)
    return "-".join(parts)


def _batches(items: Sequence[Any], size: int = BATCH_MAX) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _nbytes(value: Any) -> int:
    if hasattr(value, "element_size"):
        return int(value.numel() * value.element_size())
    return memoryview(value).nbytes


def _listify(value: Any, n: int, what: str) -> List[Any]:
    if value is None:
        return [None] * n
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"maru.sglang: {what} must be a list, not {type(value).__name__}")
    if len(value) != n:
        raise ValueError(f"maru.sglang: {len(value)} {what} for {n} keys")
    return list(value)


def _legacy_pieces(value: Any, location: Any, sizes: Any) -> List[Piece]:
    """A value of the legacy calls as pieces: a tensor or buffer, or an
    address (or list of addresses) with its size (or sizes)."""
    if value is not None:
        return [(value, _nbytes(value))]
    if location is None:
        raise ValueError("maru.sglang: a value or a target location is needed")
    if isinstance(location, int):
        location, sizes = [location], [sizes]
    if isinstance(location, (list, tuple)):
        if not isinstance(sizes, (list, tuple)) or len(sizes) != len(location):
            raise ValueError("maru.sglang: target_sizes must give one size per address")
        if not all(isinstance(s, int) and s > 0 for s in sizes):
            raise ValueError(f"maru.sglang: bad target sizes {sizes!r}")
        return list(zip(location, sizes))
    return [(location, _nbytes(location))]


def _byte_pieces(pieces: List[Piece]) -> List[Piece]:
    """Tensors as numpy arrays of their bytes (any dtype; CPU and contiguous,
    else ValueError), the form the library's batch calls take as it is."""
    return [(_batchio.tensor_bytes(w).numpy() if hasattr(w, "element_size") else w, n)
            for w, n in pieces]


class MaruHiCacheStorage(HiCacheStorage):  # type: ignore[misc,valid-type]
    """SGLang HiCache storage on a Maru pool (see the module notes).

    ``storage_config``: SGLang's ``HiCacheStorageConfig`` (or a dict of its
    fields). ``kwargs``: what SGLang's factory passes second, its keyword
    arguments as a dict (``{}`` from the controller at the pinned commit);
    a host pool there (as SGLang's built-in backends get it) is registered.

    Thread-safe: HiCache's prefetch and backup threads call it at once.
    Failures of a page come back as False (HiCache then recomputes or
    retries), never as torn bytes: a page is readable only once sealed.
    """

    def __init__(self, storage_config: Any, kwargs: Any = None) -> None:
        if storage_config is None or not (isinstance(storage_config, dict)
                                          or hasattr(storage_config, "tp_rank")):
            raise TypeError("maru.sglang: storage_config must be SGLang's HiCacheStorageConfig "
                            f"(or a dict of its fields), not {type(storage_config).__name__}")
        self.storage_config = storage_config
        shard_name(storage_config, "page_first")  # refuses what it cannot store, now
        extra = _field(storage_config, "extra_config", None)
        if extra is not None and not isinstance(extra, dict):
            raise TypeError("maru.sglang: extra_config must be a dict")
        extra = dict(extra or {})
        options = self._options(extra)
        v1 = extra.get("interface_v1", 0)
        if isinstance(v1, str):
            logger.warning("maru.sglang: interface_v1 is the string %r; SGLang tests it with "
                           "bool(), so any non-empty string turns the v1 calls on", v1)
        elif not v1:
            logger.info("maru.sglang: no \"interface_v1\": 1 in the extra config: SGLang "
                        "takes the legacy batch_get/batch_set path (a copy per page)")
        self._namespace = check_namespace(options["namespace"])
        model = _field(storage_config, "model_name", None) or "model"
        if not isinstance(model, str):
            raise TypeError("maru.sglang: model_name must be a string")
        self._model = escape_component(model.replace("/", "-").encode())
        self._client = Client(options["server"], instance=options["instance"]
                              or self._default_instance())
        self._dirs: Dict[str, str] = {}
        self._pools: Dict[str, Any] = {}
        self._stored: Set[str] = set()
        self._lock = threading.Lock()
        self.mem_pool_host: Any = None
        if kwargs is not None and not isinstance(kwargs, dict):
            if not hasattr(kwargs, "get_page_buffer_meta"):
                raise TypeError("maru.sglang: the second argument is the factory's kwargs "
                                f"dict or a host KV pool, not {type(kwargs).__name__}")
            self.register_mem_pool_host(kwargs)

    def _options(self, extra: Dict[str, Any]) -> Dict[str, Any]:
        """Our settings from the extra config: server, namespace, instance."""
        unknown = sorted(k for k in extra if k.startswith("maru_") and k not in EXTRA_KEYS)
        if unknown:
            raise ValueError(f"maru.sglang: unknown extra-config keys {unknown}; "
                             f"known: {list(EXTRA_KEYS)}")
        for key in EXTRA_KEYS:
            value = extra.get(key)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"maru.sglang: {key} must be a string")
        return {"server": extra.get("maru_server"),
                "namespace": extra.get("maru_namespace") or "sglang",
                "instance": extra.get("maru_instance_id")}

    def _default_instance(self) -> str:
        config = self.storage_config
        name = f"sglang-tp{_field(config, 'tp_rank', 0)}"
        for field, tag in (("pp", "pp"), ("attn_cp", "cp"), ("dp", "dp")):
            if _field(config, f"{field}_size", 1) > 1:
                name += f"-{tag}{_field(config, f'{field}_rank', 0)}"
        return name

    # --- setup -----------------------------------------------------------

    def _dir_for(self, pool: Any, name: str = "kv") -> str:
        layout = getattr(pool, "layout", None)
        if layout is None and name != "kv" and self.mem_pool_host is not None:
            layout = getattr(self.mem_pool_host, "layout", None)
        if layout is None:
            page_first = _field(self.storage_config, "is_page_first_layout", False)
            layout = "page_first" if page_first else "layer_first"
        return f"{self._namespace}/{self._model}/{shard_name(self.storage_config, layout, name)}"

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Binds the host KV pool: its layout names the shard directory."""
        directory = self._dir_for(mem_pool_host)
        with self._lock:
            self.mem_pool_host = mem_pool_host
            self._dirs["kv"] = directory
            self._pools["kv"] = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Binds one named host pool of a hybrid model (HybridCacheController
        registers every pool, the KV pool included)."""
        name = _pool_key(host_pool_name)
        directory = self._dir_for(host_pool, name)
        with self._lock:
            if not hasattr(self, "registered_pools"):
                self.registered_pools: Dict[Any, Any] = {}
            self.registered_pools[host_pool_name] = host_pool
            self._pools[name] = host_pool
            self._dirs[name] = directory
            if name == "kv" and self.mem_pool_host is None:
                self.mem_pool_host = host_pool

    @property
    def client(self) -> Client:
        """The :class:`maru.Client` underneath."""
        return self._client

    def path(self, key: str, pool: Any = None) -> str:
        """The chunk path of page ``key`` (of pool ``pool``, default the KV pool)."""
        if not isinstance(key, str):
            raise TypeError(f"maru.sglang: keys are strings, not {type(key).__name__}")
        name = "kv" if pool is None else _pool_key(pool)
        directory = self._dirs.get(name)
        if directory is None:
            if name != "kv":
                raise ValueError(f"maru.sglang: pool {name!r} is not registered "
                                 "(register_mem_host_pool_v2)")
            directory = self._dirs.setdefault("kv", self._dir_for(None))
        return f"{directory}/{escape_component(key.encode())}"

    def _pool(self, name: str) -> Any:
        pool = self._pools.get(name)
        if pool is None:
            raise ValueError(f"maru.sglang: no host pool {name!r} registered")
        return pool

    # --- existence --------------------------------------------------------

    def _count(self, paths: Sequence[str]) -> int:
        """How many of ``paths``, from the first, are stored."""
        found = 0
        for part in _batches(paths):
            n = self._client.count_prefix(list(part))
            found += n
            if n < len(part):
                break
        return found

    def _each_exists(self, paths: Sequence[str]) -> List[bool]:
        """Whether each path is stored: a round trip, plus one per miss."""
        out = [False] * len(paths)
        at = 0
        while at < len(paths):
            n = self._count(paths[at:])
            out[at:at + n] = [True] * n
            at += n + 1
        return out

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """How many of ``keys``, from the first, are stored: one round trip
        per ``maru.BATCH_MAX`` keys, no lease taken."""
        try:
            return self._count([self.path(k) for k in keys])
        except OSError as e:  # HiCache's threads must not die of it
            logger.warning("maru.sglang: batch_exists: %s", e)
            return 0

    def exists(self, key: str) -> bool:
        """True if page ``key`` is stored."""
        return self.batch_exists([key]) == 1

    # --- zero-copy batch interface (HiCache's prefetch and backup) -------

    def _pieces(self, pool: Any, keys: Sequence[str], host_indices: Any,
                name: str = "kv") -> List[List[Piece]]:
        """Per page, its (address, length) pieces in the host pool, in the
        order of SGLang's flat data page (``get_data_page(flat=True)``), so
        that a page has the same bytes whichever path wrote it: an MHA
        layer_first pool lists each layer's K then V, a flat page holds
        every layer's K, then every layer's V."""
        if pool is None:
            raise RuntimeError("maru.sglang: register_mem_pool_host() first")
        ptrs, sizes = pool.get_page_buffer_meta(host_indices)
        if isinstance(sizes, int):
            sizes = [sizes] * len(ptrs)
        page_size = getattr(pool, "page_size", None)
        if isinstance(page_size, int) and hasattr(host_indices, "__len__") \
                and len(host_indices) != len(keys) * page_size:
            raise ValueError(f"maru.sglang: {len(host_indices)} host indices for "
                             f"{len(keys)} pages of {page_size}")
        if not keys or len(ptrs) % len(keys) or len(sizes) != len(ptrs):
            raise ValueError(f"maru.sglang: {len(ptrs)} buffer pieces for {len(keys)} pages")
        per = len(ptrs) // len(keys)
        pages = [list(zip(ptrs[i * per:(i + 1) * per], sizes[i * per:(i + 1) * per]))
                 for i in range(len(keys))]
        if (name == "kv" and getattr(pool, "layout", None) == "layer_first" and per % 2 == 0
                and not _field(self.storage_config, "is_mla_model", False)):
            pages = [page[0::2] + page[1::2] for page in pages]
        return pages

    @staticmethod
    def _ops(chunk: Union[Chunk, int], pieces: Sequence[Piece]) -> List[tuple]:
        ops, offset = [], 0
        for where, length in pieces:
            buf = _batchio.raw_buffer(where, length) if isinstance(where, int) else where
            ops.append((chunk, buf, offset))
            offset += length
        return ops

    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        """Copies the stored pages ``keys`` into the host pool at ``host_indices``.

        One ``lookup_prefix`` round trip (leases), one batched copy out of
        the pool straight into the host tensors, then a lease check. True
        for the leading pages loaded; False from the first page missing (or
        evicted since ``batch_exists``) on, which is how HiCache reads it.
        """
        if not keys:
            return []
        paths = [self.path(k) for k in keys]
        return self._read(paths, self._pieces(self.mem_pool_host, keys, host_indices))

    def _read(self, paths: Sequence[str], pieces: Sequence[Sequence[Piece]]) -> List[bool]:
        results = [False] * len(paths)
        for part in _batches(list(range(len(paths)))):
            try:
                n = self._get_pages([paths[i] for i in part], [pieces[i] for i in part])
            except OSError as e:  # a lost server: these pages are not loaded
                logger.warning("maru.sglang: read: %s", e)
                break
            results[part[0]:part[0] + n] = [True] * n
            if n < len(part):
                break
        return results

    def _get_pages(self, paths: Sequence[str], pieces: Sequence[Sequence[Piece]]) -> int:
        # One object for the prefix's chunks (ops name them by index), given
        # back in one call: no Python object per page.
        with self._client.lookup_views(paths) as prefix:
            usable = 0
            for path, size, page in zip(paths, prefix.sizes, pieces):
                if size != sum(length for _, length in page):
                    logger.warning("maru.sglang: %s has %d bytes, the page %d",
                                   path, size, sum(n for _, n in page))
                    break
                usable += 1
            ops = [op for i, page in enumerate(pieces[:usable]) for op in self._ops(i, page)]
            errors = _batchio.read_into_prefix(prefix, ops) if ops else []
            bad = [op[0] for op, err in zip(ops, errors) if err is not None]
            # The leading pages read whole whose leases held (the bytes read
            # were theirs).
            return min([usable, prefix.lease_check()] + bad)

    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        """Stores the host pool's pages at ``host_indices`` as ``keys``.

        ``create_batch`` (one round trip), one batched copy from the host
        tensors into the new chunks, ``seal_batch`` (one round trip). A
        page that is stored already counts as stored (first writer wins:
        the same hash is the same KV); one that finds no room is False.
        Each page's chunk names the previous page as its parent, so
        eviction takes the tails of prefixes first.
        """
        if not keys:
            return []
        pieces = self._pieces(self.mem_pool_host, keys, host_indices)
        return self._write([self.path(k) for k in keys], pieces, self._parents(keys, extra_info))

    def _parents(self, keys: Sequence[str], extra_info: Any,
                 pool: Any = None) -> List[Optional[str]]:
        """Each page's parent path: the page before it (the first page's, the
        last of ``prefix_keys`` when SGLang passes them)."""
        prefix = list(getattr(extra_info, "prefix_keys", None) or [])
        parents = [prefix[-1] if prefix else None] + list(keys[:-1])
        return [self.path(p, pool) if p else None for p in parents]

    def _write(self, paths: Sequence[str], pieces: Sequence[Sequence[Piece]],
               parents: Sequence[Optional[str]]) -> List[bool]:
        results: List[bool] = []
        for part in _batches(list(range(len(paths)))):
            try:
                results += self._set_pages([paths[i] for i in part], [pieces[i] for i in part],
                                           [parents[i] for i in part])
            except OSError as e:  # a lost server: these pages are not stored
                logger.warning("maru.sglang: write: %s", e)
                results += [False] * len(part)
        return results

    def _set_pages(self, paths: Sequence[str], pieces: Sequence[Sequence[Piece]],
                   parents: Sequence[Optional[str]]) -> List[bool]:
        sizes = [sum(n for _, n in page) for page in pieces]
        made = self._client.create_batch(list(paths), sizes, parents=list(parents))
        if (parents and parents[0] is not None and isinstance(made[0], OSError)
                and made[0].errno == errno.ENOENT):
            # The page before this batch is gone (evicted): the chain starts here.
            for chunk in made:
                if isinstance(chunk, Chunk):
                    chunk.release()  # abandoned, never sealed
            made = self._client.create_batch(list(paths), sizes,
                                             parents=[None] + list(parents[1:]))
        results = [isinstance(c, FileExistsError) for c in made]
        fresh = [(i, c) for i, c in enumerate(made) if isinstance(c, Chunk)]
        try:
            ops = [op for i, c in fresh for op in self._ops(c, pieces[i])]
            errors = _batchio.write_from_batch(self._client, ops) if ops else []
            bad = {id(op[0]) for op, err in zip(ops, errors) if err is not None}
            written = [(i, c) for i, c in fresh if id(c) not in bad]
            sealed = self._client.seal_batch([c for _, c in written]) if written else []
            for (i, _), err in zip(written, sealed):
                results[i] = err is None
        finally:
            for _, chunk in fresh:
                chunk.release()  # abandons what was not sealed
        with self._lock:
            self._stored.update(p for p, ok in zip(paths, results) if ok)
        return results

    # --- multi-pool interface (HybridCacheController) ---------------------

    def _transfer_pages(self, transfer: Any) -> Tuple[str, Any, List[str], Any, int]:
        name = _pool_key(transfer.name)
        pool = self._pool(name)
        keys = list(transfer.keys or [])
        page = int(getattr(pool, "page_size", 1) or 1)
        indices = transfer.host_indices
        count = int(indices.numel()) if hasattr(indices, "numel") else \
            len(indices) if indices is not None else 0
        if count != len(keys) * page:
            raise ValueError(f"maru.sglang: pool {name}: {count} host indices for "
                             f"{len(keys)} pages of {page}")
        return name, pool, keys, indices, page

    def batch_exists_v2(self, keys: List[str], pool_transfers: Optional[List[Any]] = None,
                        extra_info: Any = None) -> Any:
        """The usable prefix of ``keys``: the stored KV prefix, cut where a
        pool of ``pool_transfers`` lacks a page it needs (ALL_PAGES: every
        page of the prefix; TRAILING_PAGES: its last ``len(keys)`` pages).
        One round trip per pool, plus one per missing page of a trailing pool."""
        try:
            kv_pages = self._count([self.path(k) for k in keys])
            hits: Dict[Any, int] = {PoolName.KV: kv_pages} if kv_pages else {}
            final = kv_pages
            for transfer in pool_transfers or []:
                if final == 0:
                    break
                name = _pool_key(transfer.name)
                paths = [self.path(k, name) for k in keys[:kv_pages]]
                if transfer.hit_policy == PoolHitPolicy.TRAILING_PAGES:
                    trailing = max(1, len(transfer.keys) if transfer.keys else 1)
                    have = self._each_exists(paths)
                    boundary = next((end for end in range(kv_pages, 0, -1)
                                     if all(have[max(0, end - trailing):end])), 0)
                else:
                    boundary = self._count(paths)
                if boundary:
                    hits[transfer.name] = boundary
                final = min(final, boundary)
        except OSError as e:
            logger.warning("maru.sglang: batch_exists_v2: %s", e)
            return PoolTransferResult(0, {})
        return PoolTransferResult(final, hits)

    def batch_get_v2(self, transfers: List[Any], extra_info: Any = None) -> Dict[Any, List[bool]]:
        """Reads each transfer's pages into its host pool: per pool, True
        for the leading pages read."""
        out: Dict[Any, List[bool]] = {}
        for transfer in transfers:
            name, pool, keys, indices, page = self._transfer_pages(transfer)
            paths = [self.path(k, name) for k in keys]
            if not keys:
                out[transfer.name] = []
            elif hasattr(pool, "get_page_buffer_meta"):
                out[transfer.name] = self._read(paths, self._pieces(pool, keys, indices, name))
            else:  # a pool that has no pointers to give: its flat pages
                dummies = [pool.get_dummy_flat_data_page() for _ in keys]
                done = self._read(paths, [[(d, _nbytes(d))] for d in dummies])
                for i, ok in enumerate(done):
                    if ok:
                        pool.set_from_flat_data_page(indices[i * page], dummies[i])
                out[transfer.name] = done
        return out

    def batch_set_v2(self, transfers: List[Any], extra_info: Any = None) -> Dict[Any, List[bool]]:
        """Writes each transfer's pages from its host pool: per pool, per page."""
        out: Dict[Any, List[bool]] = {}
        for transfer in transfers:
            name, pool, keys, indices, page = self._transfer_pages(transfer)
            if not keys:
                out[transfer.name] = []
                continue
            if hasattr(pool, "get_page_buffer_meta"):
                pieces = self._pieces(pool, keys, indices, name)
            else:
                pieces = [[(d, _nbytes(d))] for d in
                          (_batchio.tensor_bytes(pool.get_data_page(indices[i * page], flat=True))
                           for i in range(len(keys)))]
            out[transfer.name] = self._write([self.path(k, name) for k in keys], pieces,
                                             self._parents(keys, extra_info, name))
        return out

    # --- the legacy interface (no interface_v1) ---------------------------

    def _open_each(self, paths: Sequence[str]) -> List[Optional[Chunk]]:
        """Each path's chunk (leased), or None: a round trip, plus one per miss."""
        out: List[Optional[Chunk]] = [None] * len(paths)
        at = 0
        while at < len(paths):
            got = self._client.lookup_prefix(list(paths[at:at + BATCH_MAX]))
            out[at:at + len(got)] = got
            at += len(got) + (len(got) < min(BATCH_MAX, len(paths) - at))
        return out

    def get(self, key: str, target_location: Any = None,
            target_sizes: Any = None) -> Any:
        """Page ``key``, or None if absent (see :meth:`batch_get`)."""
        return self.batch_get([key], [target_location],
                              None if target_sizes is None else [target_sizes])[0]

    def batch_get(self, keys: List[str], target_locations: Any = None,
                  target_sizes: Any = None) -> List[Any]:
        """Each page, or None for a page absent or of another size.

        A target is a CPU tensor of any dtype (SGLang passes the host pool's
        ``get_dummy_flat_data_page()``; its bytes are filled) or a buffer,
        returned filled; or an address (or list of addresses) with its size
        (or sizes): True. No target: a zero-copy uint8 tensor over the
        chunk, which holds its lease. One ``lookup_prefix`` round trip (one
        more per missing page), one batched copy.
        """
        locations = _listify(target_locations, len(keys), "target_locations")
        sizes = _listify(target_sizes, len(keys), "target_sizes")
        out: List[Any] = [None] * len(keys)
        wanted = [None if where is None else _byte_pieces(_legacy_pieces(None, where, n))
                  for where, n in zip(locations, sizes)]  # checked before any call
        if not keys:
            return out
        paths = [self.path(k) for k in keys]
        try:
            return self._get_each(paths, locations, wanted, out)
        except OSError as e:  # a lost server: these pages are not loaded
            logger.warning("maru.sglang: batch_get: %s", e)
            return [None] * len(keys)

    def _get_each(self, paths: Sequence[str], locations: List[Any],
                  wanted: List[Optional[List[Piece]]], out: List[Any]) -> List[Any]:
        chunks = self._open_each(paths)
        try:
            ops, targets = [], []
            for i, chunk in enumerate(chunks):
                if chunk is None:
                    continue
                if locations[i] is None:
                    out[i] = chunk.torch()
                    continue
                pieces = wanted[i]
                if chunk.size != sum(n for _, n in pieces):
                    logger.warning("maru.sglang: %s has %d bytes, the target %d", chunk.path,
                                   chunk.size, sum(n for _, n in pieces))
                    continue
                ops += self._ops(chunk, pieces)
                targets.append((i, chunk))
            errors = _batchio.read_into_batch(self._client, ops) if ops else []
            bad = {id(op[0]) for op, err in zip(ops, errors) if err is not None}
            for i, chunk in targets:
                if id(chunk) in bad:
                    continue
                try:
                    chunk.lease_check()
                except OSError:
                    continue
                where = locations[i]
                out[i] = True if isinstance(where, (int, list, tuple)) else where
        finally:
            self._client.release_batch([c for c in chunks if c is not None])
        return out

    def set(self, key: str, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        """Stores ``value`` (see :meth:`batch_set`); True if stored (or there)."""
        return self.batch_set([key], None if value is None else [value],
                              None if target_location is None else [target_location],
                              None if target_sizes is None else [target_sizes])

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        """Stores each value: a CPU tensor of any dtype (SGLang passes the
        host pool's flat ``get_data_page()``; its bytes are stored) or a
        buffer, or the bytes at an address (or addresses) of a size (or
        sizes). One ``create_batch``, one batched copy, one ``seal_batch``;
        each page names the one before as parent. True if all are stored
        (a page stored already counts)."""
        values = _listify(values, len(keys), "values")
        locations = _listify(target_locations, len(keys), "target_locations")
        sizes = _listify(target_sizes, len(keys), "target_sizes")
        pieces = [_byte_pieces(_legacy_pieces(v, t, s))
                  for v, t, s in zip(values, locations, sizes)]
        if not keys:
            return True
        return all(self._write([self.path(k) for k in keys], pieces, self._parents(keys, None)))

    # --- retention hints (Maru's own; SGLang does not call this) --------

    def hint_pages(self, keys: Sequence[str], hint: Union[Hint, int]) -> int:
        """``Client.hint_all`` on pages ``keys`` (a session's prefix, in
        order): :attr:`maru.Hint.KEEP` after a turn of an open SGLang session
        is stored, :attr:`maru.Hint.DROP` at its ``close_session``; one round
        trip per ``maru.BATCH_MAX`` keys. Returns how many pages the server
        accepted it for (pages already evicted are not). A bad hint raises OSError(EINVAL);
        a lost server is logged and the call returns 0. Takes effect under
        the server's default eviction policy (docs/integrations.md)."""
        try:
            return self._client.hint_all([self.path(k) for k in keys], hint)
        except OSError as e:
            if e.errno == errno.EINVAL:
                raise
            logger.warning("maru.sglang: hint_pages: %s", e)
            return 0

    # --- lifecycle -------------------------------------------------------

    def clear(self) -> None:
        """Removes the pages this backend stored (Maru has no listing call;
        pages of other instances stay, and eviction reclaims them)."""
        with self._lock:
            paths, self._stored = list(self._stored), set()
        for part in _batches(paths):
            self._client.unlink_batch(list(part))

    def get_stats(self) -> None:
        """No storage metrics (marutop and /metrics show the pool's)."""
        return None

    def close(self) -> None:
        """Closes the connection; pages stay in the pool. Idempotent."""
        self._client.close()
