"""LMCache's own maru backend, its real source file run unchanged, over our
``maru`` and ``maru_lmcache`` packages, in two processes (one stores, the
other reads).

LMCache cannot be installed here. Its ``maru_backend.py`` (LMCache/LMCache
@ b4dd69b4d8c6967b3c737639f513c446a061b3bd) takes from LMCache a logger
factory, ``get_size_bytes``, names used only in annotations, and the
interfaces it subclasses; in the child processes those modules are
maru._upstream.lmcache and the logging module, and the file itself is
loaded from ``$MARU_LMCACHE_SOURCE`` (a directory holding
``lmcache/v1/storage_backend/maru_backend.py`` at that commit, as
scripts/engine-manifest.py reads it). Without it the test is skipped; the
harness examples/tiny_llm/lmcache_intree.py covers the same calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

SOURCE = os.environ.get("MARU_LMCACHE_SOURCE", "")
FILE = Path(SOURCE) / "lmcache" / "v1" / "storage_backend" / "maru_backend.py"

CHILD = textwrap.dedent('''
    import asyncio, json, logging, sys, threading, types, importlib.util
    import torch
    from maru._upstream import lmcache as up

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
    for pkg in ("lmcache", "lmcache.integration", "lmcache.integration.vllm", "lmcache.v1",
                "lmcache.v1.storage_backend"):
        module(pkg, __path__=[])
    module("lmcache.integration.vllm.utils", get_size_bytes=up.get_size_bytes)
    module("lmcache.logging", init_logger=logging.getLogger)
    module("lmcache.utils", CacheEngineKey=object)
    module("lmcache.v1.config", LMCacheEngineConfig=object)
    module("lmcache.v1.metadata", LMCacheMetadata=object)
    sys.modules["lmcache.v1.memory_management"] = up
    sys.modules["lmcache.v1.storage_backend.abstract_backend"] = up
    spec = importlib.util.spec_from_file_location(
        "lmcache.v1.storage_backend.maru_backend", sys.argv[1])
    mb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mb)

    class Key:
        def __init__(self, h, worker=0):
            self.h, self.worker = h, worker
        def to_string(self):
            return f"tiny@1@{self.worker}@{self.h}@float"
        def with_new_worker_id(self, worker):
            return Key(self.h, worker)
        def __hash__(self):
            return hash(self.to_string())
        def __eq__(self, other):
            return self.to_string() == other.to_string()

    class Config:
        maru_path, maru_pool_size, use_layerwise = sys.argv[2], 4, False
        extra_config = {"maru_instance_id": "real-" + sys.argv[3]}
        def get_extra_config_value(self, key, default=None):
            return self.extra_config.get(key, default)

    class Metadata:
        chunk_size, use_mla, world_size, worker_id = 16, False, 1, 0
        def get_shapes(self):
            return [torch.Size([2, 2, 16, 32])]
        def get_dtypes(self):
            return [torch.float32]

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    backend = mb.MaruBackend(Config(), Metadata(), loop, "cpu")
    keys = [Key("c0"), Key("c1"), Key("c2")]
    out = {}
    if sys.argv[3] == "store":
        objs = backend.batched_allocate(torch.Size([2, 2, 16, 32]), torch.float32, 2)
        for i, obj in enumerate(objs):
            obj.tensor.fill_(float(i + 1))
        [future] = backend.batched_submit_put_task(keys[:2], objs)
        future.result(timeout=60)
        for obj in objs:
            obj.ref_count_down()  # the storage manager's reference
        part = backend.allocate(torch.Size([2, 2, 5, 32]), torch.float32)
        part.tensor.fill_(3.0)
        backend.submit_put_task(keys[2], part).result(timeout=60)
        part.ref_count_down()
        out["refs"] = [o.get_ref_count() for o in objs + [part]]
    else:
        missing = Key("none")
        out["contains"] = [backend.contains(k) for k in keys + [missing]]
        out["batched_contains"] = backend.batched_contains([keys[0], missing, keys[1]])
        out["pinned"] = backend.batched_contains(keys, pin=True)
        backend.batched_unpin(keys)
        got = backend.batched_get_blocking([keys[0], missing, keys[1], keys[2]])
        out["got"] = [None if o is None else [list(o.tensor.shape), float(o.tensor[0, 0, 0, 0]),
                                              o.metadata.fmt.name] for o in got]
        async def prefetch():
            n = await backend.batched_async_contains("req", keys, False)
            return n, await backend.batched_get_non_blocking("req", keys[:n])
        n, objs = asyncio.run_coroutine_threadsafe(prefetch(), loop).result(timeout=60)
        out["prefetched"] = [n, [float(o.tensor.flatten()[0]) for o in objs]]
        one = backend.get_blocking(keys[2])
        out["partial"] = list(one.tensor.shape)
        out["removed"] = [backend.remove(keys[2]), backend.remove(keys[2])]
    backend.close()
    loop.call_soon_threadsafe(loop.stop)
    print(json.dumps(out))
''')


@pytest.mark.skipif(not FILE.is_file(), reason="MARU_LMCACHE_SOURCE holds no maru_backend.py")
def test_lmcaches_own_maru_backend_runs_on_our_packages(server, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)

    def run(mode: str) -> dict:
        proc = subprocess.run([sys.executable, str(script), str(FILE), server.url, mode],
                              capture_output=True, text=True, timeout=300, env=os.environ)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    assert run("store") == {"refs": [1, 1, 1]}  # kept after a successful put, as LMCache does
    got = run("read")
    assert got["contains"] == [True, True, True, False]
    assert got["batched_contains"] == 1 and got["pinned"] == 3
    # batch_retrieve checks every key: the miss in the middle does not hide what follows
    assert got["got"] == [[[2, 2, 16, 32], 1.0, "KV_2LTD"], None,
                          [[2, 2, 16, 32], 2.0, "KV_2LTD"], [[2, 2, 5, 32], 3.0, "KV_2LTD"]]
    assert got["prefetched"] == [3, [1.0, 2.0, 3.0]]
    assert got["partial"] == [2, 2, 5, 32] and got["removed"] == [True, False]
