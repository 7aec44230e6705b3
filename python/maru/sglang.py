"""maru.sglang: Maru as an SGLang HiCache storage backend (the L3 tier).

Follows the ``HiCacheStorage`` interface of SGLang at commit
``001067fffe33427bee0ed2f007fb7551a1d76b44`` (python/sglang/srt/mem_cache/
hicache_storage.py, storage/backend_factory.py) and the host KV pool's
``get_page_buffer_meta`` of its MHA/MLA host pools (memory_pool_host.py):
the zero-copy ``batch_exists`` / ``batch_get_v1`` / ``batch_set_v1`` calls
HiCache's prefetch and backup threads make, plus ``get``/``set``/
``exists``/``clear`` and the deprecated ``batch_get``/``batch_set``.

It is tested here through a harness that makes SGLang's call sequence on a
small transformer (examples/tiny_llm/test_sglang.py), not inside SGLang,
which cannot be installed on the build machines. SGLang is not imported
unless it is installed: then the class derives from its ``HiCacheStorage``
(the factory checks ``issubclass``); without it the class stands alone.

Enable it in SGLang with the dynamic backend::

    --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "maru",
        "module_path": "maru.sglang", "class_name": "MaruHiCacheStorage",
        "maru_server": "unix:///run/maru/maru.sock"}'

Extra-config keys: ``maru_server`` (target, default ``$MARU_SERVER``, else
the default socket), ``maru_namespace`` (directory, default ``sglang``),
``maru_instance_id`` (the client's name in ``maructl sessions``).

One chunk per page: ``/<namespace>/<model>/<shard>/<page hash>``, holding
the page's pieces as the host pool lists them (``get_page_buffer_meta``:
K then V for page_first, each layer's K and V for layer_first), copied
between the pool and the host KV tensors by ONE library call per batch,
without staging. ``<shard>`` names what makes the bytes differ between
workers: the tensor-parallel rank and size (MHA; MLA pages are the same on
every rank, so ranks share them, first writer wins), pipeline and context
parallel ranks, and the host layout (a page_first page's bytes are not a
layer_first page's).
"""

from __future__ import annotations

import errno
import logging
import threading
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Union

from . import _batchio
from ._maru import BATCH_MAX
from .chunk import Chunk
from .client import Client, Hint
from .keys import check_namespace, escape_component

try:  # the factory requires a subclass of SGLang's HiCacheStorage
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _Base
except ImportError:  # SGLang is not installed: a standalone class
    _Base = object  # type: ignore[assignment,misc]

logger = logging.getLogger(__name__)

SGLANG_COMMIT = "001067fffe33427bee0ed2f007fb7551a1d76b44"


def _field(config: Any, name: str, default: Any = None) -> Any:
    """A field of a HiCacheStorageConfig, or of a dict standing for one."""
    if config is None:
        return default
    if isinstance(config, dict):
        return config.get(name, default)
    return getattr(config, name, default)


def shard_name(config: Any, layout: str) -> str:
    """The directory component that keeps workers with different bytes apart."""
    if _field(config, "should_split_heads", False):
        raise NotImplementedError("maru.sglang: should_split_heads is not supported")
    if _field(config, "is_mla_model", False):
        parts = ["mla"]
    else:
        parts = [f"tp{_field(config, 'tp_rank', 0)}of{_field(config, 'tp_size', 1)}"]
    if _field(config, "pp_size", 1) > 1:
        parts.append(f"pp{_field(config, 'pp_rank', 0)}of{_field(config, 'pp_size', 1)}")
    if _field(config, "attn_cp_size", 1) > 1:
        parts.append(f"cp{_field(config, 'attn_cp_rank', 0)}of{_field(config, 'attn_cp_size', 1)}")
    parts.append(layout)
    return "-".join(parts)


def _batches(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), BATCH_MAX):
        yield items[start:start + BATCH_MAX]


