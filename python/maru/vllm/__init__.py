"""maru.vllm: a vLLM v1 KV connector that shares KV through a Maru pool.

The connector is :class:`MaruConnector` (:mod:`maru.vllm.connector`), named
here so that vLLM finds it as ``"kv_connector_module_path": "maru.vllm"``.
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
