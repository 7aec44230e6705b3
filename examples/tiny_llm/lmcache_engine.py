"""LMCache's side of a storage backend, re-implemented from LMCache's source
on the tiny model (LMCache cannot be installed here; nothing of it is
copied or imported). What each part follows, as file:function@commit
(LMCache/LMCache; "index N": read from a code index that gives the file's
version but not its commit; python/contracts/lmcache.json records the
interface files):

- ``EngineConfig``: ``lmcache/v1/config.py:_CONFIG_DEFINITIONS`` @ index
  57822647312 (the defaults of the keys used here; ``save_unfull_chunk``
  False) and ``LMCacheEngineConfig.get_extra_config_value``;
- ``CacheEngineKey``: ``lmcache/utils.py:CacheEngineKey`` @ index
  58804892106 (``to_string`` with the request's ``lmcache.tag.*`` configs
  appended as ``@name%value``, ``with_new_worker_id``, equality with the
  tags);
- ``create_storage_backends``: ``lmcache/v1/storage_backend/__init__.py:
  CreateStorageBackends`` @ index 55766182898 (LocalCPUBackend when
  ``max_local_cpu_size > 0``, then the maru backend when ``maru_path`` is
  set, then the plugins) and ``:storage_plugin_launcher`` (same file:
  ``importlib.import_module(module_path)``, ``getattr(class_name)``, the
  keyword constructor ``cls(config=, dst_device=, metadata=,
  local_cpu_backend=, loop=)``, registered under the plugin's NAME; an
  exception is logged and the backend dropped);
- ``StorageManager``: ``lmcache/v1/storage_backend/storage_manager.py`` @
  index 58789710752: ``StorageManager._get_allocator_backend`` (by dict
  key: LocalCPUBackend if present when "MaruBackend" is, else MaruBackend;
  LocalCPUBackend otherwise), ``:allocate``, ``:batched_put`` with
  ``:allocate_and_copy_objects`` (including its ``keys[:n]`` return),
  ``:contains``, ``:batched_get`` (no write-back for "LocalCPUBackend",
  "PDBackend", "MaruBackend"), ``:async_lookup_and_prefetch`` and its
  done callback, ``:batched_unpin`` (``backend.unpin`` per key);
- ``LocalCPUBackend``: ``lmcache/v1/storage_backend/local_cpu_backend.py``
  @ index 57512565381, as far as a backend behind it sees it
  (``local_cpu: False`` keeps the object and its allocator, turns its hot
  cache off);
- ``GPUConnector``: ``lmcache/v1/gpu_connector/gpu_connectors.py:
  VLLMPagedMemGPUConnectorV2`` @ 934e80334cb7 (``get_shape``,
  ``from_gpu`` setting KV_MLA_FMT for MLA, ``to_gpu``'s check of
  ``metadata.fmt``), on CPU tensors and the tiny model's cache;
- ``Engine``: ``lmcache/v1/cache_engine.py:LMCacheEngine.store`` and
  ``.retrieve`` @ 3bafe17fbd0b (allocate every chunk, from_gpu,
  batched_put; lookup with pins, contains per key, batched_get per
  location, to_gpu, ref_count_down, lookup_unpin), and the async path
  (``async_lookup_and_prefetch``, then the prefetched objects to_gpu,
  ``ref_count_down`` and ``unpin``: how LMCache's engine releases
  prefetched objects was not read, so both are given back here).
"""
from __future__ import annotations

import asyncio
import collections
import importlib
import logging
import string
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from blocks import chain_keys
from engines import attach_2ltd, pack_2ltd
from maru.lmcache import (AllocatorBackendInterface, MemoryAllocatorInterface, MemoryFormat,
                          MemoryObjMetadata, TensorMemoryObj)
from model import KVCache, TinyLM

logger = logging.getLogger("lmcache_engine")

_DTYPE_STR = {torch.float16: "half", torch.bfloat16: "bfloat16", torch.float32: "float"}

