"""maru.sglang (and the original's maru_sglang) driven along SGLang's own
control flow (sglang_engine.py: the dynamic-backend factory, the
controller's v1 switch, its prefetch and backup threads, the host pools),
with instance A (a process) storing and instance B (another process)
reading. In every case B's logits equal (torch.equal) A's for the same
request reusing the same pages from A's own host pools (an L2 hit, no
storage between), and the host-pool bytes B loaded are A's.

Cases: the v1 path and the legacy path (no ``interface_v1``), fp32 and
bf16, MHA and MLA host pools, TP ranks 0 and 1 with their own shards (MLA:
rank 0 writes, every rank reads), the layer_first, page_first,
page_first_direct and page_head layouts, a hybrid model's indexer pool
through the v2 calls; the two paths reading each other's pages; the backup
and prefetch threads inside the backend at once over several 128-page
batches; partial hits, misses, a pool too small (eviction), a saver killed
in the middle of a copy; the original Maru's example configs over TCP.
"""
import json
import os
import string
import uuid

import pytest
import torch

maru = pytest.importorskip("maru")
pytest.importorskip("maru.sglang")

from maru_node import MaruNode  # noqa: E402
from model import random_prompt as prompt  # noqa: E402
from proc import InstanceProcess  # noqa: E402
from sglang_engine import Engine, EngineConfig, StorageBackendFactory  # noqa: E402

PAGE = 16
N_DECODE = 4


@pytest.fixture(scope="module")
def node():
    with MaruNode(pool_size=128 << 20, extra=["--eviction", "prefix"]) as n:
        yield n


def extra_config(node, ns, v1=True, threshold=PAGE, **more) -> dict:
    """--hicache-storage-backend-extra-config of docs/integrations.md."""
    extra = {"backend_name": "maru", "module_path": "maru.sglang",
             "class_name": "MaruHiCacheStorage", "maru_server": node.url,
             "maru_namespace": ns, "prefetch_threshold": threshold}
    if v1:
        extra["interface_v1"] = 1
    extra.update(more)
    return extra


def instance(extra: dict, **server_args) -> InstanceProcess:
    config = dict(extra_config=extra, page_size=PAGE)
    config.update(server_args)
    return InstanceProcess(None, script="sglang_instance.py",
                           argv=["--config", json.dumps(config)])


def logits(answer: dict):
    return (torch.tensor(answer["prefill"]), torch.tensor(answer["decode"]), answer["tokens"])


def check_equal(a_twin: dict, b: dict, hits: int) -> None:
    assert b["hits"] == a_twin["hits"] == hits
    pa, da, ta = logits(a_twin)
    pb, db, tb = logits(b)
    assert torch.equal(pa, pb) and torch.equal(da, db) and ta == tb
    assert a_twin["kv_digest"] == b["kv_digest"]
    assert a_twin["indexer_digest"] == b["indexer_digest"]


