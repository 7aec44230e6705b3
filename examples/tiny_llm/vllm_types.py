"""vLLM's data objects that a KV connector sees, with vLLM's names and fields.

vLLM is not installed here. These carry the fields the connector and the
harness (vllm_engine.py) read, as vLLM defines them at the commits cited:

- VllmConfig and its parts: vllm/config/ (kv_transfer.py@9dc4946:
  KVTransferConfig, its is_kv_* properties and get_from_extra_config);
  scheduler_config.disable_hybrid_kv_cache_manager is set when a
  kv_transfer_config is, as VllmConfig.__post_init__ does for connectors
  that are not SupportsHMA;
- Request (v1/request.py@dba83d5: kv_transfer_params read from
  sampling_params.extra_args), RequestStatus;
- KVCacheBlock / KVCacheBlocks (v1/core/kv_cache_manager.py@ace980e:
  one tuple entry per KV cache group, get_block_ids);
- SchedulerOutput, NewRequestData, CachedRequestData
  (v1/core/sched/output.py@00e8f1f; preempted_req_ids and
  has_sync_kv_loads as the scheduler at 003df29 and newer main set them);
- KVConnectorOutput, ModelRunnerOutput (v1/outputs.py);
- ForwardContext and per-layer attention metadata (slot_mapping,
  block_table, seq_lens, as FlashAttentionMetadata has them).

All are plain picklable data: the scheduler process pickles SchedulerOutput
to the worker processes, as vLLM's multiprocess executor does.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple


@dataclass
class KVTransferConfig:
    kv_connector: Optional[str] = "MaruConnector"
    kv_connector_module_path: Optional[str] = "maru.vllm"
    kv_role: Optional[str] = "kv_both"
    kv_connector_extra_config: Dict[str, Any] = field(default_factory=dict)
    engine_id: Optional[str] = None
    kv_load_failure_policy: str = "recompute"

    @property
    def is_kv_producer(self) -> bool:
        return self.kv_role in ("kv_producer", "kv_both")

    @property
    def is_kv_consumer(self) -> bool:
        return self.kv_role in ("kv_consumer", "kv_both")

    @property
    def is_kv_transfer_instance(self) -> bool:
        return self.kv_connector is not None and self.kv_role in (
            "kv_producer", "kv_consumer", "kv_both")

    def get_from_extra_config(self, key: str, default: Any) -> Any:
        return self.kv_connector_extra_config.get(key, default)


@dataclass
class CacheConfig:
    block_size: int = 16
    num_gpu_blocks: int = 256
    enable_prefix_caching: bool = True
    cache_dtype: str = "auto"
    # Not a vLLM field: the kernel block size the model runner's
    # prepare_kernel_block_sizes would pick for a backend that supports only
    # smaller blocks (the cache then holds block_size // it kernel blocks per block).
    kernel_block_size: Optional[int] = None


@dataclass
class ModelConfig:
    model: str = "tiny-llm"
    dtype: str = "float32"
    use_mla: bool = False


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    rank: int = 0
    decode_context_parallel_size: int = 1
    prefill_context_parallel_size: int = 1

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size


@dataclass
class SchedulerConfig:
    max_num_batched_tokens: int = 128
    max_num_seqs: int = 16
    long_prefill_token_threshold: int = 16
    disable_hybrid_kv_cache_manager: Optional[bool] = None


@dataclass
class AttentionConfig:
    backend: Optional[str] = None  # "FLASH_ATTN", "FLASHINFER", "FLASHMLA"
    kv_cache_layout: str = "NHD"  # the resolved layout (NHD or HND)


@dataclass
class VllmConfig:
    kv_transfer_config: Optional[KVTransferConfig]
    cache_config: CacheConfig = field(default_factory=CacheConfig)
    model_config: ModelConfig = field(default_factory=ModelConfig)
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    scheduler_config: SchedulerConfig = field(default_factory=SchedulerConfig)
    attention_config: AttentionConfig = field(default_factory=AttentionConfig)

    def __post_init__(self) -> None:
        if self.kv_transfer_config is not None and \
                self.scheduler_config.disable_hybrid_kv_cache_manager is None:
            self.scheduler_config.disable_hybrid_kv_cache_manager = True


@dataclass
class KVCacheGroupSpec:
    layer_names: List[str]


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_groups: List[KVCacheGroupSpec]


@dataclass
class SamplingParams:
    max_tokens: int = 16
    extra_args: Optional[Dict[str, Any]] = None


class RequestStatus(enum.IntEnum):
    WAITING = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()


class Request:
    """v1/request.py:Request, the fields the scheduler and connectors use."""

    def __init__(self, request_id: str, prompt_token_ids: Sequence[int],
                 sampling_params: Optional[SamplingParams] = None) -> None:
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self.sampling_params = sampling_params or SamplingParams()
        self.max_tokens = self.sampling_params.max_tokens
        self._output_token_ids: List[int] = []
        self._all_token_ids: List[int] = list(self.prompt_token_ids)
        self.num_computed_tokens = 0
        self.num_external_computed_tokens = 0
        self.num_preemptions = 0
        self.status = RequestStatus.WAITING
        # Request.__init__: kv_transfer_params from the sampling params' extra_args.
        extra = self.sampling_params.extra_args or {}
        self.kv_transfer_params: Optional[Dict[str, Any]] = extra.get("kv_transfer_params")

    @property
    def output_token_ids(self) -> List[int]:
        return self._output_token_ids

    @property
    def all_token_ids(self) -> Tuple[int, ...]:
        return tuple(self._all_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self._output_token_ids)

    def append_output_token_ids(self, token: int) -> None:
        self._output_token_ids.append(token)
        self._all_token_ids.append(token)

    def is_finished(self) -> bool:
        return self.status > RequestStatus.PREEMPTED


@dataclass
class KVCacheBlock:
    block_id: int
    ref_cnt: int = 0
    block_hash: Optional[int] = None


@dataclass
class KVCacheBlocks:
    blocks: Tuple[Sequence[KVCacheBlock], ...]

    def get_block_ids(self, allow_none: bool = False) -> Optional[Tuple[List[int], ...]]:
        if allow_none and all(len(g) == 0 for g in self.blocks):
            return None
        return tuple([b.block_id for b in g] for g in self.blocks)


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: List[int]
    block_ids: Tuple[List[int], ...]
    num_computed_tokens: int
    sampling_params: Optional[SamplingParams] = None


@dataclass
class CachedRequestData:
    req_ids: List[str] = field(default_factory=list)
    resumed_req_ids: Set[str] = field(default_factory=set)
    new_token_ids: List[List[int]] = field(default_factory=list)
    all_token_ids: Dict[str, List[int]] = field(default_factory=dict)
    new_block_ids: List[Optional[Tuple[List[int], ...]]] = field(default_factory=list)
    num_computed_tokens: List[int] = field(default_factory=list)
    num_output_tokens: List[int] = field(default_factory=list)


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: List[NewRequestData] = field(default_factory=list)
    scheduled_cached_reqs: CachedRequestData = field(default_factory=CachedRequestData)
    num_scheduled_tokens: Dict[str, int] = field(default_factory=dict)
    total_num_scheduled_tokens: int = 0
    finished_req_ids: Set[str] = field(default_factory=set)
    preempted_req_ids: Optional[Set[str]] = None
    kv_connector_metadata: Any = None
    has_sync_kv_loads: bool = False


@dataclass
class KVConnectorOutput:
    finished_sending: Optional[Set[str]] = None
    finished_recving: Optional[Set[str]] = None
    failed_recving: Optional[Set[str]] = None
    invalid_block_ids: Set[int] = field(default_factory=set)
    kv_connector_stats: Any = None
    kv_cache_events: Any = None
    kv_connector_worker_meta: Any = None


@dataclass
class ModelRunnerOutput:
    req_ids: List[str] = field(default_factory=list)
    logits: Dict[str, Any] = field(default_factory=dict)  # the last token's, last PP stage
    kv_connector_output: Optional[KVConnectorOutput] = None


@dataclass
class AttentionMetadata:
    """Per-layer metadata as FlashAttentionMetadata has it."""

    slot_mapping: Any
    block_table: Any
    seq_lens: Any


@dataclass
class ForwardContext:
    attn_metadata: Any = None  # dict layer name -> AttentionMetadata, or None
    no_compile_layers: Dict[str, Any] = field(default_factory=dict)
    virtual_engine: int = 0
