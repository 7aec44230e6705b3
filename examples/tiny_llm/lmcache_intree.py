"""LMCache's own maru backend, as LMCache builds it when its config sets
``maru_path``: a re-implementation of the control flow of
``lmcache/v1/storage_backend/maru_backend.py`` @
``b4dd69b4d8c6967b3c737639f513c446a061b3bd`` (LMCache/LMCache), read from
that file, method for method, driving OUR ``maru.MaruConfig`` /
``maru.MaruHandler`` and ``maru_lmcache.CxlMemoryAdapter`` with exactly the
calls, keywords and reference counts it makes (python/contracts/lmcache.json
lists them). LMCache's code is not copied or imported: it cannot be
installed here.

Differences, none in what reaches our objects: LMCache's logger calls are
left out, and ``close`` waits for the pending puts on a condition where
LMCache polls every 0.1 s.
"""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any, Callable, List, Optional, Sequence

from maru import MaruConfig, MaruHandler  # as maru_backend.py imports them
from maru_lmcache import CxlMemoryAdapter
from maru.lmcache import AllocatorBackendInterface, MemoryFormat
from maru._upstream.lmcache import get_size_bytes


class MaruBackend(AllocatorBackendInterface):
    """maru_backend.py's ``MaruBackend`` (same class name: LMCache's storage
    manager tells backends apart by class and by dict key)."""

    def __init__(self, config: Any, metadata: Any, loop: asyncio.AbstractEventLoop,
                 dst_device: str = "cuda") -> None:
        # MaruBackend.__init__
        super().__init__(dst_device=dst_device)
        if config.use_layerwise:
            raise NotImplementedError("MaruBackend does not yet support layerwise KV cache.")
        self.config = config
        self.loop = loop
        self._full_chunk_size_bytes = get_size_bytes(metadata.get_shapes(),
                                                     metadata.get_dtypes())
        assert self._full_chunk_size_bytes % metadata.chunk_size == 0
        self._single_token_size = self._full_chunk_size_bytes // metadata.chunk_size
        self._mla_worker_id_as0_mode = bool(
            config.get_extra_config_value("remote_enable_mla_worker_id_as0", metadata.use_mla)
            and metadata.use_mla and metadata.world_size > 1 and metadata.worker_id != 0)
        self._handler = self._create_handler(config)
        self.memory_allocator = self.initialize_allocator(config, metadata)
        self.put_lock = threading.Lock()
        self._put_done = threading.Condition(self.put_lock)
        self.put_tasks: set = set()

    def __str__(self) -> str:
        return self.__class__.__name__

    @staticmethod
    def _pool_size_gb_to_bytes(size_gb: float) -> int:
        # MaruBackend._pool_size_gb_to_bytes
        return int(size_gb * 1024**3)

    def _create_handler(self, config: Any) -> MaruHandler:
        # MaruBackend._create_handler: maru:// becomes tcp://, every keyword as there
        assert config.maru_path is not None, "maru_path must be set for MaruBackend"
        server_url = config.maru_path
        if server_url.startswith("maru://"):
            server_url = "tcp://" + server_url[len("maru://"):]
        extra = config.extra_config or {}
        maru_config = MaruConfig(
            server_url=server_url,
            instance_id=extra.get("maru_instance_id"),
            pool_size=self._pool_size_gb_to_bytes(config.maru_pool_size),
            chunk_size_bytes=self._full_chunk_size_bytes,
            auto_connect=False,
            timeout_ms=extra.get("maru_timeout_ms", 5000),
            use_async_rpc=extra.get("maru_use_async_rpc", True),
            max_inflight=extra.get("maru_max_inflight", 64),
            eager_map=extra.get("maru_eager_map", True),
        )
        handler = MaruHandler(maru_config)
        if not handler.connect():
            raise RuntimeError(f"Failed to connect MaruHandler to {config.maru_path}")
        return handler

    # --- AllocatorBackendInterface (MaruBackend.initialize_allocator ...) ----

    def initialize_allocator(self, config: Any, metadata: Any) -> CxlMemoryAdapter:
        fmt = MemoryFormat.KV_MLA_FMT if metadata.use_mla else MemoryFormat.KV_2LTD
        return CxlMemoryAdapter(handler=self._handler, shapes=metadata.get_shapes(),
                                dtypes=metadata.get_dtypes(), fmt=fmt,
                                chunk_size=self._handler.get_chunk_size())

    def get_memory_allocator(self) -> CxlMemoryAdapter:
        return self.memory_allocator

    def get_allocator_backend(self) -> "MaruBackend":
        return self

    def allocate(self, shapes: Any, dtypes: Any, fmt: Any = MemoryFormat.KV_2LTD,
                 eviction: bool = True, busy_loop: bool = True) -> Any:
        obj = self.memory_allocator.allocate(shapes, dtypes, fmt)
        if obj is not None:
            CxlMemoryAdapter.decode_address(obj.metadata.address)  # its debug log
        return obj

    def batched_allocate(self, shapes: Any, dtypes: Any, batch_size: int,
                         fmt: Any = MemoryFormat.KV_2LTD, eviction: bool = True,
                         busy_loop: bool = True) -> Optional[list]:
        return self.memory_allocator.batched_allocate(shapes, dtypes, batch_size, fmt)

    # --- put (MaruBackend.submit_put_task, batched_submit_put_task,
    #     _async_store, _async_batch_store) --------------------------------

    def exists_in_put_tasks(self, key: Any) -> bool:
        with self.put_lock:
            return key in self.put_tasks

    @staticmethod
    def _create_immediate_empty_future() -> Future:
        f: Future = Future()
        f.set_result(None)
        return f

    def submit_put_task(self, key: Any, memory_obj: Any,
                        on_complete_callback: Optional[Callable[[Any], None]] = None) -> Future:
        if self._mla_worker_id_as0_mode:
            return self._create_immediate_empty_future()
        assert memory_obj.tensor is not None
        memory_obj.ref_count_up()  # kept on success: the page stays alive
        with self.put_lock:
            self.put_tasks.add(key)
        return asyncio.run_coroutine_threadsafe(
            self._async_store(key, memory_obj, on_complete_callback), self.loop)

    def batched_submit_put_task(self, keys: Sequence[Any], memory_objs: List[Any],
                                transfer_spec: Any = None,
                                on_complete_callback: Optional[Callable[[Any], None]] = None
                                ) -> Optional[List[Future]]:
        if self._mla_worker_id_as0_mode:
            return None
        for memory_obj in memory_objs:
            assert memory_obj.tensor is not None
            memory_obj.ref_count_up()
        with self.put_lock:
            self.put_tasks.update(keys)
        return [asyncio.run_coroutine_threadsafe(
            self._async_batch_store(list(keys), memory_objs, on_complete_callback), self.loop)]

    def _done_with(self, keys: List[Any]) -> None:
        with self._put_done:
            self.put_tasks.difference_update(keys)
            self._put_done.notify_all()

    async def _async_store(self, key: Any, memory_obj: Any,
                           on_complete_callback: Optional[Callable[[Any], None]]) -> None:
        success = False
        try:
            allocator = self.memory_allocator
            assert isinstance(allocator, CxlMemoryAdapter)
            handle = allocator.create_store_handle(memory_obj)
            success = await asyncio.to_thread(self._handler.store, key.to_string(), handle)
            handle.region_id, handle.page_index  # its debug log
        finally:
            self._done_with([key])
            if not success:
                memory_obj.ref_count_down()
            if success and on_complete_callback is not None:
                try:
                    on_complete_callback(key)
                except Exception:
                    pass

    async def _async_batch_store(self, keys: List[Any], memory_objs: List[Any],
                                 on_complete_callback: Optional[Callable[[Any], None]]) -> None:
        results: Optional[list] = None
        try:
            allocator = self.memory_allocator
            assert isinstance(allocator, CxlMemoryAdapter)
            key_strs = [k.to_string() for k in keys]
            handles = [allocator.create_store_handle(m) for m in memory_objs]
            results = await asyncio.to_thread(self._handler.batch_store, key_strs, handles)
        finally:
            self._done_with(keys)
            for i, memory_obj in enumerate(memory_objs):
                if not (results is not None and i < len(results) and results[i]):
                    memory_obj.ref_count_down()
            if on_complete_callback is not None:
                for i, key in enumerate(keys):
                    if results is not None and i < len(results) and results[i]:
                        try:
                            on_complete_callback(key)
                        except Exception:
                            pass

    # --- get (MaruBackend.get_blocking, batched_get_blocking,
    #     batched_async_contains, batched_get_non_blocking) ------------------

    def _located(self, mem_info: Any) -> Any:
        return self.memory_allocator.get_by_location(
            region_id=mem_info.region_id, page_index=mem_info.page_index,
            actual_size=len(mem_info.view), single_token_size=self._single_token_size)

    def get_blocking(self, key: Any) -> Any:
        if self._mla_worker_id_as0_mode:
            key = key.with_new_worker_id(0)
        mem_info = self._handler.retrieve(key.to_string())
        if mem_info is None:
            return None
        assert isinstance(self.memory_allocator, CxlMemoryAdapter)
        memory_obj = self._located(mem_info)
        if memory_obj is None:
            return None
        memory_obj.ref_count_up()
        return memory_obj

    def batched_get_blocking(self, keys: List[Any]) -> List[Any]:
        if self._mla_worker_id_as0_mode:
            keys = [k.with_new_worker_id(0) for k in keys]
        mem_infos = self._handler.batch_retrieve([k.to_string() for k in keys])
        assert isinstance(self.memory_allocator, CxlMemoryAdapter)
        results: List[Any] = []
        for mem_info in mem_infos:
            if mem_info is None:
                results.append(None)
                continue
            memory_obj = self._located(mem_info)
            if memory_obj is None:
                results.append(None)
                continue
            memory_obj.ref_count_up()
            results.append(memory_obj)
        return results

    async def batched_async_contains(self, lookup_id: str, keys: List[Any],
                                     pin: bool = False) -> int:
        return await asyncio.to_thread(self.batched_contains, keys, pin)

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[Any],
                                       transfer_spec: Any = None) -> list:
        def _batch_get() -> list:
            actual = [k.with_new_worker_id(0) for k in keys] if self._mla_worker_id_as0_mode \
                else list(keys)
            mem_infos = self._handler.batch_retrieve([k.to_string() for k in actual])
            assert isinstance(self.memory_allocator, CxlMemoryAdapter)
            results = []
            for mem_info in mem_infos:
                if mem_info is None:
                    break
                memory_obj = self._located(mem_info)
                if memory_obj is None:
                    break
                memory_obj.ref_count_up()
                memory_obj.pin()
                results.append(memory_obj)
            return results
        return await asyncio.to_thread(_batch_get)

    # --- contains, pin, unpin, remove (MaruBackend.contains ... remove) ------

    def contains(self, key: Any, pin: bool = False) -> bool:
        if self._mla_worker_id_as0_mode:
            key = key.with_new_worker_id(0)
        key_str = key.to_string()
        return self._handler.pin(key_str) if pin else self._handler.exists(key_str)

    def batched_contains(self, keys: List[Any], pin: bool = False) -> int:
        if self._mla_worker_id_as0_mode:
            keys = [k.with_new_worker_id(0) for k in keys]
        key_strs = [k.to_string() for k in keys]
        results = self._handler.batch_pin(key_strs) if pin \
            else self._handler.batch_exists(key_strs)
        num_hit = 0
        for exists in results:
            if not exists:
                break
            num_hit += 1
        return num_hit

    def pin(self, key: Any) -> bool:
        if self._mla_worker_id_as0_mode:
            key = key.with_new_worker_id(0)
        return self._handler.pin(key.to_string())

    def unpin(self, key: Any) -> bool:
        if self._mla_worker_id_as0_mode:
            key = key.with_new_worker_id(0)
        return self._handler.unpin(key.to_string())

    def batched_unpin(self, keys: List[Any]) -> None:
        if not keys:
            return
        if self._mla_worker_id_as0_mode:
            keys = [k.with_new_worker_id(0) for k in keys]
        self._handler.batch_unpin([k.to_string() for k in keys])

    def remove(self, key: Any, force: bool = True) -> bool:
        if self._mla_worker_id_as0_mode:
            key = key.with_new_worker_id(0)
        return self._handler.delete(key.to_string())

    def close(self) -> None:
        with self._put_done:
            self._put_done.wait_for(lambda: not self.put_tasks)
        self.memory_allocator.close()
        self._handler.close()
