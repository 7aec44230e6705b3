"""Stand-ins for vLLM's KV-connector classes, used when vLLM is not importable.

They mirror, name for name, vLLM's
``vllm/distributed/kv_transfer/kv_connector/v1/base.py`` at commit
:data:`VLLM_COMMIT` (every method of ``KVConnectorBase_V1`` with its
parameters, defaults, annotations (as text where the types are vLLM's),
kind (classmethod, property, abstract) and default behaviour;
``KVConnectorRole``; the metadata ABCs; ``SupportsHMA``), and the two
classes of ``v1/metrics.py`` (at :data:`METRICS_COMMIT`) that a connector's
classmethods return: ``KVConnectorStats`` and ``KVConnectorPromMetrics``.
``KVConnectorTransferResults`` is the result of ``get_transfer_results``,
which newer vLLM main calls instead of ``get_finished`` (see
:data:`TRANSFER_RESULTS_SOURCE`). python/contracts/vllm.json holds the
facts these are checked against (python/tests/test_vllm_contract.py).

``maru.vllm`` subclasses vLLM's own classes when ``import vllm`` works and
these otherwise; nothing here is used when vLLM is installed.
"""

from __future__ import annotations

import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # vLLM's types, for readers and type checkers only
    import torch
    from vllm.config import VllmConfig
    from vllm.distributed.kv_events import KVCacheEvent, KVConnectorKVEvents
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import PromMetric, PromMetricT
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionBackend, AttentionMetadata
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

#: The vLLM commit whose v1/base.py these classes mirror.
VLLM_COMMIT = "003df2961dd8830c317a61f9745ccd557da9fa06"
#: The vLLM commit of v1/metrics.py (KVConnectorStats, KVConnectorPromMetrics).
METRICS_COMMIT = "578b601cd1f41074873532e99af8369bf75cb5a9"
#: Where KVConnectorTransferResults and its fields come from: the base.py of
#: a later main (blob 7ba3df63) for the first three, and the model runner
#: mixin that reads them, prefix_replay_checkpoints included
#: (v1/worker/kv_connector_model_runner_mixin.py:_get_kv_connector_output).
TRANSFER_RESULTS_SOURCE = ("7ba3df63cbe2e3e7aca19074bed2958311f46400",
                           "00f4240ee6458263d76cf51ca7901ce1350bb4d1")

logger = logging.getLogger(__name__)

# s_tensor_list, d_tensor_list, s_indices, d_indices, direction
CopyBlocksOp = Callable[
    [dict[str, "torch.Tensor"], dict[str, "torch.Tensor"], list[int], list[int],
     Literal["h2d", "d2h"]],
    None,
]


class SupportsHMA(ABC):
    """A connector that supports the hybrid memory allocator (vLLM's class)."""

    @abstractmethod
    def request_finished_all_groups(
        self,
        request: "Request",
        block_ids: tuple[list[int], ...],
    ) -> tuple[bool, dict[str, Any] | None]:
        """Called once when a request has finished for all KV cache groups."""
        raise NotImplementedError


def supports_hma(connector: Any) -> bool:
    """True if ``connector`` (a class or an instance) is a SupportsHMA."""
    if isinstance(connector, type):
        return issubclass(connector, SupportsHMA)
    return isinstance(connector, SupportsHMA)


class KVConnectorRole(enum.Enum):
    """Which process a connector runs in (vLLM's names and values)."""

    # Connector running in the scheduler process
    SCHEDULER = 0

    # Connector running in the worker process
    WORKER = 1


class KVConnectorHandshakeMetadata(ABC):  # noqa: B024
    """Out-of-band handshake metadata between P/D workers (serializable)."""


class KVConnectorMetadata(ABC):  # noqa: B024
    """Scheduler connector -> worker connector, once per step (an ABC with
    no abstract method, as vLLM's)."""


class KVConnectorWorkerMetadata(ABC):
    """Worker connector -> scheduler connector, aggregated across workers."""

    @abstractmethod
    def aggregate(
        self, other: "KVConnectorWorkerMetadata"
    ) -> "KVConnectorWorkerMetadata":
        """Aggregates metadata with another worker's."""


@dataclass
class KVConnectorTransferResults:
    """What ``get_transfer_results`` returns to the model runner (newer main).
    Failed receives also appear in ``finished_recving``."""

    finished_sending: set[str] = field(default_factory=set)
    finished_recving: set[str] = field(default_factory=set)
    failed_recving: set[str] = field(default_factory=set)
    prefix_replay_checkpoints: Any = None


