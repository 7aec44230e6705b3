"""The original Maru's vLLM config, unchanged, against this project's server.

The kv-transfer-config of the original's examples/vllm/launch_vllm.sh (its
values from examples/vllm/env.sh) and of its docs
(docs/source/integration/vllm.md) are data here, with only the server's
port put in: vLLM's factory steps (vllm_worker.create_connector) import
``maru_vllm`` and build ``MaruKVConnector`` from them; instance A (a
process) computes and stores, B loads through the harness, and B's logits
equal A's.
"""
import json
import os
import tempfile

import pytest
import torch

pytest.importorskip("maru")
maru_vllm = pytest.importorskip("maru_vllm")

from maru_node import token_tcp_node  # noqa: E402
from model import random_prompt as prompt  # noqa: E402
from proc import InstanceProcess  # noqa: E402
from vllm_instance import make_engine  # noqa: E402

BLOCK = 16
N_DECODE = 4

#: examples/vllm/launch_vllm.sh's KV_CONFIG with env.sh's defaults
#: (MARU_SERVER_URL=tcp://localhost:${MARU_SERVER_PORT}, MARU_POOL_SIZE=4G,
#: MARU_KV_CHUNK_TOKENS=256).
LAUNCH_VLLM_SH = """{
    "kv_connector": "MaruKVConnector",
    "kv_connector_module_path": "maru_vllm",
    "kv_role": "kv_both",
    "kv_connector_extra_config": {
        "maru_server_url": "tcp://localhost:%(port)d",
        "maru_pool_size": "4G",
        "maru_kv_chunk_tokens": 256
    }
}"""

#: docs/source/integration/vllm.md's `vllm serve` config (its default chunk tokens).
DOCS = """{
    "kv_connector": "MaruKVConnector",
    "kv_connector_module_path": "maru_vllm",
    "kv_role": "kv_both",
    "kv_connector_extra_config": {
        "maru_server_url": "tcp://localhost:%(port)d",
        "maru_pool_size": "4G"
    }
}"""


def instance_config(kv_transfer_config: dict, name: str) -> dict:
    """vllm_instance's config for a `vllm serve --kv-transfer-config` as given."""
    return {"server": None, "block": BLOCK, "name": name,
            "kv_connector": kv_transfer_config["kv_connector"],
            "module": kv_transfer_config["kv_connector_module_path"],
            "role": kv_transfer_config["kv_role"],
            "extra": kv_transfer_config["kv_connector_extra_config"]}


@pytest.mark.parametrize("text", [LAUNCH_VLLM_SH, DOCS], ids=["launch_vllm.sh", "docs"])
def test_the_originals_config_runs_against_our_server(text, tmp_path):
    p = prompt(50, 2 * 256 + 21)
    with token_tcp_node(tmp_path) as node:
        c = instance_config(json.loads(text % {"port": node.port}), "orig")
        a = InstanceProcess("", script="vllm_instance.py", argv=["--config", json.dumps(c)])
        with a, tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "a.pt")
            answer = a.request(op="generate", prompts=[p], max_tokens=N_DECODE, save=path)
            logits = torch.load(path)[0]
        assert answer["results"][0]["loaded_tokens"] == 0
        b_eng = make_engine(c)
        assert type(b_eng.connector).__name__ == "MaruKVConnector"
        assert b_eng.connector.config.chunk_blocks == 256 // BLOCK
        try:
            b = b_eng.generate([p], N_DECODE)[0]
        finally:
            b_eng.close()
    assert b.loaded_tokens == 2 * 256
    assert b.tokens == answer["results"][0]["tokens"]
    assert torch.equal(b.prefill_logits, logits["prefill"])
    assert torch.equal(b.decode_logits, logits["decode"])


def test_the_originals_keys_translate():
    t = maru_vllm.translate({"maru_server_url": "unix:///run/maru.sock", "maru_pool_size": "4G",
                             "maru_chunk_size": 4 << 20, "maru_eager_map": False,
                             "maru_instance_id": "inst1", "maru_kv_chunk_tokens": 300}, BLOCK)
    assert t == {"maru_server": "unix:///run/maru.sock", "maru_namespace": "maru_vllm",
                 "maru_chunk_blocks": 300 // BLOCK, "maru_instance": "inst1"}
    assert maru_vllm.translate({}, BLOCK)["maru_server"] == "tcp://localhost:5555"
    assert maru_vllm.translate({"maru_kv_chunk_tokens": 8}, BLOCK)["maru_chunk_blocks"] == 1
    # maru.vllm's own keys pass through and win.
    assert maru_vllm.translate({"maru_namespace": "x", "maru_layerwise": False}, BLOCK)[
        "maru_namespace"] == "x"
    for bad in ({"maru_pool_size": "4 gigs"}, {"maru_chunk_size": True},
                {"maru_kv_chunk_tokens": "many"}, {"maru_kv_chunk_tokens": 0}):
        with pytest.raises(ValueError):
            maru_vllm.translate(bad, BLOCK)
    assert set(maru_vllm.IGNORED) == {"maru_pool_size", "maru_chunk_size", "maru_eager_map"}
