"""MaruKVConnector: the original Maru's vLLM connector class, as a thin layer
over :class:`maru.vllm.MaruConnector`.

The original's ``kv_connector_extra_config`` keys are translated into
maru.vllm's (:func:`translate`); maru.vllm's own keys may be given too and
win. Keys that describe the original's per-client CXL regions have no
meaning for a shared pool and are accepted (checked for the original's
format) and ignored: see :data:`IGNORED`.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Dict, Optional

from maru.vllm import MaruConnector, MaruConnectorMetadata

if TYPE_CHECKING:  # vLLM's types, for readers and type checkers only
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig

logger = logging.getLogger(__name__)

#: The original's keys that are used, and the maru.vllm key each becomes.
KEYS = {
    "maru_server_url": "maru_server",  # as it is: unix:///path or tcp://host:port
    "maru_instance_id": "maru_instance",  # the client's name in `maructl sessions`
    "maru_kv_chunk_tokens": "maru_chunk_blocks",  # tokens per chunk -> vLLM blocks
}

#: The original's keys that are accepted and ignored, and why.
IGNORED = {
    "maru_pool_size": "the pool is the server's, shared by all instances; no per-client "
                      "region is reserved",
    "maru_chunk_size": "the original's page size; chunks here are sized to their KV",
    "maru_eager_map": "the pool is mapped once per process at connect",
}

#: The original's defaults (maru_vllm/connector.py).
DEFAULT_SERVER_URL = "tcp://localhost:5555"
DEFAULT_KV_CHUNK_TOKENS = 256


def _size(value: Any, key: str) -> int:
    """The original's _parse_size: an int, or '4G', '500M', '1.5K'."""
    if isinstance(value, bool):
        raise ValueError(f"maru_vllm: {key}: invalid size {value!r}")
    if isinstance(value, int):
        return value
    match = re.match(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)B?$", str(value).upper())
    if not match:
        raise ValueError(f"maru_vllm: {key}: invalid size string {value!r:.60}; expected an "
                         "integer or a size like '4G', '500M'")
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(float(match.group(1)) * units[match.group(2)])


def translate(extra: Dict[str, Any], block_size: int) -> Dict[str, Any]:
    """maru.vllm's settings for the original's ``kv_connector_extra_config``.

    ``maru_kv_chunk_tokens`` (default 256) is rounded down to a multiple of
    ``block_size`` (at least one block), as the original does; the sizes of
    :data:`IGNORED` must parse as the original parses them (ValueError
    otherwise). The chunks go to the namespace ``maru_vllm`` unless
    ``maru_namespace`` says otherwise.
    """
    for key in ("maru_pool_size", "maru_chunk_size"):
        if key in extra:
            _size(extra[key], key)
    tokens = extra.get("maru_kv_chunk_tokens", DEFAULT_KV_CHUNK_TOKENS)
    try:
        tokens = int(tokens)
    except (TypeError, ValueError):
        raise ValueError(f"maru_vllm: maru_kv_chunk_tokens must be an integer, "
                         f"not {tokens!r:.60}") from None
    if tokens < 1:
        raise ValueError(f"maru_vllm: maru_kv_chunk_tokens must be >= 1, not {tokens}")
    if tokens % block_size:
        logger.warning("maru_kv_chunk_tokens %d not aligned to block_size %d, adjusted to %d",
                       tokens, block_size, max(block_size, tokens // block_size * block_size))
    out: Dict[str, Any] = {
        "maru_server": extra.get("maru_server_url", DEFAULT_SERVER_URL),
        "maru_namespace": "maru_vllm",
        "maru_chunk_blocks": max(1, tokens // block_size),
    }
    if extra.get("maru_instance_id"):
        out["maru_instance"] = str(extra["maru_instance_id"])
    for key, value in extra.items():  # maru.vllm's own keys, where given, win
        if key not in KEYS and key not in IGNORED:
            out[key] = value
    return out


__all__ = ["DEFAULT_KV_CHUNK_TOKENS", "DEFAULT_SERVER_URL", "IGNORED", "KEYS",
           "MaruConnectorMetadata", "MaruKVConnector", "translate"]


class MaruKVConnector(MaruConnector):
    """The original's ``maru_vllm.MaruKVConnector``: vLLM builds it from
    ``kv_connector_module_path: "maru_vllm"`` with the original's keys."""

    def __init__(self, vllm_config: "VllmConfig", role: Any,
                 kv_cache_config: "Optional[KVCacheConfig]" = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)

    def _extra_config(self, vllm_config: "VllmConfig") -> Optional[Dict[str, Any]]:
        ktc = vllm_config.kv_transfer_config
        extra = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
        return translate(extra, int(vllm_config.cache_config.block_size))