class MaruHiCacheStorage(_Base):  # type: ignore[misc,valid-type]
    """SGLang HiCache storage on a Maru pool (see the module notes).

    ``storage_config``: SGLang's ``HiCacheStorageConfig`` (or a dict of its
    fields); ``mem_pool_host``: the host KV pool, if known now (built-in
    backends get it here, dynamic ones get a kwargs dict and the pool later
    through :meth:`register_mem_pool_host`).

    Thread-safe: HiCache's prefetch and backup threads call it at once.
    Failures of a page come back as False (HiCache then recomputes or
    retries), never as torn bytes: a page is readable only once sealed.
    """

    def __init__(self, storage_config: Any = None, mem_pool_host: Any = None) -> None:
        self.storage_config = storage_config
        extra: Dict[str, Any] = dict(_field(storage_config, "extra_config", None) or {})
        self._namespace = check_namespace(extra.get("maru_namespace", "sglang"))
        model = _field(storage_config, "model_name", None) or "model"
        self._model = escape_component(model.replace("/", "-").encode())
        rank = _field(storage_config, "tp_rank", 0)
        instance = extra.get("maru_instance_id") or f"sglang-tp{rank}"
        self._client = Client(extra.get("maru_server"), instance=instance)
        self._dir: Optional[str] = None
        self._stored: Set[str] = set()
        self._lock = threading.Lock()
        self.mem_pool_host: Any = None
        if mem_pool_host is not None and hasattr(mem_pool_host, "get_page_buffer_meta"):
            self.register_mem_pool_host(mem_pool_host)

    # --- setup -----------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Binds the host KV pool: its layout names the shard directory."""
        self.mem_pool_host = mem_pool_host
        layout = getattr(mem_pool_host, "layout", None)
        if layout is None:
            page_first = _field(self.storage_config, "is_page_first_layout", False)
            layout = "page_first" if page_first else "layer_first"
        self._dir = (f"{self._namespace}/{self._model}/"
                     f"{shard_name(self.storage_config, layout)}")

    @property
    def client(self) -> Client:
        """The :class:`maru.Client` underneath."""
        return self._client

    def path(self, key: str) -> str:
        """The chunk path of page ``key``."""
        if self._dir is None:  # get/set before a pool was registered
            self.register_mem_pool_host(None)
        return f"{self._dir}/{escape_component(key.encode())}"

    # --- zero-copy batch interface (HiCache's prefetch and backup) -------

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """How many of ``keys``, from the first, are stored: one round trip
        per ``maru.BATCH_MAX`` keys, no lease taken."""
        found = 0
        for part in _batches(keys):
            try:
                n = self._client.count_prefix([self.path(k) for k in part])
            except OSError as e:  # HiCache's threads must not die of it
                logger.warning("maru.sglang: batch_exists: %s", e)
                break
            found += n
            if n < len(part):
                break
        return found

    def exists(self, key: str) -> bool:
        """True if page ``key`` is stored."""
        return self.batch_exists([key]) == 1

    def _pieces(self, keys: Sequence[str], host_indices: Any) -> List[List[tuple]]:
        """Per page, its (address, length) pieces in the host pool."""
        pool = self.mem_pool_host
        if pool is None:
            raise RuntimeError("maru.sglang: register_mem_pool_host() first")
        ptrs, sizes = pool.get_page_buffer_meta(host_indices)
        if isinstance(sizes, int):
            sizes = [sizes] * len(ptrs)
        if not keys or len(ptrs) % len(keys) or len(sizes) != len(ptrs):
            raise ValueError(f"maru.sglang: {len(ptrs)} buffer pieces for {len(keys)} pages")
        per = len(ptrs) // len(keys)
        return [list(zip(ptrs[i * per:(i + 1) * per], sizes[i * per:(i + 1) * per]))
                for i in range(len(keys))]

    @staticmethod
    def _ops(chunk: Chunk, pieces: Sequence[tuple]) -> List[tuple]:
        ops, offset = [], 0
        for address, length in pieces:
            ops.append((chunk, _batchio.raw_buffer(address, length), offset))
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
        results = [False] * len(keys)
        if not keys:
            return results
        pieces = self._pieces(keys, host_indices)
        for part in _batches(list(range(len(keys)))):
            try:
                n = self._get_pages([keys[i] for i in part], [pieces[i] for i in part])
            except OSError as e:  # a lost server: these pages are not loaded
                logger.warning("maru.sglang: batch_get_v1: %s", e)
                break
            results[part[0]:part[0] + n] = [True] * n
            if n < len(part):
                break
        return results

    def _get_pages(self, keys: Sequence[str], pieces: Sequence[Sequence[tuple]]) -> int:
        chunks = self._client.lookup_prefix([self.path(k) for k in keys])
        try:
            usable = 0
            for chunk, page in zip(chunks, pieces):
                if chunk.size != sum(length for _, length in page):
                    logger.warning("maru.sglang: %s has %d bytes, the page %d",
                                   chunk.path, chunk.size, sum(n for _, n in page))
                    break
                usable += 1
            ops = [op for chunk, page in zip(chunks[:usable], pieces) for op in
                   self._ops(chunk, page)]
            errors = _batchio.read_into_batch(self._client, ops) if ops else []
            bad = {id(op[0]) for op, err in zip(ops, errors) if err is not None}
            loaded = 0
            for chunk in chunks[:usable]:
                if id(chunk) in bad:
                    break
                try:
                    chunk.lease_check()  # the bytes read were this chunk's
                except OSError:
                    break
                loaded += 1
            return loaded
        finally:
            self._client.release_batch(chunks)

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
        pieces = self._pieces(keys, host_indices)
        prefix = list(getattr(extra_info, "prefix_keys", None) or [])
        parents = [prefix[-1] if prefix else None] + list(keys[:-1])
        results: List[bool] = []
        for part in _batches(list(range(len(keys)))):
            try:
                results += self._set_pages([keys[i] for i in part], [pieces[i] for i in part],
                                           [parents[i] for i in part])
            except OSError as e:  # a lost server: these pages are not stored
                logger.warning("maru.sglang: batch_set_v1: %s", e)
                results += [False] * len(part)
        return results

    def _set_pages(self, keys: Sequence[str], pieces: Sequence[Sequence[tuple]],
                   parents: Sequence[Optional[str]]) -> List[bool]:
        paths = [self.path(k) for k in keys]
        made = self._client.create_batch(
            paths, [sum(n for _, n in page) for page in pieces],
            parents=[self.path(p) if p else None for p in parents])
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

    # --- single-key and deprecated interface ----------------------------

    def get(self, key: str, target_location: Any = None,
            target_sizes: Any = None) -> Any:
        """Page ``key``, or None if absent.

        ``target_location`` a tensor (or buffer): the page is copied into it
        and it is returned. An address (or list of addresses) with
        ``target_sizes``: copied there, True returned. None: a zero-copy
        uint8 tensor over the chunk, which holds its lease.
        """
        try:
            chunk = self._client.open(self.path(key))
        except FileNotFoundError:
            return None
        with chunk:
            if target_location is None:
                return chunk.torch()
            if isinstance(target_location, (int, list, tuple)):
                ptrs = target_location if isinstance(target_location, (list, tuple)) \
                    else [target_location]
                sizes = target_sizes if isinstance(target_sizes, (list, tuple)) \
                    else [target_sizes]
                ops = self._ops(chunk, list(zip(ptrs, sizes)))
            else:
                ops = [(chunk, target_location, 0)]
            if any(_batchio.read_into_batch(self._client, ops)):
                return None
            chunk.lease_check()
            return True if isinstance(target_location, (int, list, tuple)) else target_location

    def set(self, key: str, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        """Stores ``value`` (a CPU tensor or buffer), or the bytes at
        ``target_location`` (address or addresses) of ``target_sizes``."""
        if value is not None:
            pieces = [(value, _nbytes(value))]
        elif target_location is not None:
            ptrs = target_location if isinstance(target_location, (list, tuple)) \
                else [target_location]
            sizes = target_sizes if isinstance(target_sizes, (list, tuple)) else [target_sizes]
            pieces = [(_batchio.raw_buffer(p, n), n) for p, n in zip(ptrs, sizes)]
        else:
            raise ValueError("maru.sglang: set() needs a value or a target_location")
        path = self.path(key)
        try:
            chunk = self._client.create(path, sum(n for _, n in pieces))
        except FileExistsError:
            return True
        except OSError as e:
            logger.warning("maru.sglang: set %s: %s", key, e)
            return False
        with chunk:
            ops, offset = [], 0
            for buf, n in pieces:
                ops.append((chunk, buf, offset))
                offset += n
            if any(_batchio.write_from_batch(self._client, ops)):
                return False
            chunk.seal()
        with self._lock:
            self._stored.add(path)
        return True

    def batch_get(self, keys: List[str], target_locations: Any = None,
                  target_sizes: Any = None) -> List[Any]:
        """``get`` of each key (deprecated in SGLang; the v1 calls are batched)."""
        locations = target_locations or [None] * len(keys)
        sizes = target_sizes or [None] * len(keys)
        return [self.get(k, t, s) for k, t, s in zip(keys, locations, sizes)]

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        """``set`` of each key; True if all were stored (deprecated in SGLang)."""
        values = values or [None] * len(keys)
        locations = target_locations or [None] * len(keys)
        sizes = target_sizes or [None] * len(keys)
        return all([self.set(k, v, t, s) for k, v, t, s in zip(keys, values, locations, sizes)])

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
            self._client.unlink_batch(part)

    def get_stats(self) -> None:
        """No storage metrics (marutop and /metrics show the pool's)."""
        return None

    def close(self) -> None:
        """Closes the connection; pages stay in the pool."""
        self._client.close()


def _nbytes(value: Any) -> int:
    if hasattr(value, "element_size"):
        return int(value.numel() * value.element_size())
    return memoryview(value).nbytes