#: LMCache's defaults of the config keys this harness reads.
CONFIG_DEFAULTS: Dict[str, Any] = {
    "chunk_size": 256, "local_cpu": True, "max_local_cpu_size": 5.0, "use_layerwise": False,
    "enable_async_loading": False, "save_unfull_chunk": False, "enable_pd": False,
    "maru_path": None, "maru_pool_size": 4.0, "storage_plugins": None, "extra_config": None,
}


class EngineConfig:
    """LMCacheEngineConfig: the keys of a config file, LMCache's defaults
    for the others."""

    def __init__(self, values: Dict[str, Any]) -> None:
        for name, default in CONFIG_DEFAULTS.items():
            setattr(self, name, values.get(name, default))
        for name, value in values.items():
            setattr(self, name, value)

    @classmethod
    def from_yaml(cls, text: str, env: Dict[str, str]) -> "EngineConfig":
        """A config file as LMCache's example launchers pass it: ``${VAR}``
        substituted (``envsubst``), then read as YAML."""
        import yaml

        return cls(yaml.safe_load(string.Template(text).substitute(env)) or {})

    def get_extra_config_value(self, key: str, default: Any = None) -> Any:
        return (self.extra_config or {}).get(key, default)


@dataclass
class Metadata:
    """LMCacheMetadata of a worker of the tiny model."""

    model_name: str
    n_layers: int
    hidden: int
    chunk_size: int
    kv_dtype: Any = torch.float32
    world_size: int = 1
    worker_id: int = 0
    use_mla: bool = False
    role: str = "worker"

    def get_shapes(self) -> List[torch.Size]:
        return [torch.Size([1 if self.use_mla else 2, self.n_layers, self.chunk_size,
                            self.hidden])]

    def get_dtypes(self) -> List[Any]:
        return [self.kv_dtype]


@dataclass(eq=False)
class CacheEngineKey:
    """lmcache.utils.CacheEngineKey: the tags of ``request_configs``
    (``lmcache.tag.NAME``) are part of the key and of ``to_string``."""

    model_name: str
    world_size: int
    worker_id: int
    chunk_hash: int
    dtype: Any
    request_configs: Optional[dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        tags = [(k[len("lmcache.tag."):], v) for k, v in (self.request_configs or {}).items()
                if k.startswith("lmcache.tag.")]
        self.tags = tuple(tags) if tags else None

    def __hash__(self) -> int:
        return hash((self.model_name, self.world_size, self.worker_id, self.chunk_hash,
                     self.dtype, self.tags))

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other) and (
            self.model_name, self.world_size, self.worker_id, self.chunk_hash, self.dtype,
            self.tags) == (other.model_name, other.world_size, other.worker_id,
                           other.chunk_hash, other.dtype, other.tags)

    def to_string(self) -> str:
        s = (f"{self.model_name}@{self.world_size}@{self.worker_id}@{self.chunk_hash:x}"
             f"@{_DTYPE_STR[self.dtype]}")
        if self.tags:
            s += "@" + "@".join(f"{k}%{v}" for k, v in self.tags)
        return s

    def with_new_worker_id(self, worker_id: int) -> "CacheEngineKey":
        return CacheEngineKey(self.model_name, self.world_size, worker_id, self.chunk_hash,
                              self.dtype, self.request_configs)


def chunk_spans(n_tokens: int, chunk: int, save_unfull: bool) -> List[Tuple[int, int]]:
    """The token database's chunks: whole chunks, then the partial last one
    if ``save_unfull_chunk``."""
    spans = [(s, s + chunk) for s in range(0, n_tokens - chunk + 1, chunk)]
    if save_unfull and n_tokens % chunk:
        spans.append((n_tokens - n_tokens % chunk, n_tokens))
    return spans