class KVConnectorBase_V1(ABC):
    """vLLM's base class for KV connectors, as at :data:`VLLM_COMMIT`."""

    @property
    def prefer_cross_layer_blocks(self) -> bool:
        """Whether KV blocks holding all layers are preferred (False)."""
        return False

    @property
    def supports_eagle_prefix_cache_hashing(self) -> bool:
        """Whether this engine can use successor-aware EAGLE cache keys (False)."""
        return False

    @property
    def requires_kv_delivery(self) -> bool:
        """Whether KV handed off must be reliably delivered (the producer role)."""
        return self._kv_transfer_config.is_kv_producer

    def __init__(
        self,
        vllm_config: "VllmConfig",
        role: KVConnectorRole,
        kv_cache_config: "KVCacheConfig",
    ):
        logger.warning(
            "Initializing KVConnectorBase_V1. This API is experimental and "
            "subject to change in the future as we iterate the design."
        )
        self._connector_metadata: KVConnectorMetadata | None = None
        self._vllm_config = vllm_config
        if vllm_config.kv_transfer_config is not None:
            self._kv_transfer_config = vllm_config.kv_transfer_config
        else:
            raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
        self._kv_cache_config = kv_cache_config
        self._role = role
        self.use_eagle_prefix_cache_hashing = False

    def set_eagle_prefix_cache_hashing(self, enabled: bool) -> None:
        """Configures the engine-wide prefix-cache hash protocol."""
        self.use_eagle_prefix_cache_hashing = enabled

    @property
    def role(self) -> KVConnectorRole:
        """The role this connector was made for."""
        return self._role

    # Worker-side methods

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        """Sets the step's metadata, before the model runs."""
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        """Clears the step's metadata, after the model ran."""
        self._connector_metadata = None

    def _get_connector_metadata(self) -> KVConnectorMetadata:
        assert self._connector_metadata is not None
        return self._connector_metadata

    def has_connector_metadata(self) -> bool:
        """True while the step's metadata is set."""
        return self._connector_metadata is not None

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        """Takes the per-layer KV caches (no-op)."""
        return

    def register_cross_layers_kv_cache(
        self, kv_cache: torch.Tensor, attn_backend: type["AttentionBackend"]
    ):
        """Takes one KV cache tensor for all layers (no-op)."""
        return

    def set_host_xfer_buffer_ops(self, copy_operation: CopyBlocksOp):
        """Sets the host<->device block copy op (no-op)."""
        return

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata):
        """Handles preempted requests before their blocks are overwritten (no-op)."""
        return

    @abstractmethod
    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        """Starts loading KV into the paged buffer."""

    @abstractmethod
    def wait_for_layer_load(self, layer_name: str) -> None:
        """Blocks until ``layer_name``'s KV is loaded."""

    @abstractmethod
    def save_kv_layer(
        self,
        layer_name: str,
        kv_layer: torch.Tensor,
        attn_metadata: "AttentionMetadata",
        **kwargs: Any,
    ) -> None:
        """Starts saving one layer of the paged buffer."""

    @abstractmethod
    def wait_for_save(self):
        """Blocks until every save of the step is done."""

    def get_finished(
        self, finished_req_ids: set[str]
    ) -> tuple[set[str] | None, set[str] | None]:
        """(finished sends, finished receives): (None, None)."""
        return None, None

    def get_block_ids_with_load_errors(self) -> set[int]:
        """Blocks that failed to load: none."""
        return set()

    def shutdown(self):
        """Shuts the connector down."""
        return None

    def get_kv_connector_stats(self) -> "KVConnectorStats | None":
        """Stats of the last interval: None."""
        return None

    def get_kv_connector_kv_cache_events(self) -> "KVConnectorKVEvents | None":
        """KV cache events of the last interval: None."""
        return None

    def get_handshake_metadata(self) -> KVConnectorHandshakeMetadata | None:
        """Handshake metadata: None."""
        return None

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        """Worker metadata for the scheduler: None."""
        return None

    # Scheduler-side methods

    def bind_gpu_block_pool(self, gpu_block_pool: "BlockPool") -> None:
        """Takes the GPU block pool (no-op)."""
        return

    @abstractmethod
    def get_num_new_matched_tokens(
        self,
        request: "Request",
        num_computed_tokens: int,
    ) -> tuple[int | None, bool]:
        """(tokens loadable beyond ``num_computed_tokens``, load asynchronously)."""

    @abstractmethod
    def update_state_after_alloc(
        self, request: "Request", blocks: "KVCacheBlocks", num_external_tokens: int
    ):
        """Updates state after the request's blocks are allocated."""

    @abstractmethod
    def build_connector_meta(
        self, scheduler_output: SchedulerOutput
    ) -> KVConnectorMetadata:
        """The step's metadata for the workers."""

    def on_new_request(self, request: "Request") -> None:
        """Called when a request is added (no-op)."""
        return

    def update_connector_output(self, connector_output: KVConnectorOutput):
        """Takes the workers' connector output (no-op)."""
        return

    def request_finished(
        self,
        request: "Request",
        block_ids: list[int],
    ) -> tuple[bool, dict[str, Any] | None]:
        """(free the blocks later, KV transfer params): (False, None)."""
        return False, None

    def take_events(self) -> Iterable["KVCacheEvent"]:
        """New KV cache events: none."""
        return ()

    def has_pending_push_work(self) -> bool:
        """Whether push-mode work keeps the engine stepping: False."""
        return False

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: "VllmConfig") -> str | None:
        """The KV cache layout required (None); TypeError on the base itself."""
        if cls is KVConnectorBase_V1:
            raise TypeError(
                "get_required_kvcache_layout should not be called "
                "on the abstract base class"
            )
        return None

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict[str, Any]) -> bool:
        """Whether PIECEWISE CUDA graph mode is required: False."""
        return False

    def get_finished_count(self) -> int | None:
        """Expected completion count (None: the world size)."""
        return None

    @classmethod
    def build_kv_connector_stats(
        cls, data: dict[str, Any] | None = None
    ) -> "KVConnectorStats | None":
        """The connector's KVConnectorStats over ``data``: None."""
        return None

    def set_xfer_handshake_metadata(
        self, metadata: dict[int, KVConnectorHandshakeMetadata]
    ) -> None:
        """Takes the workers' handshake metadata (no-op)."""
        return None

    def set_xfer_handshake_metadata_pp_aware(
        self, metadata: dict[tuple[int, int], KVConnectorHandshakeMetadata]
    ) -> None:
        """Handshake metadata keyed by (pp_rank, tp_rank); pp_rank must be 0."""
        if any(pp_rank != 0 for pp_rank, _ in metadata):
            raise ValueError(
                f"{type(self).__name__} received pp_rank > 0 handshake metadata "
                "but does not support PP-disaggregated KV transfer."
            )
        self.set_xfer_handshake_metadata(
            {tp_rank: meta for (_, tp_rank), meta in metadata.items()}
        )

    @classmethod
    def build_prom_metrics(
        cls,
        vllm_config: "VllmConfig",
        metric_types: dict[type["PromMetric"], type["PromMetricT"]],
        labelnames: list[str],
        per_engine_labelvalues: dict[int, list[object]],
    ) -> "KVConnectorPromMetrics | None":
        """The connector's Prometheus metrics: None."""
        return None

    def reset_cache(self) -> bool | None:
        """Resets the connector's cache: not implemented (None)."""
        logger.debug(
            "Connector cache reset requested, but %s does not implement reset_cache().",
            type(self).__name__,
        )
        return None


