"""LMCache's two ways to Maru, along LMCache's own control flow
(lmcache_engine.py: its storage manager, plugin launcher, local CPU backend
and GPU connector; lmcache_intree.py: its own maru backend), with process
A storing and process B, another process, reading:

- the in-tree path: LMCache's config sets ``maru_path``, LMCache builds its
  own maru backend, which drives ``maru.MaruConfig``, ``maru.MaruHandler``
  and ``maru_lmcache.CxlMemoryAdapter``. The original Maru's example
  configs run as they are, with the server's TCP port substituted as its
  launchers substitute it;
- the plugin path: ``storage_plugins`` loads ``maru.lmcache.MaruBackend``
  through the plugin launcher's keyword constructor, with LMCache's local
  CPU backend in front (or, with ``max_local_cpu_size: 0``, without).

In each case B's logits equal (torch.equal) A's for the same request
reusing the same chunks of KV that A computed and kept in its own memory,
in the same segments, and B's attention read the chunks where they lie in
the pool.
"""
import os
import string

import pytest
import torch

maru = pytest.importorskip("maru")
pytest.importorskip("yaml")

from model import random_prompt as prompt  # noqa: E402
from proc import InstanceProcess  # noqa: E402

CHUNK = 256
N_DECODE = 4

#: The original Maru's LMCache example configs, verbatim (xcena-dev/maru at
#: 4fd29cef, examples/lmcache/<example>/configs/): data of the test.
ORIGINAL_CONFIGS = {
    "single/maru-config.yaml": """\
chunk_size: 256
local_cpu: False

enable_async_loading: False

maru_path: "maru://localhost:${MARU_SERVER_PORT}"
maru_pool_size: 4

extra_config:
  lookup_backoff_time: 0.001
""",
    "p2p_sharing/maru-config.yaml": """\
chunk_size: 256
local_cpu: False
enable_async_loading: True

# Maru backend
maru_path: "maru://localhost:${MARU_SERVER_PORT}"
maru_pool_size: 4

extra_config:
  lookup_backoff_time: 0.001
""",
    "disagg_prefill/1p1d/maru-prefiller-config.yaml": """\
enable_pd: False
chunk_size: 256
local_cpu: False
save_unfull_chunk: True

# Maru backend
maru_path: "maru://localhost:${MARU_SERVER_PORT}"
maru_pool_size: 4

extra_config:
  lookup_backoff_time: 0.001
""",
    "disagg_prefill/1p1d/maru-decoder-config.yaml": """\
enable_pd: False
chunk_size: 256
local_cpu: False
save_unfull_chunk: True

# Maru backend
maru_path: "maru://localhost:${MARU_SERVER_PORT}"
maru_pool_size: 4

extra_config:
  lookup_backoff_time: 0.001
""",
}

#: (A's config, B's config) of each example.
EXAMPLES = {
    "single": ("single/maru-config.yaml", "single/maru-config.yaml"),
    "p2p_sharing": ("p2p_sharing/maru-config.yaml", "p2p_sharing/maru-config.yaml"),
    "1p1d": ("disagg_prefill/1p1d/maru-prefiller-config.yaml",
             "disagg_prefill/1p1d/maru-decoder-config.yaml"),
}


