"""The worker side of the connector: loads into and saves from the paged cache.

vLLM calls, per forward step: ``start_load_kv`` before the model runs;
in each attention layer ``wait_for_layer_load(name)`` before it reads the
cache and ``save_kv_layer(name, kv_layer, ...)`` after it wrote the step's
KV; ``wait_for_save`` when the forward ends; then ``get_finished`` and
``get_block_ids_with_load_errors``.

Saving is layer-wise too: the chunks completed in this step are created at
the first layer with one part per layer; layer i is copied in while the
model computes layer i+1 and published (readers waiting on it go on) once
copied; ``wait_for_save`` seals them. Copies finish before the step ends, so
vLLM may reuse the blocks at once.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from .config import ConnectorConfig
from .keys import rank_path
from .loader import LoadJob
from .metadata import MaruConnectorMetadata
from .paged import PagedLayout, layer_ops
from .store import ChunkStore


@dataclass
class _Saving:
    chunk: Any
    block_ids: Sequence[int]
    req_id: str


class WorkerSide:
    """Worker-side state: the registered caches, the step's loads and saves."""

    def __init__(self, cfg: ConnectorConfig, store: ChunkStore) -> None:
        self.cfg, self.store = cfg, store
        self.layer_index: Dict[str, int] = {}
        self.caches: List[Any] = []
        self.layout: Optional[PagedLayout] = None
        self.loading: Optional[LoadJob] = None  # this step's synchronous loads
        self.async_jobs: List[LoadJob] = []
        self.failed: Set[int] = set()
        self.saving: List[_Saving] = []  # the chunks this step stores
        self.copying: Optional[Tuple[int, Future]] = None  # (layer, its copy)
        self.save_meta: Optional[MaruConnectorMetadata] = None
        # One thread for the step's layer-wise loads, one for asynchronous
        # ones: a long asynchronous load never delays the model's layers.
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="maru-vllm-load")
        self.async_pool = ThreadPoolExecutor(1, thread_name_prefix="maru-vllm-async")

    def rank_path(self, path: str) -> str:
        """This rank's name of a chunk the scheduler named for rank 0."""
        return rank_path(path, self.cfg.tp_rank)

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        """Takes the per-layer caches, in layer order (vLLM's dict order)."""
        self.layer_index = {name: i for i, name in enumerate(kv_caches)}
        self.caches = list(kv_caches.values())
        self.layout = PagedLayout.of(self.caches, self.cfg.chunk_blocks)

    def _job(self, specs: Sequence[Any]) -> LoadJob:
        assert self.layout is not None, "register_kv_caches comes first"
        return LoadJob(self.store, self.layout, self.caches, specs, self.rank_path,
                       self.cfg.load_timeout_s)

    # --- loading ---------------------------------------------------------

    def bind(self, meta: MaruConnectorMetadata) -> None:
        """The step's metadata, before the model runs."""
        self.save_meta, self.saving, self.copying = meta, [], None

    def start_load_kv(self, meta: MaruConnectorMetadata) -> None:
        """Starts this step's loads: layer by layer in a thread (the model
        waits per layer), or all of them now (``maru_layerwise`` off)."""
        sync = [s for s in meta.loads if not s.is_async]
        for spec in (s for s in meta.loads if s.is_async):
            job = self._job([spec])
            self.async_jobs.append(job)
            self.async_pool.submit(job.run)
        if not sync:
            return
        self.loading = self._job(sync)
        if self.cfg.layerwise:
            self.pool.submit(self.loading.run)
        else:
            self.loading.run()

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Blocks until this step's loads have copied ``layer_name``."""
        if self.loading is not None:
            self.loading.wait_layer(self.layer_index[layer_name])

    def _finish_loading(self) -> None:
        if self.loading is not None:
            self.loading.done.wait()
            self.failed |= self.loading.failed_blocks()
            self.loading = None

    # --- saving ----------------------------------------------------------

    def save_kv_layer(self, layer_name: str, kv_layer: Any) -> None:
        """Starts copying ``layer_name`` of the chunks completed in this
        step into the pool, and publishes the layer before it once copied:
        layer i is copied while the model computes layer i+1."""
        meta = self.save_meta
        if meta is not None and meta.saves:
            self._create(meta)  # at the first layer of the step
        self._publish_copied()
        if not self.saving:
            return
        layer = self.layer_index[layer_name]
        assert self.layout is not None
        ops = layer_ops(self.layout, kv_layer, layer, [(s.chunk, s.block_ids) for s in self.saving])
        self.copying = (layer, self.store.write_async(ops))

    def _publish_copied(self) -> None:
        """Waits for the layer being copied, drops the chunks that must not
        be stored, and publishes the layer in the others."""
        if self.copying is None:
            self._drop(set())
            return
        layer, future = self.copying
        self.copying = None
        per_chunk = 2 * self.cfg.chunk_blocks
        self._drop({i // per_chunk for i, e in enumerate(future.result()) if e is not None})
        for s in self.saving:
            self.store.publish(s.chunk, layer)

    def _drop(self, bad: Set[int]) -> None:
        """Abandons (releases unsealed) the chunks at ``bad`` and those of
        requests whose load failed in this step: what the model computed
        after a layer that was not loaded is wrong, so it is never published.
        Readers waiting on an abandoned chunk are told, never served."""
        failed = self.loading.failed_requests() if self.loading is not None else set()
        keep = []
        for i, s in enumerate(self.saving):
            if i in bad or s.req_id in failed:
                s.chunk.release()
            else:
                keep.append(s)
        self.saving = keep

    def _create(self, meta: MaruConnectorMetadata) -> None:
        assert self.layout is not None
        specs = [(s.req_id, c) for s in meta.saves for c in s.chunks]
        made = self.store.create(
            [self.rank_path(c.path) for _, c in specs], [self.layout.chunk_bytes] * len(specs),
            [self.rank_path(c.parent) if c.parent else None for _, c in specs],
            self.layout.num_layers)
        # EEXIST: stored (or being stored) by another instance; ENOSPC: no
        # room even after eviction. Either way this chunk is not stored here.
        self.saving = [_Saving(chunk, c.block_ids, req_id)
                       for chunk, (req_id, c) in zip(made, specs) if not isinstance(chunk, OSError)]
        meta.saves = []  # created once per step

    def wait_for_save(self) -> None:
        """Seals this step's chunks (one round trip) and lets the loads finish."""
        try:
            self._publish_copied()
            if self.saving:
                self.store.seal([s.chunk for s in self.saving])
        finally:
            self.store.release([s.chunk for s in self.saving])
            self.saving = []
            self.save_meta = None
            self._finish_loading()

    # --- completion --------------------------------------------------------

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]],
                                                               Optional[Set[str]]]:
        """(None, ids of requests whose asynchronous load completed)."""
        done = [j for j in self.async_jobs if j.done.is_set()]
        if not done:
            return None, None
        self.async_jobs = [j for j in self.async_jobs if not j.done.is_set()]
        recved: Set[str] = set()
        for job in done:
            self.failed |= job.failed_blocks()
            recved.update(job.req_ids())
        return None, recved

    def get_block_ids_with_load_errors(self) -> Set[int]:
        """Blocks that were to be loaded and were not: vLLM recomputes them."""
        self._finish_loading()
        out, self.failed = self.failed, set()
        return out

    def shutdown(self) -> None:
        """Waits for loads in flight and stops the load threads."""
        self._finish_loading()
        self.pool.shutdown(wait=True)
        self.async_pool.shutdown(wait=True)