def chunk_keys(model: TinyLM, prompt: Sequence[int], spans: List[Tuple[int, int]],
               meta: Metadata, request_configs: Optional[dict] = None) -> List[CacheEngineKey]:
    """One key per span, each hash chained to the previous one."""
    keys, prev = [], model.cfg.tag()
    for start, end in spans:
        (h,) = chain_keys(prev, prompt[start:end], end - start)
        keys.append(CacheEngineKey(meta.model_name, meta.world_size, meta.worker_id,
                                   int(h, 16), meta.kv_dtype, dict(request_configs or {})))
        prev = h
    return keys


# --- LocalCPUBackend -----------------------------------------------------------


class _CPUAllocator(MemoryAllocatorInterface):
    """LocalCPUBackend's allocator: objects over CPU tensors."""

    def allocate(self, shapes: Any, dtypes: Any, fmt: Any = MemoryFormat.UNDEFINED,
                 allocator_type: Optional[str] = None) -> TensorMemoryObj:
        shape = shapes if isinstance(shapes, torch.Size) else shapes[0]
        dtype = dtypes if isinstance(dtypes, torch.dtype) else dtypes[0]
        raw = torch.empty(shape.numel() * torch.empty((), dtype=dtype).element_size(),
                          dtype=torch.uint8)
        meta = MemoryObjMetadata(shape=shape, dtype=dtype, address=raw.data_ptr(),
                                 phy_size=raw.numel(), ref_count=1, fmt=fmt)
        return TensorMemoryObj(raw, meta, self)

    def batched_allocate(self, shapes: Any, dtypes: Any, batch_size: int,
                         fmt: Any = MemoryFormat.UNDEFINED,
                         allocator_type: Optional[str] = None) -> List[TensorMemoryObj]:
        return [self.allocate(shapes, dtypes, fmt) for _ in range(batch_size)]

    def free(self, memory_obj: Any, allocator_type: Optional[str] = None) -> None:
        memory_obj.invalidate()

    def batched_free(self, memory_objs: List[Any], allocator_type: Optional[str] = None,
                     update_stats: bool = True) -> None:
        for obj in memory_objs:
            self.free(obj)


class LocalCPUBackend(AllocatorBackendInterface):
    """What a backend behind LMCache's LocalCPUBackend sees of it."""

    def __init__(self, config: EngineConfig, metadata: Metadata, dst_device: str) -> None:
        super().__init__(dst_device=dst_device)
        self.use_hot = bool(config.local_cpu)
        self.hot_cache: "collections.OrderedDict[Any, Any]" = collections.OrderedDict()
        self.memory_allocator = self.initialize_allocator(config, metadata)
        self.lock = threading.Lock()

    def __str__(self) -> str:
        return self.__class__.__name__

    def initialize_allocator(self, config: Any, metadata: Any) -> _CPUAllocator:
        return _CPUAllocator()

    def get_memory_allocator(self) -> _CPUAllocator:
        return self.memory_allocator

    def get_allocator_backend(self) -> "LocalCPUBackend":
        return self

    def allocate(self, shapes: Any, dtypes: Any, fmt: Any = None, eviction: bool = True,
                 busy_loop: bool = True) -> TensorMemoryObj:
        return self.memory_allocator.allocate(shapes, dtypes,
                                              MemoryFormat.KV_2LTD if fmt is None else fmt)

    def batched_allocate(self, shapes: Any, dtypes: Any, batch_size: int, fmt: Any = None,
                         eviction: bool = True, busy_loop: bool = True) -> list:
        return [self.allocate(shapes, dtypes, fmt) for _ in range(batch_size)]

    def contains(self, key: Any, pin: bool = False) -> bool:
        with self.lock:
            obj = self.hot_cache.get(key)
            if obj is not None and pin:
                obj.pin()
            return obj is not None

    def exists_in_put_tasks(self, key: Any) -> bool:
        return False

    def batched_submit_put_task(self, keys: Sequence[Any], objs: List[Any],
                                transfer_spec: Any = None, on_complete_callback: Any = None
                                ) -> None:
        if not self.use_hot:
            return None
        with self.lock:
            for key, obj in zip(keys, objs):
                obj.ref_count_up()
                self.hot_cache[key] = obj
        return None

    def get_blocking(self, key: Any) -> Any:
        with self.lock:
            obj = self.hot_cache.get(key)
            if obj is not None:
                obj.ref_count_up()
            return obj

    async def batched_async_contains(self, lookup_id: str, keys: List[Any],
                                     pin: bool = False) -> int:
        return self.batched_contains(keys, pin)

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[Any],
                                       transfer_spec: Any = None) -> list:
        with self.lock:
            objs = [self.hot_cache[k] for k in keys]
            for obj in objs:
                obj.ref_count_up()
        return objs

    def pin(self, key: Any) -> bool:
        return self.contains(key, pin=True)

    def unpin(self, key: Any) -> bool:
        with self.lock:
            obj = self.hot_cache.get(key)
            if obj is not None:
                obj.unpin()
            return obj is not None

    def remove(self, key: Any, force: bool = True) -> bool:
        with self.lock:
            obj = self.hot_cache.pop(key, None)
        if obj is not None:
            obj.ref_count_down()
        return obj is not None

    def close(self) -> None:
        for key in list(self.hot_cache):
            self.remove(key)


