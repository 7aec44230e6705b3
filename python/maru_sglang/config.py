"""The original Maru's SGLang config: ``MaruSGLangConfig``, read from the
``maru_*`` keys of SGLang's ``--hicache-storage-backend-extra-config``.

Same fields, defaults, parsing and errors as the original's
``maru_sglang/config.py``. What each field does here:

- ``server_url`` (``maru_server_url``): the maru-server to connect to,
  ``tcp://host:port`` or ``unix:///path`` (``maru-server --listen``);
- ``instance_id`` (``maru_instance_id``): the client's name in
  ``maructl sessions`` and marutop (None: ``sglang-tp<rank>``);
- accepted, checked as the original checks them, and ignored:
  ``pool_size`` and ``chunk_size_bytes`` (the pool is the server's, made by
  ``maructl mkpool``; a chunk is exactly one page, any size), ``timeout_ms``
  (set ``MARU_TIMEOUT_MS`` in the environment instead), ``use_async_rpc``,
  ``max_inflight`` and ``eager_map`` (the C library has one transport of its
  own and maps the pool once per process).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

_SIZE = re.compile(r"([0-9.]+)\s*([KMGT]?)B?")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(size_str: Union[str, int, float]) -> int:
    """Bytes of a size such as ``"4G"``, ``"512M"``, ``"1.5G"``, ``"4GB"``,
    ``"128k"`` or ``1024`` (a number is bytes). ValueError otherwise."""
    if isinstance(size_str, (int, float)) and not isinstance(size_str, bool):
        return int(size_str)
    match = _SIZE.fullmatch(str(size_str).strip().upper())
    if match is None:
        raise ValueError(f"Invalid size string: {size_str!r}")
    try:
        value = float(match.group(1))
    except ValueError:
        raise ValueError(f"Invalid size string: {size_str!r}") from None
    return int(value * _UNITS[match.group(2)])


@dataclass
class MaruSGLangConfig:
    """The original's settings of the SGLang backend (see the module notes)."""

    server_url: str = "tcp://localhost:5555"
    pool_size: int = 4 * 1024**3
    chunk_size_bytes: int = 1024 * 1024
    instance_id: Optional[str] = None
    timeout_ms: int = 2000
    use_async_rpc: bool = True
    max_inflight: int = 64
    eager_map: bool = True

    @staticmethod
    def from_extra_config(extra: Optional[Dict[str, Any]]) -> "MaruSGLangConfig":
        """From SGLang's extra config: ``maru_server_url``, ``maru_pool_size``,
        ``maru_chunk_size_bytes``, ``maru_instance_id``, ``maru_timeout_ms``,
        ``maru_use_async_rpc``, ``maru_max_inflight``, ``maru_eager_map``
        (sizes as numbers or strings such as ``"4G"``); a missing key keeps
        its default, other keys are not read."""
        config = MaruSGLangConfig()
        if not extra:
            return config

        def size(key: str, default: int) -> int:
            raw = extra.get(key, default)
            return parse_size(raw) if isinstance(raw, str) else int(raw)

        return MaruSGLangConfig(
            server_url=extra.get("maru_server_url", config.server_url),
            pool_size=size("maru_pool_size", config.pool_size),
            chunk_size_bytes=size("maru_chunk_size_bytes", config.chunk_size_bytes),
            instance_id=extra.get("maru_instance_id", config.instance_id),
            timeout_ms=int(extra.get("maru_timeout_ms", config.timeout_ms)),
            use_async_rpc=extra.get("maru_use_async_rpc", config.use_async_rpc),
            max_inflight=int(extra.get("maru_max_inflight", config.max_inflight)),
            eager_map=extra.get("maru_eager_map", config.eager_map),
        )