@dataclass
class KVConnectorStats:
    """A connector's stats (vLLM's class): ``data`` crosses processes."""

    data: dict[str, Any] = field(default_factory=dict)

    def reset(self):
        """Clears the stats."""
        raise NotImplementedError

    def aggregate(self, other: "KVConnectorStats") -> "KVConnectorStats":
        """Adds another object's stats."""
        raise NotImplementedError

    def reduce(self) -> dict[str, int | float]:
        """The interval's stats as a few values."""
        raise NotImplementedError

    def is_empty(self) -> bool:
        """True if nothing was recorded."""
        raise NotImplementedError


def _metric_type(metric_types: dict, name: str) -> Any:
    """vLLM indexes ``metric_types`` by prometheus_client's classes; without
    prometheus_client, by the class of that name."""
    try:
        import prometheus_client

        return metric_types[getattr(prometheus_client, name)]
    except (ImportError, KeyError):
        for key, value in metric_types.items():
            if getattr(key, "__name__", None) == name:
                return value
        raise KeyError(name) from None


class KVConnectorPromMetrics:
    """Per-connector Prometheus metrics (vLLM's class)."""

    def __init__(
        self,
        vllm_config: VllmConfig,
        metric_types: dict[type[PromMetric], type[PromMetricT]],
        labelnames: list[str],
        per_engine_labelvalues: dict[int, list[object]],
    ):
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._gauge_cls = _metric_type(metric_types, "Gauge")
        self._counter_cls = _metric_type(metric_types, "Counter")
        self._histogram_cls = _metric_type(metric_types, "Histogram")
        self._labelnames = labelnames
        self.per_engine_labelvalues = per_engine_labelvalues

    def make_per_engine(self, metric: PromMetric) -> dict[int, PromMetric]:
        """A child of ``metric`` per engine, with the engine's label values."""
        return {
            idx: metric.labels(*labelvalues)
            for idx, labelvalues in self.per_engine_labelvalues.items()
        }

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0):
        """Records an engine's transfer stats."""
        raise NotImplementedError