# --- CreateStorageBackends, storage_plugin_launcher ---------------------------


def storage_plugin_launcher(config: EngineConfig, metadata: Metadata,
                            loop: asyncio.AbstractEventLoop,
                            local_cpu_backend: Optional[LocalCPUBackend], dst_device: str,
                            storage_backends: "collections.OrderedDict[str, Any]") -> None:
    plugins = set(config.storage_plugins) if config.storage_plugins else set()
    if plugins and not config.extra_config:
        logger.warning("storage_plugins=%s is set but extra_config is empty", sorted(plugins))
        return
    if not config.extra_config:
        return
    for name in plugins:
        try:
            module_path = config.extra_config.get(f"storage_plugin.{name}.module_path")
            class_name = config.extra_config.get(f"storage_plugin.{name}.class_name")
            if not module_path or not class_name:
                logger.warning("Backend %s missing module_path or class_name", name)
                continue
            backend_class = getattr(importlib.import_module(module_path), class_name)
            storage_backends[name] = backend_class(config=config, dst_device=dst_device,
                                                   metadata=metadata,
                                                   local_cpu_backend=local_cpu_backend, loop=loop)
        except Exception as e:
            logger.error("Failed to create backend %s: %s", name, e)


def create_storage_backends(config: EngineConfig, metadata: Metadata,
                            loop: asyncio.AbstractEventLoop
                            ) -> "collections.OrderedDict[str, Any]":
    dst_device = "cpu"  # not a CUDA worker
    backends: "collections.OrderedDict[str, Any]" = collections.OrderedDict()
    local_cpu_backend = None
    if (not config.enable_pd or config.local_cpu) and config.max_local_cpu_size > 0:
        local_cpu_backend = LocalCPUBackend(config, metadata, dst_device)
        backends[str(local_cpu_backend)] = local_cpu_backend
    if config.maru_path is not None:
        from lmcache_intree import MaruBackend  # LMCache's own, over our packages

        maru_backend = MaruBackend(config, metadata, loop, dst_device)
        backends[str(maru_backend)] = maru_backend
    if not config.enable_pd or config.local_cpu:
        storage_plugin_launcher(config, metadata, loop, local_cpu_backend, dst_device, backends)
    return backends


# --- StorageManager -----------------------------------------------------------


def _cname(backend: Any) -> str:
    return backend.__class__.__name__


def allocate_and_copy_objects(allocator_backend: Any, keys: Sequence[Any],
                              src_memory_objs: List[Any]) -> Tuple[Sequence[Any], List[Any]]:
    allocated = []
    for key, src in zip(keys, src_memory_objs):
        if allocator_backend.contains(key):
            continue
        obj = allocator_backend.allocate(src.get_shape(), src.get_dtype(), fmt=src.meta.fmt,
                                         eviction=True, busy_loop=False)
        if obj is None:
            break
        obj.tensor.copy_(src.tensor)
        allocated.append(obj)
    return keys[:len(allocated)], allocated  # as LMCache returns it


