"""The worker side of the connector: loads into and saves from the paged cache.

vLLM calls, per forward step (v1/worker/kv_connector_model_runner_mixin.py:
_get_kv_connector_output): ``handle_preemptions``, ``bind_connector_metadata``,
``start_load_kv`` before the model runs (after it on newer main when the
step has no synchronous load); in each attention layer
``wait_for_layer_load(name)`` before it reads the cache and
``save_kv_layer(name, kv_layer, ...)`` after it wrote the step's KV
(model_executor/layers/attention/kv_transfer_utils.py:maybe_transfer_kv_layer);
``wait_for_save`` when the forward ends; then ``get_finished`` (or
``get_transfer_results``) and ``get_block_ids_with_load_errors``.

Saving is layer-wise too: the chunks completed in this step are created at
the first layer with one part per layer; layer i is copied in while the
model computes layer i+1 and published (readers waiting on it go on) once
copied; ``wait_for_save`` seals them. Copies finish before the step ends, so
vLLM may reuse the blocks at once.

A worker registers only its own pipeline stage's layers; each stage and
tensor-parallel rank stores its part of a chunk under its own path
(keys.rank_path).
"""

from __future__ import annotations

import re
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from .config import ConnectorConfig
from .keys import rank_path
from .loader import LoadJob
from .metadata import MaruConnectorMetadata
from .paged import LayerBuffers, PagedLayout, layer_ops
from .store import ChunkStore


@dataclass
class _Saving:
    chunk: Any
    block_ids: Sequence[int]
    req_id: str


