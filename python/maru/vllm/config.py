"""The connector's settings, read from vLLM's ``VllmConfig``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple


def _extra_of(vllm_config: Any, key: str, default: Any, extra: Optional[dict] = None) -> Any:
    if extra is not None:
        return extra.get(key, default)
    ktc = vllm_config.kv_transfer_config
    getter = getattr(ktc, "get_from_extra_config", None)
    if getter is not None:
        return getter(key, default)
    return (getattr(ktc, "kv_connector_extra_config", None) or {}).get(key, default)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"maru: {what} must be an integer, not {value!r:.60}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"maru: {what} must be an integer, not {value!r:.60}") from None


def _backend(vllm_config: Any) -> Optional[str]:
    """The attention backend's name, where the config or the environment gives one."""
    attention = getattr(vllm_config, "attention_config", None)
    backend = getattr(attention, "backend", None)
    if backend is not None:
        return str(getattr(backend, "name", backend))
    return os.environ.get("VLLM_ATTENTION_BACKEND") or None


@dataclass(frozen=True)
class ConnectorConfig:
    """What the connector needs to know; see docs/integrations.md#vllm.

    ``kv_connector_extra_config`` keys: ``maru_server`` (None:
    ``$MARU_SERVER``), ``maru_namespace`` ("vllm"), ``maru_chunk_blocks``
    (vLLM blocks per chunk, 1), ``maru_layerwise`` (load layer by layer
    while the model runs, True), ``maru_async_load`` (load between
    scheduler steps, reported by get_finished, False),
    ``maru_load_timeout_s`` (how long to wait for a layer another instance
    is still writing, 30), ``maru_retry_after_s`` (after the server was
    found unreachable, how long not to ask it, 5), ``maru_count_writing`` (count chunks that are
    still being written as hits, True), ``maru_instance`` (the client's name
    in ``maructl sessions``), ``maru_tp_rank`` / ``maru_pp_rank`` (this
    worker's ranks, read from ``parallel_config.rank`` by default),
    ``maru_attention_backend`` (settles a cache shape that fits two
    layouts; vLLM's ``attention_config.backend`` by default).

    Decode and prefill context parallelism (``decode_context_parallel_size``,
    ``prefill_context_parallel_size`` > 1) shard a block's tokens across
    ranks; the connector refuses them (ValueError).
    """

    server: Optional[str]
    namespace: str
    model: str
    dtype: str
    cache_dtype: str
    block_size: int
    chunk_blocks: int
    tp_size: int
    tp_rank: int
    pp_size: int
    pp_rank: int
    mla: bool
    layerwise: bool
    async_load: bool
    load_timeout_s: float
    retry_after_s: float
    count_writing: bool
    instance: str
    backend: Optional[str]
    load: bool  # kv_role allows loading (kv_consumer or kv_both)
    save: bool  # kv_role allows saving (kv_producer or kv_both)

    @property
    def chunk_tokens(self) -> int:
        """Tokens per chunk."""
        return self.block_size * self.chunk_blocks

    @property
    def kv_tp_ranks(self) -> int:
        """Tensor-parallel ranks whose KV differs: 1 with MLA (one latent
        head, the same on every rank), else the TP size."""
        return 1 if self.mla else self.tp_size

    @property
    def kv_tp_rank(self) -> int:
        """The rank whose chunks this worker loads: its own, 0 with MLA."""
        return 0 if self.mla else self.tp_rank

    @property
    def stores(self) -> bool:
        """This worker stores chunks: it may save and holds KV of its own
        (with MLA, tensor-parallel rank 0 stores for all)."""
        return self.save and (not self.mla or self.tp_rank == 0)

    def ranks(self) -> List[Tuple[int, int]]:
        """(tp, pp) of every rank whose chunk must be there for a chunk to count."""
        return [(tp, pp) for pp in range(self.pp_size) for tp in range(self.kv_tp_ranks)]

    @classmethod
    def from_vllm(cls, vllm_config: Any, extra: Optional[dict] = None) -> "ConnectorConfig":
        """Reads ``vllm_config`` (a vLLM ``VllmConfig`` or an object of its
        shape); ``extra``, if given, stands for its ``kv_connector_extra_config``."""
        def _extra(_: Any, key: str, default: Any) -> Any:
            return _extra_of(vllm_config, key, default, extra)

        ktc = vllm_config.kv_transfer_config
        role = getattr(ktc, "kv_role", None) or "kv_both"
        parallel = getattr(vllm_config, "parallel_config", None)
        tp_size = int(getattr(parallel, "tensor_parallel_size", 1) or 1)
        pp_size = int(getattr(parallel, "pipeline_parallel_size", 1) or 1)
        for field in ("decode_context_parallel_size", "prefill_context_parallel_size"):
            size = int(getattr(parallel, field, 1) or 1)
            if size > 1:
                raise ValueError(f"maru: {field}={size} shards each block's tokens across "
                                 "ranks; the vLLM connector does not support it (set it to 1)")
        rank = int(getattr(parallel, "rank", 0) or 0)
        model_config = getattr(vllm_config, "model_config", None)
        cache_config = vllm_config.cache_config
        chunk_blocks = _int(_extra(vllm_config, "maru_chunk_blocks", 1), "maru_chunk_blocks")
        if chunk_blocks < 1:
            raise ValueError(f"maru: maru_chunk_blocks must be >= 1, not {chunk_blocks}")
        tp_rank = _int(_extra(vllm_config, "maru_tp_rank", rank % tp_size), "maru_tp_rank")
        pp_rank = _int(_extra(vllm_config, "maru_pp_rank", (rank // tp_size) % pp_size),
                       "maru_pp_rank")
        if not (0 <= tp_rank < tp_size and 0 <= pp_rank < pp_size):
            raise ValueError(f"maru: rank tp={tp_rank} pp={pp_rank} outside "
                             f"tp_size={tp_size} pp_size={pp_size}")
        timeout = float(_extra(vllm_config, "maru_load_timeout_s", 30.0))
        if not timeout > 0:
            raise ValueError(f"maru: maru_load_timeout_s must be > 0, not {timeout}")
        return cls(
            server=_extra(vllm_config, "maru_server", None),
            namespace=str(_extra(vllm_config, "maru_namespace", "vllm")),
            model=str(getattr(model_config, "model", "model")),
            dtype=str(getattr(model_config, "dtype", "auto")),
            cache_dtype=str(getattr(cache_config, "cache_dtype", "auto") or "auto"),
            block_size=int(cache_config.block_size),
            chunk_blocks=chunk_blocks,
            tp_size=tp_size,
            tp_rank=tp_rank,
            pp_size=pp_size,
            pp_rank=pp_rank,
            mla=bool(getattr(model_config, "use_mla", False)),
            layerwise=bool(_extra(vllm_config, "maru_layerwise", True)),
            async_load=bool(_extra(vllm_config, "maru_async_load", False)),
            load_timeout_s=timeout,
            retry_after_s=float(_extra(vllm_config, "maru_retry_after_s", 5.0)),
            count_writing=bool(_extra(vllm_config, "maru_count_writing", True)),
            instance=str(_extra(vllm_config, "maru_instance", "vllm")),
            backend=_extra(vllm_config, "maru_attention_backend", None) or _backend(vllm_config),
            load=role in ("kv_consumer", "kv_both"),
            save=role in ("kv_producer", "kv_both"),
        )
