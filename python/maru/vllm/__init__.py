"""maru.vllm: a vLLM v1 KV connector that shares KV through a Maru pool.

Configure vLLM with::

    --kv-transfer-config '{"kv_connector": "MaruConnector",
        "kv_connector_module_path": "maru.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"maru_server": "unix:///run/maru/maru.sock"}}'

Interface followed: vLLM's ``KVConnectorBase_V1``
(vllm/distributed/kv_transfer/kv_connector/v1/base.py at vLLM commit
003df2961dd8830c317a61f9745ccd557da9fa06, 2025/26 main; the roles and
call order are those of v0.9 and later), the paged layout of the
FlashAttention backend (``[2, num_blocks, block_size, num_kv_heads,
head_size]`` per layer, NHD). vLLM is not installed here: the class is
duck-typed (same method names and signatures, no vllm import) and is
tested through a harness that makes vLLM's calls in vLLM's order on a small
transformer (examples/tiny_llm/test_vllm.py), not inside vLLM. See
docs/integrations.md#vllm.

What it does: the scheduler side names the prompt's chunks (a hash chain
over ``maru_chunk_blocks`` blocks of tokens) and counts the stored prefix
with one ``count_prefix``; the worker side loads those chunks into the
request's blocks layer by layer while the model runs (``open_partial``,
``wait_part``, one ``read_into_batch`` per layer: K and V halves of each
block to their places in the paged cache), and stores the chunks a step
completes layer by layer (``create_batch`` with one part per layer,
``write_from_batch`` and ``publish_part`` per layer, ``seal_batch`` at the
end), so another instance can load layer i while this one computes i+1.
A chunk that is missing, evicted or abandoned by a writer that died is
reported through ``get_block_ids_with_load_errors`` and recomputed; no
layer that was not published is ever read.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Dict, Iterable, Optional, Set, Tuple

from ..client import Client
from .config import ConnectorConfig
from .metadata import ChunkSpec, LoadSpec, MaruConnectorMetadata, SaveSpec
from .scheduler import SchedulerSide
from .store import make_store
from .worker import WorkerSide

if TYPE_CHECKING:  # vLLM's own types, for readers and type checkers only
    import torch


class KVConnectorRole(enum.Enum):
    """vLLM's ``KVConnectorRole`` (same names and values), for use without vLLM."""

    SCHEDULER = 0
    WORKER = 1


def _is_scheduler(role: Any) -> bool:
    return getattr(role, "name", role) in ("SCHEDULER", 0)


