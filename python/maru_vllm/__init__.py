"""maru_vllm: the original Maru's vLLM connector module, over maru.vllm.

Configs written for the original Maru work unchanged::

    vllm serve <model> --kv-transfer-config '{
        "kv_connector": "MaruKVConnector",
        "kv_connector_module_path": "maru_vllm",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "maru_server_url": "tcp://localhost:5555",
            "maru_pool_size": "4G"
        }
    }'

:class:`MaruKVConnector` is :class:`maru.vllm.MaruConnector` reading the
original's ``kv_connector_extra_config`` keys (see :data:`KEYS`); there is
one implementation.
"""

from maru_vllm.connector import IGNORED, KEYS, MaruKVConnector, translate

__all__ = ["IGNORED", "KEYS", "MaruKVConnector", "translate"]