def plugin_config(server: str, **top) -> str:
    """The storage-plugin config of docs/integrations.md."""
    lines = [f"chunk_size: {CHUNK}"] + [f"{k}: {v}" for k, v in top.items()] + [
        'storage_plugins: ["MaruBackend"]',
        "extra_config:",
        "  storage_plugin.MaruBackend.module_path: maru.lmcache",
        "  storage_plugin.MaruBackend.class_name: MaruBackend",
        f'  maru_server: "{server}"',
        '  maru_namespace: "lmcache-plugin"',
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def node(tcp_node):
    """A server also on TCP, with a token (conftest.tcp_node)."""
    return tcp_node


def instance(node, config_text: str, tmp_path, name: str) -> InstanceProcess:
    """An instance started as the original's launchers start vLLM: the
    config with ${MARU_SERVER_PORT} substituted (envsubst), as
    LMCACHE_CONFIG_FILE."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(string.Template(config_text).substitute(MARU_SERVER_PORT=node.port))
    return InstanceProcess(None, script="lmcache_instance.py",
                           argv=["--config", str(path), "--pool", node.pool])


def as_tensors(answer: dict):
    return (torch.tensor(answer["prefill"], dtype=torch.float32),
            torch.tensor(answer["decode"], dtype=torch.float32), answer["tokens"])


def check_equal(a_twin: dict, b: dict) -> None:
    pa, da, ta = as_tensors(a_twin)
    pb, db, tb = as_tensors(b)
    assert torch.equal(pa, pb) and torch.equal(da, db) and ta == tb
    assert a_twin["loaded"] == b["loaded"] and a_twin["chunks"] == b["chunks"]


def run_intree(node, tmp_path, a_config: str, b_config: str, seed: int) -> None:
    unfull = "save_unfull_chunk: True" in a_config
    p = prompt(seed, 2 * CHUNK + 37)  # two whole chunks and 37 tokens
    with instance(node, a_config, tmp_path, "a") as a, \
            instance(node, b_config, tmp_path, "b") as b:
        assert a.request(op="backends") == {"LocalCPUBackend": "lmcache_engine.LocalCPUBackend",
                                            "MaruBackend": "lmcache_intree.MaruBackend"}
        assert a.request(op="store", prompt=p)["stored"] == (3 if unfull else 2)
        got = b.request(op="load", prompt=p, n_decode=N_DECODE)
        # B loads every chunk it may: with the partial one, all but the last token
        assert got["chunks"] == (3 if unfull else 2)
        assert got["loaded"] == (len(p) - 1 if unfull else 2 * CHUNK)
        assert all(got["in_pool"])
        check_equal(a.request(op="twin", prompt=p, chunks=got["chunks"], n_decode=N_DECODE), got)
        # Again: LMCache finds every chunk (contains) and copies none to Maru.
        # B's views went with its request: no region, no lease, is left in
        # either process.
        assert a.request(op="store", prompt=p)["stored"] == (3 if unfull else 2)
        assert b.request(op="regions") == {"owned": [], "read": []}
        assert a.request(op="regions") == {"owned": [], "read": []}


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_intree_path_runs_the_original_example_configs(node, tmp_path, example):
    a_config, b_config = (ORIGINAL_CONFIGS[c] for c in EXAMPLES[example])
    run_intree(node, tmp_path, a_config, b_config, 40 + len(example))


def test_intree_path_over_the_unix_socket(node, tmp_path):
    """``maru_path: unix:///...`` reaches MaruConfig unchanged (LMCache
    rewrites only ``maru://``): a local client, which reads the pool's
    index (docs/integrations.md)."""
    config = ORIGINAL_CONFIGS["single/maru-config.yaml"].replace(
        "maru://localhost:${MARU_SERVER_PORT}", node.url)
    run_intree(node, tmp_path, config, config, 60)


PLUGIN_VARIANTS = [
    dict(local_cpu=False),  # LocalCPUBackend in front, its hot cache off
    dict(local_cpu=True),  # ... and on
    dict(local_cpu=False, enable_async_loading=True),  # lookup and prefetch
    dict(max_local_cpu_size=0),  # no LocalCPUBackend: MaruBackend allocates
    dict(max_local_cpu_size=0, enable_async_loading=True, save_unfull_chunk=True),
]


@pytest.mark.parametrize("seed,variant", enumerate(PLUGIN_VARIANTS),
                         ids=[",".join(f"{k}={x}" for k, x in v.items())
                              for v in PLUGIN_VARIANTS])
def test_plugin_path(node, tmp_path, seed, variant):
    ns_prompt = prompt(200 + seed, 3 * CHUNK + 11)
    config = plugin_config(node.url, **variant)
    with instance(node, config, tmp_path, "a") as a, instance(node, config, tmp_path, "b") as b:
        backends = a.request(op="backends")
        assert backends["MaruBackend"] == "maru.lmcache.MaruBackend"
        assert ("LocalCPUBackend" in backends) == (variant.get("max_local_cpu_size") != 0)
        chunks = 4 if variant.get("save_unfull_chunk") else 3
        assert a.request(op="store", prompt=ns_prompt)["stored"] == chunks
        got = b.request(op="load", prompt=ns_prompt, n_decode=N_DECODE)
        assert got["chunks"] == chunks and all(got["in_pool"])
        check_equal(a.request(op="twin", prompt=ns_prompt, chunks=chunks, n_decode=N_DECODE),
                    got)
        # B again: the same answer (pins and leases of the first load were given back)
        again = b.request(op="load", prompt=ns_prompt, n_decode=N_DECODE)
        check_equal(got, again)


def test_plugin_path_partial_hits_and_misses(node, tmp_path):
    shared = prompt(7, 2 * CHUNK)
    p = shared + prompt(8, CHUNK + 20)  # B's prompt extends what A stored
    config = plugin_config(node.url, local_cpu=False)
    with instance(node, config, tmp_path, "a") as a, instance(node, config, tmp_path, "b") as b:
        assert a.request(op="store", prompt=shared)["stored"] == 2
        got = b.request(op="load", prompt=p, n_decode=N_DECODE)
        assert got["chunks"] == 2 and got["loaded"] == 2 * CHUNK
        check_equal(a.request(op="twin", prompt=p, chunks=2, n_decode=N_DECODE), got)
        miss = b.request(op="load", prompt=prompt(9, 2 * CHUNK + 3), n_decode=N_DECODE)
        assert miss["chunks"] == 0
        check_equal(a.request(op="twin", prompt=prompt(9, 2 * CHUNK + 3), chunks=0,
                              n_decode=N_DECODE), miss)


def test_request_tags_are_part_of_the_key_but_maru_retain_is_not(node, tmp_path):
    """``lmcache.tag.*`` request configs are in LMCache's key; the plugin
    stores under the key without ``maru_retain``, so a hint never hides a
    chunk from a request with another (or no) hint; another tag does."""
    p = prompt(11, 2 * CHUNK + 5)
    config = plugin_config(node.url, local_cpu=False)
    with instance(node, config, tmp_path, "a") as a, instance(node, config, tmp_path, "b") as b:
        assert a.request(op="store", prompt=p, tags={"maru_retain": "keep"})["stored"] == 2
        for tags in ({}, {"maru_retain": "drop"}, {"maru_retain": "keep"}):
            got = b.request(op="load", prompt=p, n_decode=N_DECODE, tags=tags)
            assert got["chunks"] == 2
        other = b.request(op="load", prompt=p, n_decode=N_DECODE, tags={"tenant": "b"})
        assert other["chunks"] == 0  # LMCache keys another tenant apart
