"""MaruConnector: the vLLM v1 KV connector that shares KV through a Maru pool.

vLLM's factory imports ``kv_connector_module_path``, takes the class named
``kv_connector`` from it and builds it as ``cls(vllm_config, role,
kv_cache_config)`` once in the scheduler process and once in every worker.

Interface: :class:`MaruConnector` subclasses vLLM's own
``KVConnectorBase_V1`` and its metadata vLLM's ``KVConnectorMetadata`` when
vLLM is importable; otherwise the stand-ins of :mod:`maru._upstream.vllm`,
which mirror vLLM's vllm/distributed/kv_transfer/kv_connector/v1/base.py at
commit :data:`maru.vllm.VLLM_COMMIT` (checked against python/contracts/vllm.json).
It implements every abstract method and every method vLLM calls there, and
``get_transfer_results``, which newer main calls instead of
``get_finished``. See docs/integrations.md#vllm.

What it does: the scheduler side names the prompt's chunks (a hash chain
over ``maru_chunk_blocks`` blocks of tokens) and counts the stored prefix,
every rank's part, with one ``count_prefix``; the worker side loads those
chunks into the request's blocks layer by layer while the model runs
(``open_partial``, ``wait_part``, one ``read_into_batch`` per layer), and
stores the chunks a step completes layer by layer (``create_batch`` with one
part per layer, ``write_from_batch`` and ``publish_part`` per layer,
``seal_batch`` at the end), so another instance can load layer i while this
one computes i+1. Caches of the FlashAttention, FlashInfer (NHD or HND) and
MLA layouts, any dtype. A chunk that is missing, evicted or abandoned by a
writer that died is reported through ``get_block_ids_with_load_errors`` and
recomputed; an error inside one of vLLM's hooks is logged and the blocks it
concerns are recomputed, never raised into the engine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Set, Tuple

from ..client import Client
from .base import (KVConnectorBase_V1, KVConnectorPromMetrics, KVConnectorRole,
                   KVConnectorStats, KVConnectorTransferResults)
from .config import ConnectorConfig
from .metadata import ChunkSpec, LoadSpec, MaruConnectorMetadata
from .scheduler import SchedulerSide
from .store import make_store
from .worker import WorkerSide

if TYPE_CHECKING:  # vLLM's own types, for readers and type checkers only
    import torch
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

logger = logging.getLogger(__package__)  # "maru.vllm", what users configure

#: The counters of :class:`MaruConnectorStats` and what each counts.
STATS = {
    "lookups": "prompts looked up in the pool (scheduler)",
    "hit_tokens": "tokens found in the pool beyond vLLM's own prefix cache (scheduler)",
    "loaded_chunks": "chunks loaded into the paged cache (workers)",
    "loaded_bytes": "bytes loaded into the paged cache (workers)",
    "load_failed_blocks": "blocks that could not be loaded and were recomputed (workers)",
    "saved_chunks": "chunks stored (workers)",
    "saved_bytes": "bytes stored (workers)",
    "save_skipped_chunks": "chunks not stored: there already, no room, or an error (workers)",
}


def _is_scheduler(role: Any) -> bool:
    return getattr(role, "name", role) in ("SCHEDULER", 0)


class MaruConnector(KVConnectorBase_V1):
    """The vLLM v1 KV connector over Maru; one object per role, as vLLM makes them.

    ``MaruConnector(vllm_config, role, kv_cache_config)``: vLLM's
    ``VllmConfig``, ``KVConnectorRole`` and ``KVCacheConfig``; settings come
    from ``kv_transfer_config.kv_connector_extra_config`` (see
    :class:`ConnectorConfig`). Raises ValueError for settings it cannot
    serve (decode context parallelism, several KV cache groups, bad keys).
    """

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "Optional[KVCacheConfig]" = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        groups = getattr(kv_cache_config, "kv_cache_groups", None)
        if groups is not None and len(groups) > 1:
            raise ValueError(f"maru: {len(groups)} KV cache groups (a hybrid model); the vLLM "
                             "connector serves models with one")
        self.config = ConnectorConfig.from_vllm(vllm_config, self._extra_config(vllm_config))
        scheduler = _is_scheduler(role)
        name = f"{self.config.instance}-{'sched' if scheduler else 'worker'}"
        self.client = Client(self.config.server, instance=name)
        store = make_store(self.client, self.config.retry_after_s)
        self._scheduler = SchedulerSide(self.config, store) if scheduler else None
        self._worker = None if scheduler else WorkerSide(self.config, store)
        self._handshake: Dict[int, Any] = {}

    def _extra_config(self, vllm_config: "VllmConfig") -> Optional[Dict[str, Any]]:
        """The settings to read instead of ``kv_connector_extra_config``
        (None: that dict); subclasses that speak another dialect of keys
        (maru_vllm.MaruKVConnector) translate here."""
        return None

    # ---------------- properties and switches ----------------

    @property
    def supports_eagle_prefix_cache_hashing(self) -> bool:
        """False: chunks are named by their tokens alone, not by vLLM's block
        hashes, so the engines sharing a pool need not agree on EAGLE keys."""
        return False

    def set_eagle_prefix_cache_hashing(self, enabled: bool) -> None:
        """Records vLLM's choice (chunk names do not depend on it)."""
        self.use_eagle_prefix_cache_hashing = bool(enabled)

    # ---------------- worker side ----------------

    def bind_connector_metadata(self, connector_metadata: MaruConnectorMetadata) -> None:
        """Called by the model runner before each forward step."""
        super().bind_connector_metadata(connector_metadata)
        self._worker_side().bind(connector_metadata)

    def register_kv_caches(self, kv_caches: Dict[str, "torch.Tensor"]) -> None:
        """This worker's per-layer paged caches (its pipeline stage's layers).
        Raises ValueError for a cache of no layout it knows."""
        self._worker_side().register_kv_caches(kv_caches)

    def register_cross_layers_kv_cache(self, kv_cache: "torch.Tensor",
                                       attn_backend: Any) -> None:
        """Not used: prefer_cross_layer_blocks is False, so vLLM registers
        per-layer caches. Raises ValueError if called anyway."""
        raise ValueError("maru: the vLLM connector takes per-layer caches "
                         "(prefer_cross_layer_blocks is False)")

    def set_host_xfer_buffer_ops(self, copy_operation: Any) -> None:
        """Not needed: chunks are copied straight between pool and cache."""
        return None

    def handle_preemptions(self, kv_connector_metadata: Any) -> None:
        """Called every step before the blocks of preempted requests are
        reused; takes the step's metadata (vLLM at the pinned commit) or a
        set of request ids (older vLLM). Saves end within their step, so
        nothing of a preempted request is still copied out of its blocks."""
        if isinstance(kv_connector_metadata, MaruConnectorMetadata):
            preempted = kv_connector_metadata.preempted
        elif isinstance(kv_connector_metadata, (set, frozenset, list, tuple)):
            preempted = list(kv_connector_metadata)
        elif kv_connector_metadata is None:
            preempted = []
        else:
            logger.warning("maru.vllm: handle_preemptions got %s", type(kv_connector_metadata))
            return
        if preempted:
            logger.debug("maru.vllm: preempted %s", preempted)

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        """Starts loading this step's chunks into the paged cache."""
        meta = self._get_connector_metadata()
        try:
            self._worker_side().start_load_kv(meta)
        except Exception:
            logger.exception("maru.vllm: loads not started; their blocks are recomputed")
            self._worker_side().fail_loads(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Blocks until ``layer_name`` of this step's loads is in the cache."""
        try:
            self._worker_side().wait_for_layer_load(layer_name)
        except Exception:
            logger.exception("maru.vllm: waiting for layer %s", layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: "torch.Tensor",
                      attn_metadata: "AttentionMetadata", **kwargs: Any) -> None:
        """Stores and publishes ``layer_name`` of the chunks this step completes."""
        try:
            self._worker_side().save_kv_layer(layer_name)
        except Exception:
            logger.exception("maru.vllm: saving layer %s; this step's chunks are not stored",
                             layer_name)
            self._worker_side().abandon_saves()

    def wait_for_save(self) -> None:
        """Seals this step's chunks; the blocks may be reused after it."""
        try:
            self._worker_side().wait_for_save()
        except Exception:
            logger.exception("maru.vllm: sealing this step's chunks")
            self._worker_side().abandon_saves()

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]],
                                                               Optional[Set[str]]]:
        """(finished saves: None, they end with the step; finished async loads)."""
        recved, _ = self._worker_side().finished_loads()
        return None, (recved or None)

    def get_transfer_results(self, finished_req_ids: Set[str]) -> Any:
        """Newer vLLM's get_finished: a ``KVConnectorTransferResults`` with the
        finished asynchronous loads; those that failed in part are also in
        ``failed_recving`` (their blocks in get_block_ids_with_load_errors)."""
        recved, failed = self._worker_side().finished_loads()
        return KVConnectorTransferResults(finished_sending=set(), finished_recving=recved,
                                          failed_recving=failed)

    def get_block_ids_with_load_errors(self) -> Set[int]:
        """Blocks that could not be loaded in the last step (vLLM recomputes them)."""
        return self._worker_side().get_block_ids_with_load_errors()

    def get_kv_connector_stats(self) -> "Optional[MaruConnectorStats]":
        """This side's counters since the last call (:data:`STATS`), or None
        if nothing happened."""
        side = self._worker if self._worker is not None else self._scheduler
        data = {k: v for k, v in side.stats.items() if v}
        for k in side.stats:
            side.stats[k] = 0
        return MaruConnectorStats(data=data) if data else None

    def shutdown(self) -> None:
        """Waits for loads in flight, then closes the client."""
        try:
            if self._worker is not None:
                self._worker.shutdown()
        finally:
            self.client.close()

    # ---------------- scheduler side ----------------

    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        """(tokens beyond ``num_computed_tokens`` found in the pool, load asynchronously)."""
        try:
            return self._scheduler_side().get_num_new_matched_tokens(request,
                                                                     num_computed_tokens)
        except Exception:
            logger.exception("maru.vllm: lookup of request %s; computing it",
                             getattr(request, "request_id", "?"))
            return 0, False

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int) -> None:
        """Records the request's blocks and what to load into them."""
        side = self._scheduler_side()
        try:
            side.update_state_after_alloc(request, blocks, num_external_tokens)
        except Exception:
            logger.exception("maru.vllm: loads of request %s not planned; recomputed",
                             getattr(request, "request_id", "?"))
            if num_external_tokens > 0:  # the scheduler counts them: have them failed
                side.pending_loads.append(_failing_load(request, blocks, num_external_tokens,
                                                        side))

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> MaruConnectorMetadata:
        """This step's loads and saves, for the workers."""
        side = self._scheduler_side()
        try:
            return side.build_connector_meta(scheduler_output)
        except Exception:
            logger.exception("maru.vllm: step metadata; only its loads are sent")
            meta, side.pending_loads = MaruConnectorMetadata(loads=side.pending_loads), []
            return meta

    def request_finished(self, request: "Request",
                         block_ids: List[int]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """Forgets the request (giving its chunks its retention hint); its
        blocks may be freed now: (False, None)."""
        try:
            return self._scheduler_side().request_finished(request, block_ids)
        except Exception:
            logger.exception("maru.vllm: request_finished")
            return False, None

    def update_connector_output(self, connector_output: Any) -> None:
        """Nothing to learn from the workers' output: (no-op)."""
        return None

    def take_events(self) -> Iterable[Any]:
        """No KV events: the pool is not vLLM's prefix cache."""
        return ()

    def bind_gpu_block_pool(self, gpu_block_pool: Any) -> None:
        """Not needed: blocks are named by the scheduler output."""
        return None

    def has_pending_push_work(self) -> bool:
        """False: no push-mode transfers."""
        return False

    def reset_cache(self) -> Optional[bool]:
        """None (not reset): the pool is shared with other instances, which a
        reset of this one must not empty; evict with ``maructl`` instead."""
        logger.info("maru.vllm: the shared pool is not reset by one instance")
        return None

    def get_finished_count(self) -> Optional[int]:
        """None: every worker reports every asynchronous load."""
        return None

    def set_xfer_handshake_metadata(self, metadata: Dict[int, Any]) -> None:
        """Takes the workers' handshake metadata (they have none to give:
        instances meet through the pool, not each other)."""
        self._handshake = dict(metadata or {})

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: "VllmConfig") -> Optional[str]:
        """NHD: a block's K (or V) is one run, copied by the library's batch
        calls. HND caches work too (through torch views, slower)."""
        return "NHD"

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: Dict[str, Any]) -> bool:
        """Layer-wise loads and saves run Python between layers."""
        return True

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[Dict[str, Any]] = None
                                 ) -> "MaruConnectorStats":
        """The stats over ``data`` (the dict the scheduler aggregated), as
        vLLM's stat logger asks for them."""
        return MaruConnectorStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config: "VllmConfig", metric_types: Dict[Any, Any],
                           labelnames: List[str],
                           per_engine_labelvalues: Dict[int, List[object]]
                           ) -> "MaruPromMetrics":
        """One Prometheus counter per :data:`STATS` entry, per engine."""
        return MaruPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    # ---------------- helpers ----------------

    def _scheduler_side(self) -> SchedulerSide:
        if self._scheduler is None:
            raise RuntimeError("maru: a scheduler-side call on the worker-side connector")
        return self._scheduler

    def _worker_side(self) -> WorkerSide:
        if self._worker is None:
            raise RuntimeError("maru: a worker-side call on the scheduler-side connector")
        return self._worker