class MaruConnector:
    """The vLLM v1 KV connector over Maru; one object per role, as vLLM makes them.

    ``MaruConnector(vllm_config, role, kv_cache_config=None)``: vLLM passes
    its ``VllmConfig`` and ``KVConnectorRole``; settings come from
    ``kv_transfer_config.kv_connector_extra_config`` (see
    :class:`ConnectorConfig`).
    """

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        self._vllm_config = vllm_config
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._kv_cache_config = kv_cache_config
        self._role = role
        self._connector_metadata: Optional[MaruConnectorMetadata] = None
        self.config = ConnectorConfig.from_vllm(vllm_config)
        name = f"{self.config.instance}-{'sched' if _is_scheduler(role) else 'worker'}"
        self.client = Client(self.config.server, instance=name)
        store = make_store(self.client)
        self._scheduler = SchedulerSide(self.config, store) if _is_scheduler(role) else None
        self._worker = None if _is_scheduler(role) else WorkerSide(self.config, store)

    @property
    def role(self) -> Any:
        return self._role

    # ---------------- worker side ----------------

    def bind_connector_metadata(self, connector_metadata: MaruConnectorMetadata) -> None:
        """Called by the model runner before each forward step."""
        self._connector_metadata = connector_metadata
        self._worker_side().bind(connector_metadata)

    def clear_connector_metadata(self) -> None:
        """Called by the model runner after each forward step."""
        self._connector_metadata = None

    def has_connector_metadata(self) -> bool:
        return self._connector_metadata is not None

    def _get_connector_metadata(self) -> MaruConnectorMetadata:
        assert self._connector_metadata is not None
        return self._connector_metadata

    def register_kv_caches(self, kv_caches: Dict[str, "torch.Tensor"]) -> None:
        """The per-layer paged caches, in layer order."""
        self._worker_side().register_kv_caches(kv_caches)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """Starts loading this step's chunks into the paged cache."""
        self._worker_side().start_load_kv(self._get_connector_metadata())

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Blocks until ``layer_name`` of this step's loads is in the cache."""
        self._worker_side().wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: "torch.Tensor", attn_metadata: Any,
                      **kwargs: Any) -> None:
        """Stores and publishes ``layer_name`` of the chunks this step completes."""
        self._worker_side().save_kv_layer(layer_name, kv_layer)

    def wait_for_save(self) -> None:
        """Seals this step's chunks; the blocks may be reused after it."""
        self._worker_side().wait_for_save()

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]],
                                                               Optional[Set[str]]]:
        """(finished saves: None, they end with the step; finished async loads)."""
        return self._worker_side().get_finished(finished_req_ids)

    def get_block_ids_with_load_errors(self) -> Set[int]:
        """Blocks that could not be loaded in the last step (vLLM recomputes them)."""
        return self._worker_side().get_block_ids_with_load_errors()

    def shutdown(self) -> None:
        """Waits for loads in flight, then closes the client."""
        if self._worker is not None:
            self._worker.shutdown()
        self.client.close()

    # The base class's defaults, for the calls vLLM makes on every connector.
    def handle_preemptions(self, kv_connector_metadata: Any) -> None:
        return None

    def register_cross_layers_kv_cache(self, kv_cache: Any, attn_backend: Any) -> None:
        raise NotImplementedError(
            "maru: per-layer caches only (prefer_cross_layer_blocks is False)")

    def set_host_xfer_buffer_ops(self, copy_operation: Any) -> None:
        return None

    def get_kv_connector_stats(self) -> None:
        return None

    def get_kv_connector_kv_cache_events(self) -> None:
        return None

    def get_handshake_metadata(self) -> None:
        return None

    def build_connector_worker_meta(self) -> None:
        return None

    prefer_cross_layer_blocks = False
    requires_kv_delivery = False  # a best-effort cache: a lost save is a later miss

    # ---------------- scheduler side ----------------

    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        """(tokens beyond ``num_computed_tokens`` found in the pool, load asynchronously)."""
        return self._scheduler_side().get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None:
        """Records the request's blocks and what to load into them."""
        self._scheduler_side().update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> MaruConnectorMetadata:
        """This step's loads and saves, for the workers."""
        return self._scheduler_side().build_connector_meta(scheduler_output)

    def request_finished(self, request: Any, block_ids: Any) -> Tuple[bool, Optional[Dict]]:
        """Forgets the request; its blocks may be freed now."""
        return self._scheduler_side().request_finished(request, block_ids)

    def update_connector_output(self, connector_output: Any) -> None:
        return None

    def take_events(self) -> Iterable[Any]:
        return ()

    def bind_gpu_block_pool(self, gpu_block_pool: Any) -> None:
        return None

    def on_new_request(self, request: Any) -> None:
        return None

    def has_pending_push_work(self) -> bool:
        return False

    def reset_cache(self) -> None:
        return None

    def get_finished_count(self) -> None:
        return None

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: Any) -> Optional[str]:
        """The NHD layout: a block's K (or V) is one contiguous run."""
        return "NHD"

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: Dict[str, Any]) -> bool:
        """Layer-wise loads and saves run Python between layers."""
        return True

    @classmethod
    def build_kv_connector_stats(cls, data: Any = None) -> None:
        return None

    # ---------------- helpers ----------------

    def _scheduler_side(self) -> SchedulerSide:
        if self._scheduler is None:
            raise RuntimeError("maru: a scheduler-side call on the worker-side connector")
        return self._scheduler

    def _worker_side(self) -> WorkerSide:
        if self._worker is None:
            raise RuntimeError("maru: a worker-side call on the scheduler-side connector")
        return self._worker


__all__ = ["ChunkSpec", "ConnectorConfig", "KVConnectorRole", "LoadSpec", "MaruConnector",
           "MaruConnectorMetadata", "SaveSpec"]
