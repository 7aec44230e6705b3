"""SGLang's HiCache storage interface, for when SGLang is not importable.

Written after SGLang's ``python/sglang/srt/mem_cache/hicache_storage.py``
(sgl-project/sglang) at commit ``001067fffe33427bee0ed2f007fb7551a1d76b44``
(python/contracts/sglang.json is its manifest): the classes a storage
backend, and a harness playing SGLang's controller, need of it, with the
same names, fields, defaults, method signatures, annotations (as text) and
abstract methods as there, and SGLang's default behaviours:

- :class:`HiCacheStorageConfig`, :class:`HiCacheStorageExtraInfo`,
  :class:`PrefetchTimeoutConfig` (dataclasses);
- :class:`PoolName`, :class:`PoolHitPolicy`, :class:`PoolTransfer`,
  :class:`SidecarPoolSpec`, :class:`PoolTransferResult`,
  :func:`count_pool_hits` (the multi-pool "v2" interface);
- :class:`HiCacheStorage`, the abstract base: ``get``, ``batch_get``,
  ``set``, ``batch_set`` and ``exists`` are abstract; ``batch_exists``
  counts leading keys with ``exists``; the v1 and v2 batch calls raise
  NotImplementedError; ``register_mem_pool_host`` and
  ``register_mem_host_pool_v2`` record the host pools; ``clear`` does
  nothing and ``get_stats`` returns None.

SGLang's own ``HiCacheFile`` backend and its ``MetadataCache`` are left
out (nothing of Maru uses them). Neither torch nor SGLang is imported here;
annotations stay text. ``maru.sglang`` subclasses SGLang's real
``HiCacheStorage`` whenever ``sglang`` is importable, these otherwise.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, List, Optional

if TYPE_CHECKING:  # as in SGLang: only for the annotations
    import torch

    HostKVCache = Any

#: The SGLang commit these classes follow.
SGLANG_COMMIT = "001067fffe33427bee0ed2f007fb7551a1d76b44"

#: Most pages the controller passes to one batched storage call.
STORAGE_BATCH_SIZE = 128


@dataclass
class HiCacheStorageConfig:
    """What SGLang's cache controller tells a storage backend about the
    worker that builds it (``HiCacheController._generate_storage_config``)."""

    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool
    enable_storage_metrics: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


@dataclass
class HiCacheStorageExtraInfo:
    """Per-call context: earlier page hashes, and a free-form dict."""

    prefix_keys: Optional[List[str]] = None
    extra_info: Optional[dict] = None


@dataclass(frozen=True)
class PrefetchTimeoutConfig:
    """The prefetch timeout: base + per_ki_token per 1024 tokens, at most max (s)."""

    base: float = 2.0
    per_ki_token: float = 0.1
    max: float = 30.0


class PoolName(str, Enum):
    """The host pools of a hybrid model, by name."""

    KV = "kv"
    MAMBA = "mamba"
    SWA = "swa"
    INDEXER = "indexer"
    DEEPSEEK_V4_C4 = "deepseek_v4_c4"
    DEEPSEEK_V4_C4_INDEXER = "deepseek_v4_c4_indexer"
    DEEPSEEK_V4_C128 = "deepseek_v4_c128"
    DEEPSEEK_V4_C4_STATE = "deepseek_v4_c4_state"
    DEEPSEEK_V4_C4_INDEXER_STATE = "deepseek_v4_c4_indexer_state"
    DEEPSEEK_V4_C128_STATE = "deepseek_v4_c128_state"
    DRAFT = "draft"
    DRAFT_INDEXER = "draft_indexer"
    DRAFT_SWA = "draft_swa"

    def __str__(self) -> str:
        return self.value


class PoolHitPolicy(str, Enum):
    """Which pages of a KV prefix a side pool must hold for the prefix to count:
    all of them, or only the last ``len(transfer.keys)``."""

    ALL_PAGES = "all_pages"
    TRAILING_PAGES = "trailing_pages"


@dataclass
class PoolTransfer:
    """One pool's part of a transfer: host indices and keys between host and
    storage, host and device indices between host and device."""

    name: PoolName
    host_indices: Optional[torch.Tensor] = None
    device_indices: Optional[torch.Tensor] = None
    keys: Optional[List[str]] = None
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES
    nodes_to_load: Optional[List[Any]] = None
    indices_from_pool: Optional[PoolName] = None


@dataclass(frozen=True)
class SidecarPoolSpec:
    """A pool whose transfer indices are those of another pool."""

    pool_name: PoolName
    indices_from_pool: PoolName
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES


@dataclass
class PoolTransferResult:
    """Pages found or moved: of the KV pool, and of each side pool."""

    kv_hit_pages: int
    extra_pool_hit_pages: dict[str, int]

    @classmethod
    def empty(cls) -> PoolTransferResult:
        """No pages."""
        return cls(0, {})

    def update_kv_hit_pages(self, kv_hit_pages: int) -> None:
        """Keeps the larger of the count so far and ``kv_hit_pages``."""
        self.kv_hit_pages = max(self.kv_hit_pages, kv_hit_pages)

    def update_extra_pool_hit_pages(self, results: dict[str, int]) -> None:
        """Records the side pools' counts (a pool's new count replaces its old)."""
        self.extra_pool_hit_pages.update(results)


def count_pool_hits(results: dict[str, List[bool]]) -> dict[str, int]:
    """Per pool, the length of the leading run of True."""
    return {name: (rs.index(False) if False in rs else len(rs))
            for name, rs in results.items()}


class HiCacheStorage(ABC):
    """A key-value store of KV pages under SGLang's host memory (HiCache's L3)."""

    def register_mem_pool_host(self, mem_pool_host: HostKVCache):
        """Records the host KV pool (``self.mem_pool_host``)."""
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool: HostKVCache, host_pool_name):
        """Records one named host pool (``self.registered_pools[name]``)."""
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool

    def batch_exists_v2(
        self,
        keys: List[str],
        pool_transfers: Optional[List[PoolTransfer]] = None,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> PoolTransferResult:
        """The usable prefix of ``keys`` over the KV pool and every pool in
        ``pool_transfers`` (each by its hit policy)."""
        raise NotImplementedError()

    def batch_get_v2(
        self,
        transfers: List[PoolTransfer],
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> dict[str, List[bool]]:
        """Reads each transfer's pages into its host pool; per pool, per page."""
        raise NotImplementedError()

    def batch_set_v2(
        self,
        transfers: List[PoolTransfer],
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> dict[str, List[bool]]:
        """Writes each transfer's pages from its host pool; per pool, per page."""
        raise NotImplementedError()

    def batch_get_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        """Reads pages ``keys`` into the host pool at ``host_indices``; per page."""
        raise NotImplementedError()

    def batch_set_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        """Writes the host pool's pages at ``host_indices`` as ``keys``; per page."""
        raise NotImplementedError()

    @abstractmethod
    def get(
        self,
        key: str,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> torch.Tensor | None:
        """The value of ``key``, or None."""

    @abstractmethod
    def batch_get(
        self,
        keys: List[str],
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> List[torch.Tensor | None] | int:
        """The value of each key, or None for it."""

    @abstractmethod
    def set(
        self,
        key: str,
        value: Optional[Any] = None,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        """Stores ``value`` under ``key``; True on success."""

    @abstractmethod
    def batch_set(
        self,
        keys: List[str],
        values: Optional[Any] = None,
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        """Stores each value under its key; True if all were stored."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """True if ``key`` is stored."""

    def batch_exists(
        self, keys: List[str], extra_info: Optional[HiCacheStorageExtraInfo] = None
    ) -> int:
        """How many of ``keys``, from the first, are stored (``exists`` each)."""
        for i, key in enumerate(keys):
            if not self.exists(key):
                return i
        return len(keys)

    def clear(self) -> None:
        """Removes everything stored (here: nothing)."""

    def get_stats(self):
        """Storage metrics, or None."""
        return None
