"""maru.vllm: a vLLM v1 KV connector that shares KV through a Maru pool.

Configure vLLM with::

    --kv-transfer-config '{"kv_connector": "MaruConnector",
        "kv_connector_module_path": "maru.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"maru_server": "unix:///run/maru/maru.sock"}}'

The connector is :class:`MaruConnector`, in :mod:`maru.vllm.connector`;
this module hands it (and its metadata, stats and vLLM's base classes) on.
See docs/integrations.md#vllm.
"""

from .base import (UPSTREAM, VLLM_COMMIT, KVConnectorBase_V1, KVConnectorMetadata,
                   KVConnectorPromMetrics, KVConnectorRole, KVConnectorStats,
                   KVConnectorTransferResults)
from .config import ConnectorConfig
from .connector import STATS, MaruConnector, MaruConnectorStats, MaruPromMetrics
from .metadata import ChunkSpec, LoadSpec, MaruConnectorMetadata, SaveSpec

__all__ = ["ChunkSpec", "ConnectorConfig", "KVConnectorBase_V1", "KVConnectorMetadata",
           "KVConnectorPromMetrics", "KVConnectorRole", "KVConnectorStats",
           "KVConnectorTransferResults", "LoadSpec", "MaruConnector", "MaruConnectorMetadata",
           "MaruConnectorStats", "MaruPromMetrics", "STATS", "SaveSpec", "UPSTREAM",
           "VLLM_COMMIT"]
