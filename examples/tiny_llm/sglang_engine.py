"""SGLang's HiCache side of a storage backend, re-implemented from SGLang's
source on the tiny model (SGLang cannot be installed here; nothing of it is
copied or imported). What each part follows, as file:function@commit
(sgl-project/sglang; docs/integrations.md lists them with the tests):

- ``get_hash_str``: the page hash chain, sha256 over the previous page's
  hash and each token as 4 little-endian bytes, one hex digest per page
  (``mem_cache/hicache_storage.py:get_hash_str`` @ bb424de2; 001067ff
  calls ``mem_cache/utils.py:get_hash_str(tokens, last_hash, page_size=)``,
  one hash per page);
- host pools: ``HostKVCache`` (``mem_cache/pool_host/base.py`` @ 049f8e64:
  the page-aligned size with one page more, ``alloc``/``free``, ``dtype``
  the device pool's store dtype), ``MHATokenToKVPoolHost``
  (``pool_host/mha.py`` @ 0047d999: ``init_kv_buffer`` in layer_first,
  page_first, page_first_direct and page_head, ``get_page_buffer_meta``,
  ``get_data_page``, ``get_dummy_flat_data_page``,
  ``set_from_flat_data_page``) and ``MLATokenToKVPoolHost``
  (``pool_host/mla.py`` @ 01c0ede3: one latent of ``kv_cache_dim`` per
  token and layer; no page_head);
- ``StorageBackendFactory``: ``mem_cache/storage/backend_factory.py:
  StorageBackendFactory.create_backend``, ``._create_dynamic_backend``
  (the required fields, ``backend_class(storage_config, kwargs)``) and
  ``._load_backend_class`` (``importlib.import_module``, ``getattr``, the
  ``issubclass`` check against ``HiCacheStorage``) @ 001067ff;
- ``HiCacheController``: ``managers/cache_controller.py`` @ 001067ff:
  ``attach_storage_backend`` (``_generate_storage_config``, ``backup_skip``
  for MLA ranks other than 0, the factory, ``register_mem_pool_host``, the
  v1 switch on ``extra_config["interface_v1"]``, the four storage threads),
  ``_generate_storage_config`` (``tp_lcm_size`` popped,
  ``should_split_heads``, ``is_page_first_layout``), ``prefetch`` /
  ``prefetch_thread_func`` / ``_storage_hit_query`` (128-page
  ``batch_exists`` batches, stopping at the first short one; the hit count
  all-reduced with MIN over the ranks), ``prefetch_io_aux_func`` /
  ``_page_transfer`` / ``_page_transfer_kv_batch`` (128-page batches, an
  ack each; KV-derived side pools by ``batch_get_v2``),
  ``prefetch_sync_thread_func`` (each ack's tokens all-reduced with MIN),
  ``_page_get_zero_copy`` / ``_generic_page_get``, ``write_storage`` /
  ``backup_thread_func`` / ``_page_backup`` (128-page batches, stop at the
  first failed one) with ``_page_set_zero_copy`` / ``_generic_page_set``,
  ``detach_storage_backend`` (``close()``);
- ``HybridCacheController``: ``mem_cache/hybrid_cache/
  hybrid_cache_controller.py`` @ 00343773: ``attach_storage_backend``
  (``register_mem_host_pool_v2`` for every entry, KV included),
  ``parse_storage_backend_extra_config`` (``prefetch_threshold`` and the
  prefetch keys popped from the extra config), ``_storage_hit_query`` (one
  ``batch_exists_v2`` with every page), ``_page_backup`` (``batch_set_v2``
  of the side pools ``should_backup`` keeps, then the KV backup),
  ``backup_thread_func`` (no MLA skip of the whole operation),
  ``_resolve_sidecar_kv_derived_pool_transfers``;
- the scheduler's side of a prefetch (the tree cache draining
  ``prefetch_hit_queue``: revoke below ``prefetch_threshold``, else
  ``host_indices = mem_pool_host.alloc(storage_hit_count)`` and onto
  ``prefetch_buffer``; waiting for the last ack, the ``wait_complete``
  policy): ``mem_cache/hiradix_cache.py`` was not read at 001067ff; this
  follows SGLang's own tests of that era, which drive the controller so.

Ranks: SGLang runs each tensor-parallel rank in a process of its own with
gloo groups between them; here the ranks of one instance are threads of
one process (each with its own backend, client, host pool and the four
controller threads), and the gloo all-reduce is :class:`RankGroup`. A rank
holds its heads' KV (MHA) or the whole latent (MLA); the model itself runs
once per instance, whole, and each rank's host pool takes its part.
"""
from __future__ import annotations

import copy
import hashlib
import importlib
import logging
import threading
from dataclasses import dataclass
from queue import Empty, Queue
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

import maru.sglang as ms
from model import Config, KVCache, TinyLM, block_in_dtype, linear_in_dtype

logger = logging.getLogger(__name__)

STORAGE_BATCH_SIZE = ms.STORAGE_BATCH_SIZE
MHA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


# --- the model in a dtype -----------------------------------------------------


def build_model(dtype: torch.dtype, cfg: Config = Config()) -> TinyLM:
    """The tiny model (model.py's weights, same seed), computing in ``dtype``:
    bf16 runs its projections in oneDNN's bf16 kernels, attention in bf16."""
    model = TinyLM(cfg)
    if dtype == torch.float32:
        return model
    for block in model.blocks:
        block_in_dtype(block, dtype)
    model.head = linear_in_dtype(model.head, dtype)
    model.tok, model.pos, model.ln = model.tok.to(dtype), model.pos.to(dtype), model.ln.to(dtype)
    return model


def new_cache(model: TinyLM, capacity: int, dtype: torch.dtype) -> KVCache:
    """A KV cache (the device pool of one request) in ``dtype``."""
    cache = model.new_cache(capacity)
    if dtype != torch.float32:
        cache.own_k = [t.to(dtype) for t in cache.own_k]
        cache.own_v = [t.to(dtype) for t in cache.own_v]
    return cache