def _failing_load(request: Any, blocks: Any, n: int, side: SchedulerSide) -> LoadSpec:
    """A load that fails on every worker: its blocks are reported and recomputed."""
    st = side.requests.get(request.request_id)
    start = st.local if st is not None and st.local is not None else 0
    bs = side.cfg.block_size
    ids = list(blocks.get_block_ids()[0])[start // bs:(start + n) // bs] if blocks else []
    return LoadSpec(request.request_id, [ChunkSpec("", ids)], side.cfg.async_load)


@dataclass
class MaruConnectorStats(KVConnectorStats):
    """The connector's counters (:data:`STATS`), summed across workers and intervals."""

    def reset(self) -> None:
        """Clears the counters."""
        self.data = {}

    def aggregate(self, other: KVConnectorStats) -> "MaruConnectorStats":
        """Adds ``other``'s counters to these."""
        for key, value in (other.data or {}).items():
            if isinstance(value, (int, float)):
                self.data[key] = self.data.get(key, 0) + value
        return self

    def reduce(self) -> Dict[str, int]:
        """The counters of the interval."""
        return {k: self.data.get(k, 0) for k in STATS if self.data.get(k)}

    def is_empty(self) -> bool:
        """True if nothing was counted."""
        return not any(self.data.get(k) for k in STATS)


class MaruPromMetrics(KVConnectorPromMetrics):
    """A Prometheus counter ``vllm:maru_<name>`` per :data:`STATS` entry."""

    def __init__(self, vllm_config: "VllmConfig", metric_types: Dict[Any, Any],
                 labelnames: List[str], per_engine_labelvalues: Dict[int, List[object]]) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self.counters = {
            key: self.make_per_engine(self._counter_cls(
                name=f"vllm:maru_{key}", documentation=f"Maru: {doc}",
                labelnames=labelnames))
            for key, doc in STATS.items()}

    def observe(self, transfer_stats_data: Dict[str, Any], engine_idx: int = 0) -> None:
        """Adds an engine's counters of the interval."""
        for key, value in (transfer_stats_data or {}).items():
            per_engine = self.counters.get(key)
            if per_engine is not None and engine_idx in per_engine and value:
                per_engine[engine_idx].inc(value)


__all__ = ["MaruConnector", "MaruConnectorStats", "MaruPromMetrics", "STATS"]
