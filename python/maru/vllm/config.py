"""The connector's settings, read from vLLM's ``kv_transfer_config``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


def _extra(vllm_config: Any, key: str, default: Any) -> Any:
    ktc = vllm_config.kv_transfer_config
    getter = getattr(ktc, "get_from_extra_config", None)
    if getter is not None:
        return getter(key, default)
    return (getattr(ktc, "kv_connector_extra_config", None) or {}).get(key, default)


@dataclass(frozen=True)
class ConnectorConfig:
    """What the connector needs to know; see docs/integrations.md#vllm.

    ``kv_connector_extra_config`` keys: ``maru_server`` (None:
    ``$MARU_SERVER``), ``maru_namespace`` ("vllm"), ``maru_chunk_blocks``
    (vLLM blocks per chunk, 1), ``maru_layerwise`` (load layer by layer
    while the model runs, True), ``maru_async_load`` (load between
    scheduler steps, reported by get_finished, False),
    ``maru_load_timeout_s`` (how long to wait for a layer another instance
    is still writing, 30), ``maru_count_writing`` (count chunks that are
    still being written as hits, True), ``maru_instance`` (the client's name
    in ``maructl sessions``).
    """

    server: Optional[str]
    namespace: str
    model: str
    dtype: str
    block_size: int
    chunk_blocks: int
    tp_size: int
    tp_rank: int
    layerwise: bool
    async_load: bool
    load_timeout_s: float
    count_writing: bool
    instance: str
    load: bool  # kv_role allows loading (kv_consumer or kv_both)
    save: bool  # kv_role allows saving (kv_producer or kv_both)

    @property
    def chunk_tokens(self) -> int:
        """Tokens per chunk."""
        return self.block_size * self.chunk_blocks

    @classmethod
    def from_vllm(cls, vllm_config: Any) -> "ConnectorConfig":
        """Reads ``vllm_config`` (a vLLM ``VllmConfig`` or an object of its shape)."""
        ktc = vllm_config.kv_transfer_config
        role = getattr(ktc, "kv_role", None) or "kv_both"
        parallel = getattr(vllm_config, "parallel_config", None)
        tp_size = int(getattr(parallel, "tensor_parallel_size", 1) or 1)
        rank = int(getattr(parallel, "rank", 0) or 0)
        model_config = getattr(vllm_config, "model_config", None)
        chunk_blocks = int(_extra(vllm_config, "maru_chunk_blocks", 1))
        if chunk_blocks < 1:
            raise ValueError(f"maru: maru_chunk_blocks must be >= 1, not {chunk_blocks}")
        return cls(
            server=_extra(vllm_config, "maru_server", None),
            namespace=str(_extra(vllm_config, "maru_namespace", "vllm")),
            model=str(getattr(model_config, "model", "model")),
            dtype=str(getattr(model_config, "dtype", "auto")),
            block_size=int(vllm_config.cache_config.block_size),
            chunk_blocks=chunk_blocks,
            tp_size=tp_size,
            tp_rank=int(_extra(vllm_config, "maru_tp_rank", rank % tp_size)),
            layerwise=bool(_extra(vllm_config, "maru_layerwise", True)),
            async_load=bool(_extra(vllm_config, "maru_async_load", False)),
            load_timeout_s=float(_extra(vllm_config, "maru_load_timeout_s", 30.0)),
            count_writing=bool(_extra(vllm_config, "maru_count_writing", True)),
            instance=str(_extra(vllm_config, "maru_instance", "vllm")),
            load=role in ("kv_consumer", "kv_both"),
            save=role in ("kv_producer", "kv_both"),
        )