# --- page hashes ----------------------------------------------------------------


def get_hash_str(token_ids: Sequence[int], prior_hash: Optional[str] = None,
                 page_size: int = 1) -> List[str]:
    """One hash per full page of ``token_ids``, each chained to the one before."""
    out: List[str] = []
    for start in range(0, len(token_ids) - page_size + 1, page_size):
        h = hashlib.sha256()
        if prior_hash:
            h.update(bytes.fromhex(prior_hash))
        for t in token_ids[start:start + page_size]:
            h.update(int(t).to_bytes(4, byteorder="little", signed=False))
        prior_hash = h.hexdigest()
        out.append(prior_hash)
    return out


# --- host pools -----------------------------------------------------------------


class HostKVCache:
    """What every SGLang host pool has (pool_host/base.py)."""

    def __init__(self, size: int, page_size: int, layout: str, dtype: torch.dtype):
        self.page_size, self.layout, self.dtype = page_size, layout, dtype
        self.page_num = size // page_size + 1
        self.size = self.page_num * page_size
        self.device, self.pin_memory = "cpu", False
        self.size_per_token = self.get_size_per_token()
        self.kv_buffer = self.init_kv_buffer()
        self.free_slots = torch.arange(self.size, dtype=torch.int64)
        self.lock = threading.RLock()

    def alloc(self, need_size: int) -> Optional[torch.Tensor]:
        assert need_size % self.page_size == 0
        with self.lock:
            if need_size > len(self.free_slots):
                return None
            got, self.free_slots = self.free_slots[:need_size], self.free_slots[need_size:]
            return got

    def free(self, indices: torch.Tensor) -> int:
        with self.lock:
            self.free_slots = torch.cat([self.free_slots, indices])
        return len(indices)

    def available_size(self) -> int:
        return len(self.free_slots)

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    def get_size_per_token(self) -> int:
        raise NotImplementedError

    def init_kv_buffer(self) -> torch.Tensor:
        raise NotImplementedError