CASES = {
    "v1-fp32-page_first": dict(),
    "v1-bf16-layer_first-tp2": dict(dtype="bfloat16", layout="layer_first", tp_size=2),
    "v1-bf16-page_first_direct": dict(dtype="bfloat16", layout="page_first_direct"),
    "v1-fp32-page_head-tp2": dict(layout="page_head", tp_size=2),
    "v1-bf16-mla-page_first-tp2": dict(dtype="bfloat16", mla=True, tp_size=2),
    "v1-fp32-mla-layer_first": dict(mla=True, layout="layer_first"),
    "v1-bf16-mla-page_first_direct-tp2": dict(dtype="bfloat16", mla=True, tp_size=2,
                                              layout="page_first_direct"),
    "legacy-bf16-page_first-tp2": dict(v1=False, dtype="bfloat16", tp_size=2),
    "legacy-bf16-mla-layer_first-tp2": dict(v1=False, dtype="bfloat16", mla=True, tp_size=2,
                                            layout="layer_first"),
    "legacy-fp32-page_head": dict(v1=False, layout="page_head"),
    "v2-bf16-mla-tp2": dict(dtype="bfloat16", mla=True, tp_size=2, hybrid=True),
    "v2-fp32-layer_first-tp2": dict(layout="layer_first", tp_size=2, hybrid=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_b_loads_a_pages(node, case):
    args = dict(CASES[case])
    v1 = args.pop("v1", True)
    ns = "sgl-" + uuid.uuid4().hex[:10]
    extra = extra_config(node, ns, v1=v1)
    tp, mla = args.get("tp_size", 1), args.get("mla", False)
    p = prompt(len(case), 6 * PAGE + 5)
    with instance(extra, **args) as a, instance(extra, **args) as b:
        info = a.request(op="info")
        assert info["backend"] == "maru.sglang.MaruHiCacheStorage"
        assert info["zero_copy"] == v1  # the controller's interface_v1 switch
        # MLA: only rank 0 writes (backup_skip); the rest write their shard.
        stored = [6 * PAGE] + [0 if mla else 6 * PAGE] * (tp - 1)
        assert a.request(op="store", prompt=p)["stored"] == stored
        calls = a.request(op="info")["calls"]
        assert [c.get("set", 0) for c in calls] == [1] + [0 if mla else 1] * (tp - 1)
        got = b.request(op="load", prompt=p, n_decode=N_DECODE)
        check_equal(a.request(op="twin", prompt=p, pages=got["hits"], n_decode=N_DECODE),
                    got, 6)
        # Stored again: every page is there already, and counts as stored.
        assert a.request(op="store", prompt=p)["stored"] == stored
    # Another layout, or another split of the heads, never reads these pages.
    layout = args.get("layout", "page_first")
    other = dict(args, layout="layer_first" if layout == "page_first" else "page_first")
    with instance(extra, **other) as c:
        assert c.request(op="load", prompt=p, n_decode=0)["hits"] == 0
    if not mla and tp == 1:
        with instance(extra, **dict(args, tp_size=2)) as c:
            assert c.request(op="load", prompt=p, n_decode=0)["hits"] == 0


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
def test_v1_and_legacy_read_each_others_pages(node, layout):
    # A page's bytes are SGLang's flat data page whichever path wrote them.
    ns = "sgl-" + uuid.uuid4().hex[:10]
    p, q = prompt(21, 5 * PAGE + 3), prompt(22, 4 * PAGE + 9)
    args = dict(dtype="bfloat16", layout=layout, tp_size=2)
    with instance(extra_config(node, ns, v1=False), **args) as legacy, \
            instance(extra_config(node, ns, v1=True), **args) as v1:
        assert legacy.request(op="store", prompt=p)["stored"] == [5 * PAGE] * 2
        assert v1.request(op="store", prompt=q)["stored"] == [4 * PAGE] * 2
        got = v1.request(op="load", prompt=p, n_decode=N_DECODE)
        check_equal(legacy.request(op="twin", prompt=p, pages=5, n_decode=N_DECODE), got, 5)
        got = legacy.request(op="load", prompt=q, n_decode=N_DECODE)
        check_equal(v1.request(op="twin", prompt=q, pages=4, n_decode=N_DECODE), got, 4)


@pytest.mark.parametrize("v1", [True, False], ids=["v1", "legacy"])
def test_backup_and_prefetch_threads_at_once(node, v1):
    # Page size 4: 150 pages a prompt, two 128-page batches of every call.
    page, pages = 4, 150
    ns = "sgl-" + uuid.uuid4().hex[:10]
    extra = extra_config(node, ns, v1=v1, threshold=page)
    args = dict(page_size=page, dtype="bfloat16", tp_size=2, host_tokens=4 * pages * page)
    x, y = prompt(31, pages * page + 1), prompt(32, pages * page + 1)
    with instance(extra, **args) as a, instance(extra, **args) as b:
        assert a.request(op="store", prompt=x)["stored"] == [pages * page] * 2
        # B stores y (its backup threads) while it loads x (its prefetch
        # threads): rank 0's first write and first read wait for each other
        # inside the backend, so both run at once.
        got = b.request(op="load_and_store", load=x, store=y, n_decode=N_DECODE)
        assert got["overlap"] is True
        assert got["stored"] == [pages * page] * 2
        check_equal(a.request(op="twin", prompt=x, pages=pages, n_decode=N_DECODE), got, pages)
        calls = b.request(op="info")["calls"]
        assert all(c["set"] == 2 and c["get"] == 2 for c in calls)  # 128 + 22 pages
        got = a.request(op="load", prompt=y, n_decode=N_DECODE)
        check_equal(b.request(op="twin", prompt=y, pages=pages, n_decode=N_DECODE), got, pages)


def test_partial_hit_and_miss(node):
    ns = "sgl-" + uuid.uuid4().hex[:10]
    extra = extra_config(node, ns)
    shared = prompt(2, 5 * PAGE)
    p = shared[:2 * PAGE] + prompt(3, 3 * PAGE + 4)
    miss = prompt(4, 4 * PAGE)
    with instance(extra, dtype="bfloat16") as a, instance(extra, dtype="bfloat16") as b:
        assert a.request(op="store", prompt=shared)["stored"] == [5 * PAGE]
        got = b.request(op="load", prompt=p, n_decode=N_DECODE)
        check_equal(a.request(op="twin", prompt=p, pages=2, n_decode=N_DECODE, source=shared),
                    got, 2)
        got = b.request(op="load", prompt=miss, n_decode=N_DECODE)
        check_equal(a.request(op="twin", prompt=miss, pages=0, n_decode=N_DECODE), got, 0)
    # Below SGLang's prefetch threshold (256 tokens by default) nothing is loaded.
    with instance(extra_config(node, ns, threshold=256)) as c:
        assert c.request(op="load", prompt=shared + [1], n_decode=0)["hits"] == 0


def test_full_pool_evicts():
    pages, prompts_n = 5, 8
    page_bytes = 2 * 4 * PAGE * 256 * 4  # K and V, 4 layers, d_model 256, fp32
    pool_size = 3 * pages * page_bytes + (1 << 20)  # room for about 3 prompts
    with MaruNode(pool_size=pool_size, extra=["--eviction", "prefix"]) as small:
        extra = extra_config(small, "full")
        prompts = [prompt(100 + i, pages * PAGE + 3) for i in range(prompts_n)]
        with instance(extra) as a, instance(extra) as b:
            stored = [a.request(op="store", prompt=q)["stored"] for q in prompts]
            assert all(s == [pages * PAGE] for s in stored)  # eviction made room each time
            hits = []
            for q in reversed(prompts):
                got = b.request(op="load", prompt=q, n_decode=N_DECODE)
                check_equal(a.request(op="twin", prompt=q, pages=got["hits"],
                                      n_decode=N_DECODE), got, got["hits"])
                hits.append(got["hits"])
            assert min(hits) < pages and max(hits) > 0


@pytest.mark.parametrize("v1", [True, False], ids=["v1", "legacy"])
def test_saver_killed_mid_copy(v1):
    p = prompt(5, 6 * PAGE + 2)
    with MaruNode(pool_size=64 << 20) as node:
        extra = extra_config(node, "killed", v1=v1)
        a = instance(extra, dtype="bfloat16")
        try:
            assert a.request(op="stall", prompt=p, pages=3) == {"stalled": True}
        finally:
            a.kill()
            a.close()
        with instance(extra, dtype="bfloat16") as b, instance(extra, dtype="bfloat16") as c:
            # The three pages stored before are there; the half-copied ones never are.
            got = b.request(op="load", prompt=p, n_decode=N_DECODE)
            check_equal(c.request(op="twin", prompt=p, pages=3, n_decode=N_DECODE,
                                  source=p[:3 * PAGE]), got, 3)


def test_factory_steps_refuse_what_sglang_refuses(node):
    base = extra_config(node, "factory")
    for broken, error in (({"module_path": "maru.no_such_module"}, ImportError),
                          ({"class_name": "NoSuchClass"}, AttributeError),
                          ({"module_path": "maru.client", "class_name": "Client"}, TypeError)):
        with pytest.raises(error):
            Engine(EngineConfig(extra_config=dict(base, **broken)))
    missing = dict(base)
    del missing["class_name"]
    with pytest.raises(ValueError, match="class_name"):
        Engine(EngineConfig(extra_config=missing))
    with pytest.raises(ValueError, match="Unknown storage backend"):
        StorageBackendFactory.create_backend("maru", None, None)
    with pytest.raises(NotImplementedError, match="should_split_heads"):
        Engine(EngineConfig(extra_config=dict(base, tp_lcm_size=4), layout="page_head",
                            tp_size=2))
    with pytest.raises(ValueError, match="Unsupported layout"):
        Engine(EngineConfig(extra_config=base, mla=True, layout="page_head"))


# --- the original Maru's example configs -----------------------------------------

#: The original Maru's SGLang example configs, verbatim (xcena-dev/maru at
#: 4fd29cef, examples/sglang/<example>/configs/): data of the test.
ORIGINAL_CONFIGS = {
    "single/maru-sglang-single.json": """\
{
  "backend_name": "maru",
  "module_path": "maru_sglang.maru_storage",
  "class_name": "MaruStorage",
  "interface_v1": 1,
  "maru_server_url": "tcp://localhost:${MARU_SERVER_PORT}",
  "maru_pool_size": "${MARU_POOL_SIZE}"
}
""",
    "p2p_sharing/maru-sglang-p2p.json": """\
{
  "backend_name": "maru",
  "module_path": "maru_sglang.maru_storage",
  "class_name": "MaruStorage",
  "interface_v1": 1,
  "maru_server_url": "tcp://localhost:${MARU_SERVER_PORT}",
  "maru_pool_size": "${MARU_POOL_SIZE}",
  "maru_instance_id": "${MARU_INSTANCE_ID}"
}
""",
}




def sessions(node) -> list:
    import subprocess

    out = subprocess.run([node.maructl, "sessions", "--json", "--server", node.url],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


@pytest.mark.parametrize("example", sorted(ORIGINAL_CONFIGS))
def test_original_example_configs(tcp_node, example):
    """The original's launchers: envsubst of the config, then SGLang with
    --hicache-mem-layout page_first_direct (their flags), page size 16 here;
    SGLang's default prefetch threshold (256 tokens) applies."""
    def config(instance_id: str) -> dict:
        text = string.Template(ORIGINAL_CONFIGS[example]).substitute(
            MARU_SERVER_PORT=tcp_node.port, MARU_POOL_SIZE="4G", MARU_INSTANCE_ID=instance_id)
        return json.loads(text)

    pages = 20  # 320 tokens: past the threshold
    p = prompt(50 + len(example), pages * PAGE + 5)
    args = dict(dtype="bfloat16", layout="page_first_direct")
    with instance(config("inst1"), **args) as a, instance(config("inst2"), **args) as b:
        info = b.request(op="info")
        assert info["backend"] == "maru_sglang.maru_storage.MaruStorage"
        assert info["zero_copy"] is True
        names = {s.get("instance") for s in sessions(tcp_node)}
        if "p2p" in example:
            assert {"inst1", "inst2"} <= names
        assert a.request(op="store", prompt=p)["stored"] == [pages * PAGE]
        got = b.request(op="load", prompt=p, n_decode=N_DECODE)
        check_equal(a.request(op="twin", prompt=p, pages=pages, n_decode=N_DECODE), got, pages)
        # The same pages as maru.sglang's: instances configured either way share them.
        ours = extra_config(tcp_node, "sglang", threshold=256)
        with instance(ours, **args) as c:
            got = c.request(op="load", prompt=p, n_decode=N_DECODE)
            check_equal(a.request(op="twin", prompt=p, pages=pages, n_decode=N_DECODE), got,
                        pages)
