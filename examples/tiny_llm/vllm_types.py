"""Stand-ins for the vLLM objects the connector reads (vLLM is not installed).

Only the fields maru.vllm and vLLM's own connectors read, with vLLM's names:
VllmConfig.kv_transfer_config / cache_config / model_config /
parallel_config, Request, KVCacheBlocks, SchedulerOutput with
NewRequestData and CachedRequestData, ForwardContext.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple


@dataclass
class KVTransferConfig:
    kv_connector: str = "MaruConnector"
    kv_connector_module_path: str = "maru.vllm"
    kv_role: str = "kv_both"
    kv_connector_extra_config: Dict[str, Any] = field(default_factory=dict)

    def get_from_extra_config(self, key: str, default: Any) -> Any:
        return self.kv_connector_extra_config.get(key, default)


@dataclass
class CacheConfig:
    block_size: int = 16


@dataclass
class ModelConfig:
    model: str = "tiny"
    dtype: str = "float32"


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    rank: int = 0


@dataclass
class VllmConfig:
    kv_transfer_config: KVTransferConfig
    cache_config: CacheConfig
    model_config: ModelConfig = field(default_factory=ModelConfig)
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)


@dataclass
class Request:
    request_id: str
    prompt_token_ids: List[int]
    num_computed_tokens: int = 0
    kv_transfer_params: Optional[Dict[str, Any]] = None  # the API request's field


@dataclass
class KVCacheBlocks:
    blocks: List[int]

    def get_block_ids(self) -> Tuple[List[int], ...]:
        return (list(self.blocks),)


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: List[int]
    block_ids: Tuple[List[int], ...]
    num_computed_tokens: int


@dataclass
class CachedRequestData:
    req_ids: List[str] = field(default_factory=list)
    resumed_req_ids: Set[str] = field(default_factory=set)
    new_block_ids: List[Optional[Tuple[List[int], ...]]] = field(default_factory=list)
    num_computed_tokens: List[int] = field(default_factory=list)


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: List[NewRequestData] = field(default_factory=list)
    scheduled_cached_reqs: CachedRequestData = field(default_factory=CachedRequestData)
    num_scheduled_tokens: Dict[str, int] = field(default_factory=dict)
    finished_req_ids: Set[str] = field(default_factory=set)


@dataclass
class ForwardContext:
    attn_metadata: Any = None
    no_compile_layers: Dict[str, Any] = field(default_factory=dict)