class MHATokenToKVPoolHost(HostKVCache):
    """SGLang's MHA host pool of one rank: its ``head_num`` heads."""

    def __init__(self, size: int, page_size: int, layout: str, dtype: torch.dtype,
                 layer_num: int, head_num: int, head_dim: int):
        if layout not in MHA_LAYOUTS:
            raise ValueError(f"Unsupported layout: {layout}")
        self.layer_num, self.head_num, self.head_dim = layer_num, head_num, head_dim
        super().__init__(size, page_size, layout, dtype)

    def get_size_per_token(self) -> int:
        return self.head_dim * self.head_num * self.layer_num * self.itemsize * 2

    def get_ksize_per_token(self) -> int:
        return self.get_size_per_token() // 2

    def init_kv_buffer(self) -> torch.Tensor:
        L, H, D, P = self.layer_num, self.head_num, self.head_dim, self.page_size
        dims = {"layer_first": (2, L, self.size, H, D),
                "page_first": (2, self.size, L, H, D),
                "page_first_direct": (2, self.page_num, L, P, H, D),
                "page_head": (2, self.page_num, H, P, L, D)}[self.layout]
        return torch.zeros(dims, dtype=self.dtype)

    def get_page_buffer_meta(self, indices: torch.Tensor) -> Tuple[List[int], List[int]]:
        assert len(indices) % self.page_size == 0
        item, L, H, D = self.itemsize, self.layer_num, self.head_num, self.head_dim
        base = self.kv_buffer.data_ptr()
        v_offset = L * self.size * H * D * item
        ptrs: List[int] = []
        if self.layout == "layer_first":
            for i in range(0, len(indices), self.page_size):
                for layer in range(L):
                    k = base + int(indices[i]) * H * D * item + layer * self.size * H * D * item
                    ptrs += [k, k + v_offset]
            return ptrs, [item * self.page_size * H * D] * len(ptrs)
        for i in range(0, len(indices), self.page_size):
            k = base + int(indices[i]) * L * H * D * item
            ptrs += [k, k + v_offset]
        return ptrs, [L * item * self.page_size * H * D] * len(ptrs)

    def _page(self, index: Any) -> torch.Tensor:
        i, P = int(index), self.page_size
        if self.layout == "layer_first":
            return self.kv_buffer[:, :, i:i + P]
        if self.layout == "page_first":
            return self.kv_buffer[:, i:i + P]
        return self.kv_buffer[:, i // P:i // P + 1]

    def get_data_page(self, index: Any, flat: bool = True) -> torch.Tensor:
        page = self._page(index)
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        return torch.zeros((2, self.layer_num, self.page_size, self.head_num, self.head_dim),
                           dtype=self.dtype).flatten()

    def set_from_flat_data_page(self, index: Any, data_page: torch.Tensor) -> None:
        page = self._page(index)
        page.copy_(data_page.reshape(page.shape))

    # The device side (the tiny model's cache stands for SGLang's device pool).
    def _tokens(self, which: int, layer: int, slots: torch.Tensor):
        """Index of tokens ``slots`` of K (0) or V (1) of ``layer``: [n, heads, dim]."""
        P = self.page_size
        if self.layout == "layer_first":
            return (which, layer, slots)
        if self.layout == "page_first":
            return (which, slots, layer)
        if self.layout == "page_first_direct":
            return (which, slots // P, layer, slots % P)
        return (which, slots // P, slice(None), slots % P, layer)

    def write_tokens(self, layer: int, slots: torch.Tensor, k: torch.Tensor,
                     v: torch.Tensor) -> None:
        """Device -> host: ``k``/``v`` [tokens, heads, dim] of this rank's heads."""
        self.kv_buffer[self._tokens(0, layer, slots)] = k
        self.kv_buffer[self._tokens(1, layer, slots)] = v

    def read_tokens(self, layer: int, slots: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Host -> device: K and V [tokens, heads, dim] of ``slots``."""
        return self.kv_buffer[self._tokens(0, layer, slots)], \
            self.kv_buffer[self._tokens(1, layer, slots)]


class MLATokenToKVPoolHost(HostKVCache):
    """SGLang's MLA host pool: one latent of ``kv_cache_dim`` per token and
    layer, the same on every rank (here: every head's K, then V)."""

    def __init__(self, size: int, page_size: int, layout: str, dtype: torch.dtype,
                 layer_num: int, kv_cache_dim: int):
        if layout not in MLA_LAYOUTS:
            raise ValueError(f"Unsupported layout: {layout}")
        self.layer_num, self.kv_cache_dim = layer_num, kv_cache_dim
        super().__init__(size, page_size, layout, dtype)

    def get_size_per_token(self) -> int:
        return self.kv_cache_dim * self.itemsize * self.layer_num

    def get_ksize_per_token(self) -> int:
        return self.get_size_per_token()

    def init_kv_buffer(self) -> torch.Tensor:
        L, C, P = self.layer_num, self.kv_cache_dim, self.page_size
        dims = {"layer_first": (L, self.size, 1, C), "page_first": (self.size, L, 1, C),
                "page_first_direct": (self.page_num, L, P, 1, C)}[self.layout]
        return torch.zeros(dims, dtype=self.dtype)

    def get_page_buffer_meta(self, indices: torch.Tensor) -> Tuple[List[int], List[int]]:
        assert len(indices) % self.page_size == 0
        item, L, C = self.itemsize, self.layer_num, self.kv_cache_dim
        base = self.kv_buffer.data_ptr()
        ptrs: List[int] = []
        if self.layout == "layer_first":
            for i in range(0, len(indices), self.page_size):
                for layer in range(L):
                    ptrs.append(base + int(indices[i]) * C * item + layer * self.size * C * item)
            return ptrs, [item * self.page_size * C] * len(ptrs)
        for i in range(0, len(indices), self.page_size):
            ptrs.append(base + int(indices[i]) * L * C * item)
        return ptrs, [L * item * self.page_size * C] * len(ptrs)

    def _page(self, index: Any) -> torch.Tensor:
        i, P = int(index), self.page_size
        if self.layout == "layer_first":
            return self.kv_buffer[:, i:i + P]
        if self.layout == "page_first":
            return self.kv_buffer[i:i + P]
        return self.kv_buffer[i // P:i // P + 1]

    def get_data_page(self, index: Any, flat: bool = True) -> torch.Tensor:
        page = self._page(index)
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        return torch.zeros((self.layer_num, self.page_size, 1, self.kv_cache_dim),
                           dtype=self.dtype).flatten()

    def set_from_flat_data_page(self, index: Any, data_page: torch.Tensor) -> None:
        page = self._page(index)
        page.copy_(data_page.reshape(page.shape))

    def _tokens(self, layer: int, slots: torch.Tensor):
        P = self.page_size
        if self.layout == "layer_first":
            return (layer, slots, 0)
        if self.layout == "page_first":
            return (slots, layer, 0)
        return (slots // P, layer, slots % P, 0)

    def write_latent(self, layer: int, slots: torch.Tensor, latent: torch.Tensor) -> None:
        self.kv_buffer[self._tokens(layer, slots)] = latent

    def read_latent(self, layer: int, slots: torch.Tensor) -> torch.Tensor:
        return self.kv_buffer[self._tokens(layer, slots)]


class IndexerPoolHost(MLATokenToKVPoolHost):
    """A KV-derived side pool of a hybrid model (a DSA indexer's keys): one
    vector per token, here the mean of layer 0's K heads."""

    def __init__(self, size: int, page_size: int, layout: str, dtype: torch.dtype, dim: int):
        super().__init__(size, page_size, layout, dtype, 1, dim)


# --- the factory and the controller --------------------------------------------


class StorageBackendFactory:
    """The dynamic path of SGLang's StorageBackendFactory."""

    @staticmethod
    def _load_backend_class(module_path: str, class_name: str, backend_name: str) -> type:
        try:
            module = importlib.import_module(module_path)
            backend_class = getattr(module, class_name)
            if not issubclass(backend_class, ms.HiCacheStorage):
                raise TypeError(f"Backend class {class_name} must inherit from HiCacheStorage")
            return backend_class
        except ImportError as e:
            raise ImportError(f"Failed to import backend '{backend_name}' from "
                              f"'{module_path}': {e}") from e
        except AttributeError as e:
            raise AttributeError(f"Class '{class_name}' not found in module "
                                 f"'{module_path}': {e}") from e

    @classmethod
    def create_backend(cls, backend_name: str, storage_config: Any, mem_pool_host: Any,
                       **kwargs: Any) -> Any:
        if backend_name == "dynamic" and storage_config.extra_config is not None:
            return cls._create_dynamic_backend(storage_config.extra_config, storage_config,
                                               mem_pool_host, **kwargs)
        raise ValueError(f"Unknown storage backend '{backend_name}'. Registered backends: []. ")

    @classmethod
    def _create_dynamic_backend(cls, backend_config: Dict[str, Any], storage_config: Any,
                                mem_pool_host: Any, **kwargs: Any) -> Any:
        for name in ("backend_name", "module_path", "class_name"):
            if name not in backend_config:
                raise ValueError(f"Missing required field '{name}' in backend config for "
                                 "'dynamic' backend")
        backend_class = cls._load_backend_class(backend_config["module_path"],
                                                backend_config["class_name"],
                                                backend_config["backend_name"])
        return backend_class(storage_config, kwargs)


class RankGroup:
    """The gloo all-reduce (MIN) between the ranks of one instance."""

    def __init__(self, size: int):
        self.size = size
        self._values: Dict[str, List[int]] = {}
        self._barriers: Dict[str, threading.Barrier] = {}
        self._lock = threading.Lock()
        self._results: Dict[str, int] = {}

    def all_reduce_min(self, tag: str, rank: int, value: int) -> int:
        if self.size == 1:
            return value
        with self._lock:
            barrier = self._barriers.setdefault(tag, threading.Barrier(self.size))
            self._values.setdefault(tag, [0] * self.size)[rank] = value
        barrier.wait(timeout=120)
        with self._lock:
            result = min(self._values[tag])
        barrier.wait(timeout=120)
        if rank == 0:
            with self._lock:
                self._values.pop(tag, None)
                self._barriers.pop(tag, None)
        return result


class StorageOperation:
    counter = 0

    def __init__(self, host_indices: Optional[torch.Tensor], token_ids: List[int],
                 last_hash: Optional[str] = None, hash_value: Optional[List[str]] = None,
                 prefix_keys: Optional[List[str]] = None,
                 pool_transfers: Optional[List[Any]] = None):
        self.host_indices, self.token_ids, self.last_hash = host_indices, token_ids, last_hash
        self.completed_tokens = 0
        self.hash_value = hash_value if hash_value is not None else []
        self.prefix_keys = prefix_keys
        self.pool_transfers = pool_transfers
        self.id = StorageOperation.counter
        StorageOperation.counter += 1


class PrefetchOperation(StorageOperation):
    def __init__(self, request_id: str, token_ids: List[int], last_hash: Optional[str] = None,
                 prefix_keys: Optional[List[str]] = None,
                 pool_transfers: Optional[List[Any]] = None):
        self.request_id = request_id
        self._lock = threading.Lock()
        self._terminated = False
        self.storage_hit_count = 0
        super().__init__(None, token_ids, last_hash, prefix_keys=prefix_keys,
                         pool_transfers=pool_transfers)

    def mark_terminate(self) -> None:
        with self._lock:
            self._terminated = True

    def is_terminated(self) -> bool:
        with self._lock:
            return self._terminated


@dataclass
class PrefetchAck:
    rid: str
    operation: PrefetchOperation
    completed_tokens: Optional[int] = None
    pool_hits: Optional[dict] = None
    completed_req: Optional[bool] = None


class Hooks:
    """Test seams around the controller's page functions (not SGLang's): a
    count of calls, and a meeting point where the first read and the first
    write of the storage threads wait for each other (proof that the backup
    and the prefetch threads are inside the backend at once)."""

    def __init__(self) -> None:
        self.calls: Dict[str, int] = {}
        self.rendezvous: Optional[threading.Barrier] = None
        self.pending: set = set()
        self.met: Optional[bool] = None
        self.lock = threading.Lock()

    def meet(self) -> None:
        with self.lock:
            self.rendezvous, self.pending, self.met = threading.Barrier(2), {"get", "set"}, None

    def __call__(self, what: str) -> None:
        with self.lock:
            self.calls[what] = self.calls.get(what, 0) + 1
            barrier = self.rendezvous if what in self.pending else None
            self.pending.discard(what)
        if barrier is not None:
            try:
                barrier.wait(timeout=60)
                met = True
            except threading.BrokenBarrierError:
                met = False
            with self.lock:
                self.met = met if self.met is None else self.met and met


class HiCacheController:
    """One rank's storage side of SGLang's cache controller."""

    def __init__(self, mem_pool_host: HostKVCache, page_size: int, tp_rank: int, tp_size: int,
                 is_mla: bool, group: RankGroup, storage_backend: str, model_name: str,
                 extra_config: dict, prefetch_threshold: int = 256):
        self.mem_pool_host = self.storage_host_pool = mem_pool_host
        self.page_size, self.tp_rank, self.tp_size, self.is_mla = page_size, tp_rank, tp_size, \
            is_mla
        self.group = group
        self.hooks = Hooks()
        self._ack_seq: Dict[str, int] = {}
        self.storage_stop_event = threading.Event()
        self.attach_storage_backend(storage_backend, prefetch_threshold, model_name,
                                    extra_config)

    def _generate_storage_config(self, model_name: Optional[str], extra: Optional[dict]) -> Any:
        extra = {} if extra is None else extra
        tp_lcm_size = extra.pop("tp_lcm_size", None)
        should_split_heads = False
        if tp_lcm_size:
            assert tp_lcm_size % self.tp_size == 0, "tp_lcm_size must be divisible by tp_size."
            should_split_heads = (not self.is_mla and self.mem_pool_host.layout == "page_head"
                                  and tp_lcm_size > self.tp_size)
        return ms.HiCacheStorageConfig(
            tp_rank=self.tp_rank, tp_size=self.tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
            attn_cp_size=1, is_mla_model=self.is_mla, enable_storage_metrics=False,
            is_page_first_layout=self.mem_pool_host.layout == "page_first",
            model_name=model_name, dp_rank=0, dp_size=1, tp_lcm_size=tp_lcm_size,
            should_split_heads=should_split_heads, extra_config=extra)

    def attach_storage_backend(self, storage_backend: str, prefetch_threshold: int,
                               model_name: Optional[str], extra_config: Optional[dict]) -> None:
        self.storage_backend_type = storage_backend
        self.get_hash_str = get_hash_str
        self.storage_config = self._generate_storage_config(model_name, extra_config)
        self.backup_skip = self.storage_config.is_mla_model and self.storage_config.tp_rank != 0
        self.storage_backend = StorageBackendFactory.create_backend(
            storage_backend, self.storage_config, self.storage_host_pool)
        try:
            self.storage_backend.register_mem_pool_host(self.storage_host_pool)
            self.enable_storage = True
            self.prefetch_threshold = max(prefetch_threshold, self.page_size)
            self.page_get_func = self._generic_page_get
            self.page_set_func = self._generic_page_set
            if self.storage_backend_type == "dynamic" and bool(
                    self.storage_config.extra_config.get("interface_v1", 0)):
                self.page_get_func = self._page_get_zero_copy
                self.page_set_func = self._page_set_zero_copy
            self.storage_stop_event.clear()
            self._start_storage_threads()
        except Exception:
            if hasattr(self.storage_backend, "close"):
                self.storage_backend.close()
            raise

    @property
    def zero_copy(self) -> bool:
        """True when the v1 calls are in use."""
        return self.page_get_func == self._page_get_zero_copy

    def _start_storage_threads(self) -> None:
        self.prefetch_queue: Queue = Queue()
        self.backup_queue: Queue = Queue()
        self.prefetch_buffer: Queue = Queue()
        self.prefetch_sync_queue: Queue = Queue()
        self.prefetch_hit_queue: Queue = Queue()
        self.ack_prefetch_queue: Queue = Queue()
        self.ack_backup_queue: Queue = Queue()
        self.threads = [threading.Thread(target=f, daemon=True, name=f"{f.__name__}-{self.tp_rank}")
                        for f in (self.prefetch_thread_func, self.prefetch_io_aux_func,
                                  self.prefetch_sync_thread_func, self.backup_thread_func)]
        for t in self.threads:
            t.start()

    def detach_storage_backend(self) -> None:
        self.storage_stop_event.set()
        for q in (self.prefetch_queue, self.backup_queue, self.prefetch_buffer,
                  self.prefetch_sync_queue):
            q.put_nowait(None)
        for t in self.threads:
            t.join(timeout=10)
        if any(t.is_alive() for t in self.threads):
            raise RuntimeError("Failed to stop HiCache storage threads cleanly.")
        if hasattr(self.storage_backend, "close"):
            self.storage_backend.close()
        self.enable_storage = False

    def _hook(self, what: str) -> None:
        self.hooks(what)

    # -- page functions --
    def _page_get_zero_copy(self, operation, hash_values, host_indices, extra_info=None) -> int:
        self._hook("get")
        results = self.storage_backend.batch_get_v1(hash_values, host_indices, extra_info)
        inc = 0
        for i in range(len(hash_values)):
            if not results[i]:
                logger.warning("Prefetch operation %s failed to retrieve page %s.",
                               operation.request_id, hash_values[i])
                break
            inc += 1
        return inc

    def _generic_page_get(self, operation, hash_values, host_indices, extra_info=None) -> int:
        self._hook("get")
        dummy_page_dst = [self.storage_host_pool.get_dummy_flat_data_page() for _ in hash_values]
        page_data = self.storage_backend.batch_get(hash_values, dummy_page_dst)
        if page_data is None:
            return 0
        count = 0
        for i in range(len(hash_values)):
            if page_data[i] is None or operation.is_terminated():
                break
            self.storage_host_pool.set_from_flat_data_page(host_indices[i * self.page_size],
                                                           page_data[i])
            count += 1
        return count

    def _generic_page_set(self, hash_values, host_indices, extra_info=None) -> bool:
        self._hook("set")
        data = [self.storage_host_pool.get_data_page(host_indices[i * self.page_size])
                for i in range(len(hash_values))]
        return self.storage_backend.batch_set(hash_values, data)

    def _page_set_zero_copy(self, hash_values, host_indices, extra_info=None) -> bool:
        self._hook("set")
        return all(self.storage_backend.batch_set_v1(hash_values, host_indices, extra_info))

    # -- prefetch --
    def prefetch(self, request_id: str, new_input_tokens: List[int],
                 last_hash: Optional[str] = None, prefix_keys: Optional[List[str]] = None,
                 extra_pools: Optional[List[Any]] = None) -> PrefetchOperation:
        operation = PrefetchOperation(request_id, new_input_tokens, last_hash, prefix_keys,
                                      pool_transfers=extra_pools)
        self.prefetch_queue.put(operation)
        return operation

    def _storage_hit_query(self, operation: PrefetchOperation) -> Tuple[List[str], int]:
        prefix_keys = operation.prefix_keys.copy() if operation.prefix_keys else None
        storage_query_count, hash_value = 0, []
        page_hashes = self.get_hash_str(operation.token_ids, operation.last_hash,
                                        page_size=self.page_size)
        for start in range(0, len(page_hashes), STORAGE_BATCH_SIZE):
            batch_hashes = page_hashes[start:start + STORAGE_BATCH_SIZE]
            extra_info = ms.HiCacheStorageExtraInfo(prefix_keys=prefix_keys, extra_info=None)
            hit = self.storage_backend.batch_exists(batch_hashes, extra_info)
            hash_value.extend(batch_hashes[:hit])
            storage_query_count += hit * self.page_size
            if hit < len(batch_hashes):
                break
            if prefix_keys:
                prefix_keys += batch_hashes
        return hash_value, storage_query_count

    def prefetch_thread_func(self) -> None:
        while not self.storage_stop_event.is_set() or not self.prefetch_queue.empty():
            try:
                operation = self.prefetch_queue.get(block=True, timeout=1)
            except Empty:
                continue
            if operation is None:
                continue
            if operation.is_terminated():
                hash_value, hits = [], 0
            else:
                hash_value, hits = self._storage_hit_query(operation)
            hits = self.group.all_reduce_min(f"hits-{operation.request_id}", self.tp_rank, hits)
            operation.hash_value = hash_value[:hits // self.page_size]
            operation.storage_hit_count = hits
            self.prefetch_hit_queue.put(operation)

    def _page_transfer(self, operation: PrefetchOperation) -> int:
        prefix_keys = operation.prefix_keys
        kv_derived = [t for t in operation.pool_transfers or []
                      if t.indices_from_pool == ms.PoolName.KV]
        all_success, completed_pages = True, 0
        for i in range(0, len(operation.hash_value), STORAGE_BATCH_SIZE):
            if all_success and operation.is_terminated():
                all_success = False
            if all_success:
                batch_hashes = operation.hash_value[i:i + STORAGE_BATCH_SIZE]
                batch_host_indices = operation.host_indices[
                    i * self.page_size:(i + len(batch_hashes)) * self.page_size]
                extra_info = ms.HiCacheStorageExtraInfo(prefix_keys=prefix_keys, extra_info=None)
                hit_pages = self._page_transfer_kv_batch(operation, batch_hashes,
                                                         batch_host_indices, extra_info,
                                                         kv_derived)
                if hit_pages != len(batch_hashes):
                    all_success = False
                if prefix_keys:
                    prefix_keys += batch_hashes
                completed_pages += hit_pages
            self.prefetch_sync_queue.put(PrefetchAck(
                rid=operation.request_id, operation=operation,
                completed_tokens=completed_pages * self.page_size))
        return completed_pages

    def _page_transfer_kv_batch(self, operation, batch_hashes, batch_host_indices, extra_info,
                                kv_derived) -> int:
        kv_hits = self.page_get_func(operation, batch_hashes, batch_host_indices, extra_info)
        sidecar_hits: Dict[str, int] = {}
        if kv_derived:
            current = [ms.PoolTransfer(name=t.name, host_indices=batch_host_indices,
                                       keys=batch_hashes) for t in kv_derived]
            sidecar_hits = ms.count_pool_hits(self.storage_backend.batch_get_v2(current))
        return min([kv_hits, *sidecar_hits.values()])

    def prefetch_io_aux_func(self) -> None:
        while not self.storage_stop_event.is_set():
            try:
                operation = self.prefetch_buffer.get(block=True, timeout=1)
            except Empty:
                continue
            if operation is None:
                continue
            self._page_transfer(operation)
            self.prefetch_sync_queue.put(PrefetchAck(rid=operation.request_id,
                                                     operation=operation, completed_req=True))

    def prefetch_sync_thread_func(self) -> None:
        while not self.storage_stop_event.is_set():
            try:
                ack = self.prefetch_sync_queue.get(block=True, timeout=1)
            except Empty:
                continue
            if ack is None:
                continue
            if ack.completed_tokens is not None:  # the minimal prefix over the ranks
                seq = self._ack_seq.get(ack.rid, 0)
                self._ack_seq[ack.rid] = seq + 1
                ack.completed_tokens = self.group.all_reduce_min(
                    f"ack-{ack.rid}-{seq}", self.tp_rank, ack.completed_tokens)
            self.ack_prefetch_queue.put(ack)

    # -- backup --
    def write_storage(self, host_indices: torch.Tensor, token_ids: List[int],
                      hash_value: Optional[List[str]] = None,
                      prefix_keys: Optional[List[str]] = None,
                      extra_pools: Optional[List[Any]] = None) -> int:
        operation = StorageOperation(host_indices, token_ids, hash_value=hash_value,
                                     prefix_keys=prefix_keys, pool_transfers=extra_pools)
        self.backup_queue.put(operation)
        return operation.id

    def _page_backup(self, operation: StorageOperation) -> None:
        prefix_keys = operation.prefix_keys
        for i in range(0, len(operation.hash_value), STORAGE_BATCH_SIZE):
            batch_hashes = operation.hash_value[i:i + STORAGE_BATCH_SIZE]
            batch_host_indices = operation.host_indices[
                i * self.page_size:(i + len(batch_hashes)) * self.page_size]
            extra_info = ms.HiCacheStorageExtraInfo(prefix_keys=prefix_keys)
            if not self.page_set_func(batch_hashes, batch_host_indices, extra_info):
                logger.warning("Write page to storage: %d pages failed.", len(batch_hashes))
                break
            if prefix_keys:
                prefix_keys += batch_hashes
            operation.completed_tokens += self.page_size * len(batch_hashes)

    def backup_thread_func(self) -> None:
        while not self.storage_stop_event.is_set():
            try:
                operation = self.backup_queue.get(block=True, timeout=1)
            except Empty:
                continue
            if operation is None:
                continue
            if not self.backup_skip:
                self._page_backup(operation)
            self.ack_backup_queue.put(operation)


class HybridCacheController(HiCacheController):
    """HiCacheController with the side pools of a hybrid model (v2 calls)."""

    def __init__(self, *args: Any, host_pools: Sequence[Tuple[Any, Any]] = (), **kw: Any):
        self._host_pools = list(host_pools)
        super().__init__(*args, **kw)

    def attach_storage_backend(self, *args: Any) -> None:
        super().attach_storage_backend(*args)
        for name, pool in self._host_pools:
            self.storage_backend.register_mem_host_pool_v2(pool, name)

    def _storage_hit_query(self, operation: PrefetchOperation) -> Tuple[List[str], int]:
        hash_value = self.get_hash_str(operation.token_ids, operation.last_hash,
                                       page_size=self.page_size)
        extra_info = ms.HiCacheStorageExtraInfo(
            prefix_keys=operation.prefix_keys.copy() if operation.prefix_keys else None)
        if operation.pool_transfers:
            result = self.storage_backend.batch_exists_v2(hash_value, operation.pool_transfers,
                                                          extra_info)
        else:
            result = ms.PoolTransferResult(self.storage_backend.batch_exists(hash_value,
                                                                             extra_info), {})
        return hash_value[:result.kv_hit_pages], result.kv_hit_pages * self.page_size

    def should_backup(self, transfer: Any) -> bool:
        return not self.backup_skip or transfer.name == ms.PoolName.MAMBA

    def _page_backup(self, operation: StorageOperation) -> None:
        backup = [t for t in operation.pool_transfers or [] if self.should_backup(t)]
        if backup:
            for t in operation.pool_transfers:
                if t.indices_from_pool == ms.PoolName.KV:
                    t.host_indices = operation.host_indices
                    if t.keys is None:
                        t.keys = operation.hash_value
            operation.sidecar_results = self.storage_backend.batch_set_v2(backup)
        if not self.backup_skip:
            super()._page_backup(operation)

    def backup_thread_func(self) -> None:
        while not self.storage_stop_event.is_set():
            try:
                operation = self.backup_queue.get(block=True, timeout=1)
            except Empty:
                continue
            if operation is None:
                continue
            self._page_backup(operation)
            self.ack_backup_queue.put(operation)


# --- an instance: the model, its ranks' host pools and controllers ---------------


@dataclass
class EngineConfig:
    """The server arguments of one instance that HiCache reads."""

    extra_config: dict  # --hicache-storage-backend-extra-config
    page_size: int = 16  # --page-size
    layout: str = "page_first"  # --hicache-mem-layout
    dtype: str = "float32"  # the model's (and so the host pool's) dtype
    mla: bool = False  # an MLA model: one latent per token, the same on every rank
    tp_size: int = 1  # --tp-size
    hybrid: bool = False  # a hybrid model: an indexer side pool (HybridCacheController)
    host_tokens: int = 1 << 13  # the host pool's size, in tokens
    storage_backend: str = "dynamic"  # --hicache-storage-backend


@dataclass
class Served:
    hits: int  # pages reused
    prefill_logits: torch.Tensor
    decode_logits: torch.Tensor
    tokens: List[int]
    kv_digest: str = ""  # the reused pages' host-pool bytes, every rank
    indexer_digest: str = ""  # the same of the indexer side pool


def parse_storage_backend_extra_config(extra: dict) -> Tuple[dict, int]:
    """The tree cache's part: pops the prefetch keys (checked as SGLang checks
    them); returns the rest and the prefetch threshold."""
    extra = dict(extra)
    threshold = extra.pop("prefetch_threshold", 256)
    extra.pop("prefetch_timeout_base", 1)
    extra.pop("prefetch_timeout_per_ki_token", 0.25)
    pass_prefix = extra.pop("hicache_storage_pass_prefix_keys", False)
    if not isinstance(threshold, int):
        raise ValueError(f"prefetch_threshold must be int, got {type(threshold).__name__}")
    if not isinstance(pass_prefix, bool):
        raise ValueError("hicache_storage_pass_prefix_keys must be bool")
    return extra, threshold


class Engine:
    """One SGLang instance with HiCache and an L3 storage backend."""

    def __init__(self, config: EngineConfig, model_name: Optional[str] = None):
        self.config = config
        self.dtype = DTYPES[config.dtype]
        self.model = build_model(self.dtype)
        cfg = self.model.cfg
        if cfg.n_heads % config.tp_size:
            raise ValueError(f"{cfg.n_heads} heads do not split over tp {config.tp_size}")
        self.page = config.page_size
        self.heads_per_rank = cfg.n_heads // config.tp_size
        extra, threshold = parse_storage_backend_extra_config(config.extra_config)
        self.group = RankGroup(config.tp_size)
        self.pools: List[HostKVCache] = []
        self.indexers: List[Optional[IndexerPoolHost]] = []
        self.controllers: List[HiCacheController] = []
        self._rid = 0
        try:
            for rank in range(config.tp_size):
                if config.mla:
                    pool: HostKVCache = MLATokenToKVPoolHost(
                        config.host_tokens, self.page, config.layout, self.dtype, cfg.n_layers,
                        2 * cfg.d_model)
                else:
                    pool = MHATokenToKVPoolHost(config.host_tokens, self.page, config.layout,
                                                self.dtype, cfg.n_layers, self.heads_per_rank,
                                                cfg.head_dim)
                args = (pool, self.page, rank, config.tp_size, config.mla, self.group,
                        config.storage_backend, model_name or cfg.tag(), copy.deepcopy(extra),
                        threshold)
                indexer = None
                if config.hybrid:
                    # A KV-derived side pool: the KV pool's indices, its own bytes.
                    indexer = IndexerPoolHost(config.host_tokens, self.page, "page_first",
                                              self.dtype, cfg.head_dim)
                    controller: HiCacheController = HybridCacheController(
                        *args, host_pools=[(ms.PoolName.KV, pool), (ms.PoolName.INDEXER, indexer)])
                else:
                    controller = HiCacheController(*args)
                self.pools.append(pool)
                self.indexers.append(indexer)
                self.controllers.append(controller)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Detaches every rank's backend (SGLang's shutdown)."""
        for c in self.controllers:
            c.detach_storage_backend()
        self.controllers = []

    @property
    def backends(self) -> List[Any]:
        return [c.storage_backend for c in self.controllers]

    # -- device <-> host --
    def _prefill(self, prompt: Sequence[int]) -> KVCache:
        cache = new_cache(self.model, len(prompt), self.dtype)
        self.model.forward(prompt, cache)
        return cache

    def _backup_to_host(self, cache: KVCache, n: int, rank: int, slots: torch.Tensor) -> None:
        """Device -> host of tokens [0, n): this rank's heads (MHA) or the latent (MLA)."""
        pool, cfg = self.pools[rank], self.model.cfg
        heads = slice(rank * self.heads_per_rank, (rank + 1) * self.heads_per_rank)
        for layer in range(cfg.n_layers):
            k, v = cache.own_range(0, n, layer)  # [heads, n, dim]
            if isinstance(pool, MLATokenToKVPoolHost):
                latent = torch.cat([k.permute(1, 0, 2).reshape(n, -1),
                                    v.permute(1, 0, 2).reshape(n, -1)], dim=1)
                pool.write_latent(layer, slots, latent)
            else:
                pool.write_tokens(layer, slots, k[heads].permute(1, 0, 2),
                                  v[heads].permute(1, 0, 2))
        indexer = self.indexers[rank]
        if indexer is not None:
            k, _ = cache.own_range(0, n, 0)
            indexer.write_latent(0, slots, k.mean(dim=0))

    def _load_to_device(self, cache: KVCache, slots: Sequence[torch.Tensor]) -> None:
        """Host -> device, page by page: each rank gives its heads (MLA: from its latent)."""
        cfg, hpr, P = self.model.cfg, self.heads_per_rank, self.page
        pages = len(slots[0]) // P
        for p in range(pages):
            per_layer = []
            for layer in range(cfg.n_layers):
                ks, vs = [], []
                for rank, pool in enumerate(self.pools):
                    page = slots[rank][p * P:(p + 1) * P]
                    if isinstance(pool, MLATokenToKVPoolHost):
                        latent = pool.read_latent(layer, page)
                        k = latent[:, :cfg.d_model].reshape(P, cfg.n_heads, cfg.head_dim)
                        v = latent[:, cfg.d_model:].reshape(P, cfg.n_heads, cfg.head_dim)
                        heads = slice(rank * hpr, (rank + 1) * hpr)
                        k, v = k[:, heads], v[:, heads]
                    else:
                        k, v = pool.read_tokens(layer, page)
                    ks.append(k)
                    vs.append(v)
                per_layer.append((torch.cat(ks, dim=1).permute(1, 0, 2).contiguous(),
                                  torch.cat(vs, dim=1).permute(1, 0, 2).contiguous()))
            cache.add_prefix(per_layer)

    def _digest(self, pools: Sequence[Optional[HostKVCache]], slots: Sequence[torch.Tensor],
                pages: int) -> str:
        h = hashlib.sha256()
        for pool, s in zip(pools, slots):
            if pool is None:
                continue
            for p in range(pages):
                h.update(pool.get_data_page(s[p * self.page]).contiguous().view(torch.uint8)
                         .numpy().tobytes())
        return h.hexdigest()

    def _finish(self, cache: KVCache, prompt: Sequence[int], hits: int, n_decode: int,
                slots: Sequence[torch.Tensor]) -> Served:
        logits = self.model.forward(prompt[len(cache):], cache)
        tokens, decode = self.model.greedy(logits, cache, n_decode)
        return Served(hits, logits, decode, tokens, self._digest(self.pools, slots, hits),
                      self._digest(self.indexers, slots, hits)
                      if self.config.hybrid else "")

    def _extra_pools(self) -> Optional[List[Any]]:
        if not self.config.hybrid:
            return None
        return [ms.PoolTransfer(name=ms.PoolName.INDEXER, indices_from_pool=ms.PoolName.KV,
                                hit_policy=ms.PoolHitPolicy.ALL_PAGES)]

    # -- requests --
    def store_begin(self, prompt: Sequence[int]) -> List[Tuple[Any, torch.Tensor]]:
        """Prefill, copy the full pages to every rank's host pool, and hand
        them to the backup threads (write_storage)."""
        P = self.page
        pages = len(prompt) // P
        cache = self._prefill(prompt)
        hashes = get_hash_str(list(prompt[:pages * P]), None, P)
        ops = []
        for rank, controller in enumerate(self.controllers):
            slots = self.pools[rank].alloc(pages * P)
            if slots is None:
                raise RuntimeError("host pool full")
            self._backup_to_host(cache, pages * P, rank, slots)
            controller.write_storage(slots, list(prompt[:pages * P]), hash_value=list(hashes),
                                     extra_pools=self._extra_pools())
            ops.append((controller, slots))
        return ops

    def store_end(self, ops: List[Tuple[Any, torch.Tensor]], timeout: float = 120) -> List[int]:
        """Waits for each rank's backup ack; returns the tokens each stored."""
        done = []
        for (controller, slots), rank in zip(ops, range(len(ops))):
            op = controller.ack_backup_queue.get(timeout=timeout)
            done.append(op.completed_tokens)
            self.pools[rank].free(slots)
        return done

    def store(self, prompt: Sequence[int]) -> List[int]:
        """The backup path of one prompt: tokens stored per rank."""
        return self.store_end(self.store_begin(prompt))

    def load_begin(self, prompt: Sequence[int]) -> List[PrefetchOperation]:
        """Prefetch the prompt's full pages (not its last token) on every rank."""
        P = self.page
        fetch = list(prompt[:((len(prompt) - 1) // P) * P])
        self._rid += 1
        rid = f"req-{self._rid}"
        return [c.prefetch(rid, fetch, extra_pools=self._extra_pools())
                for c in self.controllers]

    def load_end(self, prompt: Sequence[int], ops: List[PrefetchOperation], n_decode: int,
                 timeout: float = 120) -> Served:
        """The scheduler's side: drain the hit queue (threshold, host memory),
        wait for the last ack (wait_complete), then host -> device, compute
        the rest and decode."""
        queued = []
        for rank, (controller, op) in enumerate(zip(self.controllers, ops)):
            got = controller.prefetch_hit_queue.get(timeout=timeout)
            assert got is op
            if op.storage_hit_count < controller.prefetch_threshold:
                op.mark_terminate()  # revoked: nothing to load
                continue
            op.host_indices = self.pools[rank].alloc(op.storage_hit_count)
            if op.host_indices is None:
                raise RuntimeError("host pool full")
            controller.prefetch_buffer.put(op)
            queued.append(rank)
        completed = []
        for rank in queued:
            tokens = 0
            while True:
                ack = self.controllers[rank].ack_prefetch_queue.get(timeout=timeout)
                if ack.completed_req:
                    break
                if ack.completed_tokens is not None:
                    tokens = ack.completed_tokens
            completed.append(tokens)
        hits = (min(completed) // self.page) if len(queued) == len(ops) and completed else 0
        slots = [op.host_indices[:hits * self.page] if op.host_indices is not None
                 else torch.empty(0, dtype=torch.int64) for op in ops]
        cache = new_cache(self.model, len(prompt) + 64, self.dtype)
        if hits:
            self._load_to_device(cache, slots)
        served = self._finish(cache, prompt, hits, n_decode, slots)
        for rank, op in enumerate(ops):
            if op.host_indices is not None:
                self.pools[rank].free(op.host_indices)
        return served

    def load(self, prompt: Sequence[int], n_decode: int) -> Served:
        """The prefetch path of one prompt, then the request."""
        return self.load_end(prompt, self.load_begin(prompt), n_decode)

    def twin(self, prompt: Sequence[int], pages: int, n_decode: int,
             source: Optional[Sequence[int]] = None) -> Served:
        """The same request reusing ``pages`` pages this instance computed and
        keeps in its own host pools (an L2 hit): no storage at all.
        ``source``: the prompt whose prefill made the pages (default ``prompt``)."""
        source = prompt if source is None else source
        cache = self._prefill(source)
        slots = [self.pools[rank].alloc(pages * self.page) for rank in range(len(self.pools))]
        for rank, s in enumerate(slots):
            if pages:
                self._backup_to_host(cache, pages * self.page, rank, s)
        out = new_cache(self.model, len(prompt) + 64, self.dtype)
        if pages:
            self._load_to_device(out, slots)
        served = self._finish(out, prompt, pages, n_decode, slots)
        for rank, s in enumerate(slots):
            self.pools[rank].free(s)
        return served