class StorageManager:
    """The storage manager's store and retrieve order over the backends."""

    def __init__(self, config: EngineConfig, metadata: Metadata) -> None:
        self.config, self.metadata = config, metadata
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                        name="lmcache-storage-manager")
        self._thread.start()
        self.storage_backends = create_storage_backends(config, metadata, self.loop)
        self.allocator_backend = self._get_allocator_backend()
        self.futures: List[Any] = []

    def _get_allocator_backend(self) -> Any:
        backends = self.storage_backends
        if "MaruBackend" in backends:
            allocator = backends.get("LocalCPUBackend") or backends["MaruBackend"]
        else:
            allocator = backends["LocalCPUBackend"]
        assert isinstance(allocator, AllocatorBackendInterface)
        return allocator

    def allocate(self, shape: torch.Size, dtype: Any, fmt: Any = None,
                 busy_loop: bool = False) -> Any:
        if fmt is None:
            fmt = MemoryFormat.KV_MLA_FMT if self.metadata.use_mla else MemoryFormat.KV_2LTD
        return self.allocator_backend.allocate(shape, dtype, fmt, eviction=True,
                                               busy_loop=busy_loop)

    def batched_put(self, keys: List[Any], memory_objs: List[Any]) -> None:
        obj_dict = {_cname(self.allocator_backend): (keys, memory_objs)}
        for backend in self.storage_backends.values():
            ab = backend.get_allocator_backend()
            if _cname(ab) not in obj_dict:
                obj_dict[_cname(ab)] = allocate_and_copy_objects(ab, keys, memory_objs)
            ks, objs = obj_dict[_cname(ab)]
            futures = backend.batched_submit_put_task(ks, objs, transfer_spec=None)
            self.futures += futures or []
        for _, objs in obj_dict.values():
            for obj in objs:
                obj.ref_count_down()

    def wait_for_puts(self) -> None:
        """Not LMCache's: the harness waits for the puts' futures before it
        tells another process to read."""
        for future in self.futures:
            future.result(timeout=120)
        self.futures = []

    def contains(self, key: Any, pin: bool = False) -> Optional[str]:
        for name, backend in self.storage_backends.items():
            if backend.contains(key, pin):
                return name
        return None

    def batched_get(self, keys: List[Any], location: str) -> List[Any]:
        backend = self.storage_backends[location]
        objs = backend.batched_get_blocking(keys)
        if location not in ("LocalCPUBackend", "PDBackend", "MaruBackend"):
            local = self.storage_backends.get("LocalCPUBackend")
            if local is not None and local.use_hot:  # write-back into the hot cache
                local.batched_submit_put_task([k for k, o in zip(keys, objs) if o is not None],
                                              [o for o in objs if o is not None])
        return objs

    def batched_unpin(self, keys: List[Any], locations: List[str]) -> None:
        for key, location in zip(keys, locations):
            self.storage_backends[location].unpin(key)

    async def async_lookup_and_prefetch(self, lookup_id: str, keys: List[Any],
                                        pin: bool = True) -> List[Tuple[str, Any, Any]]:
        """(location, key, object) of the prefetched prefix."""
        tasks, left = [], list(keys)
        for name, backend in self.storage_backends.items():
            if not left:
                break
            try:
                n = await backend.batched_async_contains(lookup_id, left, pin)
            except NotImplementedError:
                continue
            if n == 0:
                continue
            task = asyncio.ensure_future(backend.batched_get_non_blocking(
                lookup_id, left[:n], {"cum_chunk_lengths": list(range(n + 1))}))
            tasks.append((name, left[:n], task))
            left = left[n:]
        out: List[Tuple[str, Any, Any]] = []
        short = False
        for name, tier_keys, task in tasks:  # prefetch_all_done_callback
            objs = await task
            if short:
                for obj in objs:
                    obj.ref_count_down()
                continue
            out += [(name, k, o) for k, o in zip(tier_keys, objs)]
            short = len(objs) < len(tier_keys)
        return out

    def close(self) -> None:
        for backend in self.storage_backends.values():
            backend.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


