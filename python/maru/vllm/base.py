"""vLLM's connector classes: the real ones when vLLM is importable, else
the stand-ins of :mod:`maru._upstream.vllm` (the same names, methods and
defaults, at the commit :data:`VLLM_COMMIT`).

:data:`UPSTREAM` says which: True when ``import vllm`` found vLLM. A vLLM
that is installed but fails to import raises here, as it would in vLLM.
"""

from __future__ import annotations

from typing import Any

from .._upstream import vllm as _standin

VLLM_COMMIT = _standin.VLLM_COMMIT


def _real() -> Any:
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1 import base
    except ModuleNotFoundError as e:
        if e.name != "vllm":
            raise
        return None
    return base


_base = _real()
UPSTREAM: bool = _base is not None

if _base is not None:
    KVConnectorBase_V1 = _base.KVConnectorBase_V1
    KVConnectorMetadata = _base.KVConnectorMetadata
    KVConnectorRole = _base.KVConnectorRole
    # Newer main only; older vLLM calls get_finished.
    KVConnectorTransferResults = getattr(_base, "KVConnectorTransferResults",
                                         _standin.KVConnectorTransferResults)
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
            KVConnectorPromMetrics, KVConnectorStats)
    except ImportError:  # a vLLM from before connector metrics
        KVConnectorStats = _standin.KVConnectorStats
        KVConnectorPromMetrics = _standin.KVConnectorPromMetrics
else:
    KVConnectorBase_V1 = _standin.KVConnectorBase_V1
    KVConnectorMetadata = _standin.KVConnectorMetadata
    KVConnectorRole = _standin.KVConnectorRole
    KVConnectorTransferResults = _standin.KVConnectorTransferResults
    KVConnectorStats = _standin.KVConnectorStats
    KVConnectorPromMetrics = _standin.KVConnectorPromMetrics

__all__ = ["KVConnectorBase_V1", "KVConnectorMetadata", "KVConnectorPromMetrics",
           "KVConnectorRole", "KVConnectorStats", "KVConnectorTransferResults", "UPSTREAM",
           "VLLM_COMMIT"]