def _natural(name: str) -> Tuple:
    """Sort key: the numbers in a layer name as numbers (layers.10 after layers.9)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


class WorkerSide:
    """Worker-side state: the registered caches, the step's loads and saves."""

    def __init__(self, cfg: ConnectorConfig, store: ChunkStore) -> None:
        self.cfg, self.store = cfg, store
        self.layer_index: Dict[str, int] = {}
        self.caches: List[Any] = []
        self.buffers: List[LayerBuffers] = []
        self.layout: Optional[PagedLayout] = None
        self.loading: Optional[LoadJob] = None  # this step's synchronous loads
        self.async_jobs: List[LoadJob] = []
        self.failed: Set[int] = set()
        self.failed_recving: Set[str] = set()
        self.saving: List[_Saving] = []  # the chunks this step stores
        self.copying: Optional[Tuple[int, Future]] = None  # (layer, its copy)
        self.copied: Set[int] = set()  # layers copied in this step
        self.save_meta: Optional[MaruConnectorMetadata] = None
        self.stats: Dict[str, int] = {}
        self.reset_stats()
        # One thread for the step's layer-wise loads, one for asynchronous
        # ones: a long asynchronous load never delays the model's layers.
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="maru-vllm-load")
        self.async_pool = ThreadPoolExecutor(1, thread_name_prefix="maru-vllm-async")

    def reset_stats(self) -> None:
        self.stats = {"loaded_chunks": 0, "loaded_bytes": 0, "load_failed_blocks": 0,
                      "saved_chunks": 0, "saved_bytes": 0, "save_skipped_chunks": 0}

    def rank_path(self, path: str) -> str:
        """This rank's name of a chunk."""
        return rank_path(path, self.cfg.kv_tp_rank, self.cfg.pp_rank)

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        """Takes this worker's per-layer caches. Parts follow the layers'
        names in natural order (not the dict's order); layers that share one
        tensor (vLLM's KV sharing) share its part. Raises ValueError for a
        cache of no known layout (paged.PagedLayout)."""
        if not kv_caches:
            raise ValueError("maru: register_kv_caches got no layer")
        parts: Dict[Tuple, int] = {}
        tensors: List[Any] = []
        index: Dict[str, int] = {}
        for name in sorted(kv_caches, key=_natural):
            kv = kv_caches[name]
            ident = (kv.data_ptr(), tuple(kv.shape), tuple(kv.stride()))
            if ident not in parts:
                parts[ident] = len(tensors)
                tensors.append(kv)
            index[name] = parts[ident]
        layout = PagedLayout.of(tensors, self.cfg.block_size, self.cfg.chunk_blocks,
                                self.cfg.backend)
        if (layout.kind == "mla") != self.cfg.mla:
            raise ValueError(f"maru: the cache is {'' if layout.kind == 'mla' else 'not '}an "
                             f"MLA cache but model_config.use_mla is {self.cfg.mla}")
        self.layer_index, self.caches, self.layout = index, tensors, layout
        self.buffers = [LayerBuffers(layout, kv) for kv in tensors]

    def _job(self, specs: Sequence[Any]) -> LoadJob:
        if self.layout is None:
            raise RuntimeError("maru: a load before register_kv_caches")
        return LoadJob(self.store, self.layout, self.buffers, specs, self.rank_path,
                       self.cfg.load_timeout_s)

    # --- loading ---------------------------------------------------------

    def bind(self, meta: MaruConnectorMetadata) -> None:
        """The step's metadata, before the model runs."""
        self.save_meta, self.saving, self.copying = meta, [], None
        self.copied = set()

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

    def fail_loads(self, meta: MaruConnectorMetadata) -> None:
        """Reports every block this step was to load as failed (vLLM
        recomputes them): what start_load_kv does when it cannot start."""
        for spec in meta.loads:
            for c in spec.chunks:
                self.failed.update(c.block_ids)
            if spec.is_async:
                self.failed_recving.add(spec.req_id)

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Blocks until this step's loads have copied ``layer_name``."""
        if self.loading is not None:
            self.loading.wait_layer(self.layer_index[layer_name])

    def _finish_loading(self) -> None:
        if self.loading is not None:
            self.loading.done.wait()
            self._account(self.loading)
            self.loading = None

    def _account(self, job: LoadJob) -> None:
        failed = job.failed_blocks()
        self.failed |= failed
        chunks, nbytes = job.loaded()
        self.stats["loaded_chunks"] += chunks
        self.stats["loaded_bytes"] += nbytes
        self.stats["load_failed_blocks"] += len(failed)

    # --- saving ----------------------------------------------------------

    def save_kv_layer(self, layer_name: str) -> None:
        """Starts copying ``layer_name`` of the chunks completed in this
        step into the pool, and publishes the layer before it once copied:
        layer i is copied while the model computes layer i+1."""
        meta = self.save_meta
        if meta is not None and meta.saves:
            self._create(meta)  # at the first layer of the step
        layer = self.layer_index[layer_name]
        if layer in self.copied:  # a layer sharing another's cache
            return
        self._publish_copied()
        if not self.saving:
            return
        assert self.layout is not None
        ops = layer_ops(self.layout, self.buffers[layer], layer,
                        [(s.chunk, s.block_ids, 0) for s in self.saving])
        self.copying = (layer, self.store.write_async(ops))
        self.copied.add(layer)

    def _publish_copied(self) -> None:
        """Waits for the layer being copied, drops the chunks that must not
        be stored, and publishes the layer in the others."""
        if self.copying is None:
            self._drop(set())
            return
        layer, future = self.copying
        self.copying = None
        per_chunk = self.layout.halves * self.cfg.chunk_blocks
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
                self.stats["save_skipped_chunks"] += 1
            else:
                keep.append(s)
        self.saving = keep

    def _create(self, meta: MaruConnectorMetadata) -> None:
        assert self.layout is not None
        specs = [(s.req_id, c) for s in meta.saves for c in s.chunks]
        meta.saves = []  # created once per step
        if not self.cfg.stores:
            return
        made = self.store.create(
            [self.rank_path(c.path) for _, c in specs], [self.layout.chunk_bytes] * len(specs),
            [self.rank_path(c.parent) if c.parent else None for _, c in specs],
            self.layout.num_layers)
        # EEXIST: stored (or being stored) by another instance; ENOSPC: no
        # room even after eviction. Either way this chunk is not stored here.
        self.saving = [_Saving(chunk, c.block_ids, req_id)
                       for chunk, (req_id, c) in zip(made, specs) if not isinstance(chunk, OSError)]
        self.stats["save_skipped_chunks"] += len(specs) - len(self.saving)

    def wait_for_save(self) -> None:
        """Seals this step's chunks (one round trip) and lets the loads finish."""
        try:
            self._publish_copied()
            if self.saving:
                errors = self.store.seal([s.chunk for s in self.saving])
                sealed = sum(e is None for e in errors)
                self.stats["saved_chunks"] += sealed
                self.stats["saved_bytes"] += sealed * self.layout.chunk_bytes
                self.stats["save_skipped_chunks"] += len(errors) - sealed
        finally:
            self.store.release([s.chunk for s in self.saving])
            self.saving = []
            self.save_meta = None
            self._finish_loading()

    def abandon_saves(self) -> None:
        """Releases this step's chunks unsealed (after an error): nobody reads them."""
        try:
            self.store.release([s.chunk for s in self.saving])
        finally:
            self.stats["save_skipped_chunks"] += len(self.saving)
            self.saving, self.copying, self.save_meta = [], None, None

    # --- completion --------------------------------------------------------

    def finished_loads(self) -> Tuple[Set[str], Set[str]]:
        """(requests whose asynchronous load ended, those of them that failed
        in part): each reported once, as vLLM expects every worker to."""
        done = [j for j in self.async_jobs if j.done.is_set()]
        failed: Set[str] = set(self.failed_recving)
        self.failed_recving = set()
        recved: Set[str] = set(failed)
        if done:
            self.async_jobs = [j for j in self.async_jobs if not j.done.is_set()]
        for job in done:
            self._account(job)
            recved.update(job.req_ids())
            failed |= job.failed_requests()
        return recved, failed

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