# --- GPU connector and engine ---------------------------------------------------


class GPUConnector:
    """VLLMPagedMemGPUConnectorV2, on the tiny model's CPU cache."""

    def __init__(self, metadata: Metadata, heads: int) -> None:
        self.use_mla, self.n_layers, self.hidden = metadata.use_mla, metadata.n_layers, \
            metadata.hidden
        self.heads = heads

    def get_shape(self, num_tokens: int) -> torch.Size:
        return torch.Size([1 if self.use_mla else 2, self.n_layers, num_tokens, self.hidden])

    def from_gpu(self, memory_obj: Any, start: int, end: int, cache: KVCache) -> None:
        pack_2ltd(cache, start, end, memory_obj.tensor)
        if self.use_mla:
            memory_obj.metadata.fmt = MemoryFormat.KV_MLA_FMT

    def to_gpu(self, memory_obj: Any, tokens: int, cache: KVCache) -> None:
        """The format check of to_gpu, then the chunk's first ``tokens``
        tokens attached to the cache as views (where vLLM copies them into
        its paged KV)."""
        assert memory_obj.tensor is not None
        if self.use_mla:
            if memory_obj.metadata.fmt != MemoryFormat.KV_MLA_FMT:
                raise ValueError("The memory object should be in KV_MLA_FMT format in order "
                                 "to be processed by VLLMPagedMemGPUConnector")
        elif memory_obj.metadata.fmt != MemoryFormat.KV_2LTD:
            raise ValueError("The memory object should be in KV_2LTD format in order to be "
                             "processed by VLLMPagedMemGPUConnector")
        attach_2ltd(cache, memory_obj.tensor[:, :, :tokens], self.heads)


@dataclass
class Served:
    loaded: int  # tokens whose KV came from the store
    chunks: int
    prefill_logits: torch.Tensor
    decode_logits: torch.Tensor
    tokens: List[int]
    spans: List[Tuple[int, int]] = field(default_factory=list)  # (address, bytes) read


