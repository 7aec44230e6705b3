"""maru.vllm on vLLM's own classes, where vLLM's source is at hand.

vLLM cannot be installed here. When its files are available (a checkout or
the fetched files of the pinned commit: ``$MARU_VLLM_SOURCE``, by default
/work/upstream/vllm), this test lays vLLM's own
``kv_connector/v1/base.py``, ``kv_connector/base.py`` and ``factory.py``
into a temporary ``vllm`` package (read at test time, never copied into
this repository), with small stand-ins for the few other vLLM modules they
import (the logger, three type modules, ``supports_kw``), and in a process
with that package on its path checks that ``import vllm`` switches
maru.vllm to vLLM's classes: MaruConnector is a subclass of vLLM's
KVConnectorBase_V1, vLLM's own factory builds it for both roles, and the
harness (whose isinstance checks then use vLLM's class) runs A and B with
equal logits, workers in processes. Skipped where vLLM's files are absent.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from maru_node import MaruNode

HERE = Path(__file__).resolve().parent
SOURCE = Path(os.environ.get("MARU_VLLM_SOURCE", "/work/upstream/vllm"))
KV = "vllm/distributed/kv_transfer/kv_connector"
FILES = [f"{KV}/v1/base.py", f"{KV}/base.py", f"{KV}/factory.py"]

STUBS = {
    "vllm/__init__.py": "",
    "vllm/logger.py": "import logging\n\ndef init_logger(name):\n    return logging.getLogger(name)\n",
    "vllm/utils/__init__.py": "",
    "vllm/utils/func_utils.py": textwrap.dedent("""\
        import inspect

        def supports_kw(callable_, kw_name):
            params = inspect.signature(callable_).parameters
            return kw_name in params
        """),
    "vllm/v1/__init__.py": "",
    "vllm/v1/attention/__init__.py": "",
    "vllm/v1/attention/backend.py": "class AttentionBackend: ...\nclass AttentionMetadata: ...\n",
    "vllm/v1/core/__init__.py": "",
    "vllm/v1/core/sched/__init__.py": "",
    "vllm/v1/core/sched/output.py": "class SchedulerOutput: ...\n",
    "vllm/v1/outputs.py": "class KVConnectorOutput: ...\n",
    "vllm/distributed/__init__.py": "",
    "vllm/distributed/kv_transfer/__init__.py": "",
    f"{KV}/__init__.py": "",
    f"{KV}/v1/__init__.py": textwrap.dedent("""\
        from vllm.distributed.kv_transfer.kv_connector.v1.base import (
            KVConnectorBase_V1, KVConnectorRole, SupportsHMA, supports_hma)
        """),
}

CHILD = textwrap.dedent("""\
    import json, sys
    import torch
    import maru.vllm as mv
    from vllm.distributed.kv_transfer.kv_connector.v1 import base as vbase
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from model import deterministic, random_prompt
    from vllm_instance import harness_config, make_engine

    def main():
        deterministic()
        c = json.loads(sys.argv[1])
        assert mv.UPSTREAM and mv.KVConnectorBase_V1 is vbase.KVConnectorBase_V1
        assert issubclass(mv.MaruConnector, vbase.KVConnectorBase_V1)
        assert issubclass(mv.MaruConnectorMetadata, vbase.KVConnectorMetadata)
        for role in (vbase.KVConnectorRole.SCHEDULER, vbase.KVConnectorRole.WORKER):
            conn = KVConnectorFactory.create_connector(harness_config(c), role, None)
            assert isinstance(conn, vbase.KVConnectorBase_V1) and conn.role is role
            conn.shutdown()
        p = random_prompt(77, 5 * 16 + 3)
        a = make_engine(c)
        try:
            ra = a.generate([p], 4)[0]
        finally:
            a.close()
        b = make_engine(c)
        try:
            rb = b.generate([p], 4)[0]
        finally:
            b.close()
        assert rb.loaded_tokens == 5 * 16, rb.loaded_tokens
        assert torch.equal(ra.prefill_logits, rb.prefill_logits)
        assert torch.equal(ra.decode_logits, rb.decode_logits)
        print("upstream ok")

    if __name__ == "__main__":
        main()
    """)


@pytest.mark.skipif(not all((SOURCE / f).is_file() for f in FILES),
                    reason="vLLM's source files are not at $MARU_VLLM_SOURCE")
def test_the_connector_on_vllms_own_base_and_factory(tmp_path):
    for rel in FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SOURCE / rel, tmp_path / rel)
    for rel, text in STUBS.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "child.py").write_text(CHILD)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(HERE), env.get("PYTHONPATH", "")])
    with MaruNode(pool_size=64 << 20) as node:
        c = {"server": node.url, "namespace": "upstream", "block": 16, "executor": "mp",
             "tp": 2}
        out = subprocess.run([sys.executable, str(tmp_path / "child.py"), json.dumps(c)],
                             env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-4000:]
    assert "upstream ok" in out.stdout