class Engine:
    """LMCache's cache engine store and retrieve for one worker."""

    def __init__(self, model: TinyLM, config: EngineConfig, model_name: str = "tiny") -> None:
        self.model, self.config = model, config
        self.chunk = int(config.chunk_size)
        self.meta = Metadata(model_name, model.cfg.n_layers, model.cfg.d_model, self.chunk)
        self.storage = StorageManager(config, self.meta)
        self.gpu = GPUConnector(self.meta, model.cfg.n_heads)

    def spans(self, n_tokens: int) -> List[Tuple[int, int]]:
        return chunk_spans(n_tokens, self.chunk, bool(self.config.save_unfull_chunk))

    def store(self, prompt: Sequence[int], request_configs: Optional[dict] = None) -> int:
        """Prefill, then store every chunk; returns the chunks handed to the backends."""
        cache = self.model.new_cache(len(prompt))
        self.model.forward(prompt, cache)
        spans = self.spans(len(prompt))
        keys = chunk_keys(self.model, prompt, spans, self.meta, request_configs)
        objs = []
        for start, end in spans:
            obj = self.storage.allocate(self.gpu.get_shape(end - start), self.meta.kv_dtype)
            if obj is None:
                break
            objs.append(obj)
        for obj, (start, end) in zip(objs, spans):
            self.gpu.from_gpu(obj, start, end, cache)
        self.storage.batched_put(keys[:len(objs)], objs)
        self.storage.wait_for_puts()
        return len(objs)

    def _plan(self, prompt: Sequence[int]) -> List[Tuple[int, int]]:
        # vLLM computes at least the last prompt token itself.
        need = len(prompt) - 1
        return [(s, e) for s, e in self.spans(len(prompt)) if s < need]

    def retrieve(self, prompt: Sequence[int], n_decode: int,
                 request_configs: Optional[dict] = None) -> Served:
        """lookup (pins), then retrieve: contains per key, batched_get per
        location, to_gpu, ref_count_down; lookup_unpin."""
        plan = self._plan(prompt)
        keys = chunk_keys(self.model, prompt, plan, self.meta, request_configs)
        pinned: List[str] = []
        for key in keys:  # lookup, pin=True
            location = self.storage.contains(key, pin=True)
            if location is None:
                break
            pinned.append(location)
        hits = len(pinned)
        locations: List[str] = []
        for key in keys[:hits]:  # retrieve: where each chunk is
            location = self.storage.contains(key)
            if location is None:
                break
            locations.append(location)
        objs: List[Any] = []
        i = 0
        while i < len(locations):  # one batched_get per run of one location
            j = i
            while j < len(locations) and locations[j] == locations[i]:
                j += 1
            got = self.storage.batched_get(keys[i:j], locations[i])
            found = [o for o in got if o is not None]
            objs += found
            if len(found) < j - i:
                break
            i = j
        cache = self.model.new_cache(len(prompt) + n_decode)
        need = len(prompt) - 1
        spans = []
        for obj, (start, end) in zip(objs, plan):
            self.gpu.to_gpu(obj, min(end, need) - start, cache)
            spans.append((obj.tensor.data_ptr(), obj.get_size()))
            obj.ref_count_down()
        self.storage.batched_unpin(keys[:hits], pinned)
        return self._finish(prompt, cache, len(objs), n_decode, spans)

    def retrieve_async(self, prompt: Sequence[int], n_decode: int, lookup_id: str = "req-0",
                       request_configs: Optional[dict] = None) -> Served:
        """enable_async_loading: lookup and prefetch on the storage manager's
        loop, then the prefetched objects to_gpu."""
        plan = self._plan(prompt)
        keys = chunk_keys(self.model, prompt, plan, self.meta, request_configs)
        got = asyncio.run_coroutine_threadsafe(
            self.storage.async_lookup_and_prefetch(lookup_id, keys, pin=True),
            self.storage.loop).result(timeout=120)
        cache = self.model.new_cache(len(prompt) + n_decode)
        need = len(prompt) - 1
        spans = []
        for (location, key, obj), (start, end) in zip(got, plan):
            self.gpu.to_gpu(obj, min(end, need) - start, cache)
            spans.append((obj.tensor.data_ptr(), obj.get_size()))
            obj.ref_count_down()
            if obj.is_pinned:  # the prefetch's pin (maru backends pin what they prefetch)
                obj.unpin()
            self.storage.storage_backends[location].unpin(key)  # the lookup's pin
        return self._finish(prompt, cache, len(got), n_decode, spans)

    def twin(self, prompt: Sequence[int], chunks: int, n_decode: int) -> Served:
        """The same request reusing ``chunks`` chunks of KV this process
        computed and keeps in its own memory, in the same segments: no store."""
        full = self.model.new_cache(len(prompt))
        self.model.forward(prompt, full)
        cache = self.model.new_cache(len(prompt) + n_decode)
        need = len(prompt) - 1
        for start, end in self._plan(prompt)[:chunks]:
            t = torch.empty(self.gpu.get_shape(end - start))
            pack_2ltd(full, start, end, t)
            attach_2ltd(cache, t[:, :, :min(end, need) - start], self.model.cfg.n_heads)
        return self._finish(prompt, cache, chunks, n_decode)

    def _finish(self, prompt: Sequence[int], cache: KVCache, chunks: int,
                n_decode: int, spans: Optional[List[Tuple[int, int]]] = None) -> Served:
        loaded = len(cache)
        logits = self.model.forward(prompt[loaded:], cache)
        tokens, decode = self.model.greedy(logits, cache, n_decode)
        return Served(loaded, chunks, logits, decode, tokens, spans or [])

    def close(self) -> None:
        self.storage.close()
