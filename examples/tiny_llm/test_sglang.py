"""maru.sglang driven as SGLang HiCache drives a storage backend.

Process A (connector_instance.py --engine sglang) prefills and backs its
pages up through MaruHiCacheStorage (batch_exists, batch_set_v1 from its
host KV pool). This process is B: its own MaruHiCacheStorage and host pool,
batch_exists, batch_get_v1 into the pool, host -> cache, prefill the rest.
B's logits must equal (torch.equal) B reusing the same pages it computed
itself through its own host pool, with no store between. Both host layouts;
partial hits, misses, a pool too small (eviction), a saver SIGKILLed in
the middle of copying.
"""
import uuid

import pytest
import torch

maru = pytest.importorskip("maru")
pytest.importorskip("maru.sglang")

from engines import HostKVPool, hicache_load, hicache_twin, page_keys, sglang_config  # noqa: E402
from maru.sglang import MaruHiCacheStorage  # noqa: E402
from maru_node import MaruNode  # noqa: E402
from model import random_prompt as prompt  # noqa: E402
from proc import InstanceProcess  # noqa: E402

PAGE = 16
N_DECODE = 6
TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def node():
    with MaruNode(pool_size=64 << 20, extra=["--eviction", "prefix"]) as n:
        yield n


@pytest.fixture
def ns():
    return "sgl-" + uuid.uuid4().hex[:10]


def saver(node, ns, layout="page_first"):
    return InstanceProcess(node.url, ns, PAGE, layout, "sglang-a", script="connector_instance.py",
                           extra=["--engine", "sglang"])


def storage_b(model, node, ns, layout="page_first", **kw):
    s = MaruHiCacheStorage(sglang_config(model.cfg, namespace=ns, server=node.url,
                                         layout=layout, **kw), {})
    pool = HostKVPool(model.cfg, 1 << 12, PAGE, layout)
    s.register_mem_pool_host(pool)
    return s, pool


def check_equal(model, p, b, layout, hits, source=None):
    assert b.hits == hits
    twin = hicache_twin(model, p, PAGE, hits, layout, N_DECODE, source)
    assert torch.equal(b.prefill_logits, twin.prefill_logits)
    assert torch.equal(b.decode_logits, twin.decode_logits)
    assert b.tokens == twin.tokens


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_b_loads_a_pages(model, node, ns, layout):
    p = prompt(1, 6 * PAGE + 5)
    with saver(node, ns, layout) as a:
        assert a.request(op="save", prompt=p)["stored"] == 6
        assert a.request(op="save", prompt=p)["stored"] == 0  # all there already
    storage, pool = storage_b(model, node, ns, layout)
    try:
        keys = page_keys(model, p, PAGE)
        assert storage.batch_exists(keys) == 6
        b = hicache_load(model, storage, pool, p, N_DECODE)
        check_equal(model, p, b, layout, 6)
        # The pages B loaded are the bytes B computes itself.
        mine = HostKVPool(model.cfg, 6 * PAGE, PAGE, layout)
        cache = model.new_cache(len(p))
        model.forward(p, cache)
        mine.backup(cache, 0, torch.arange(6 * PAGE))
        token_dim = 1 if layout == "page_first" else 2
        loaded = pool.kv_buffer.narrow(token_dim, 0, 6 * PAGE)
        assert torch.equal(loaded, mine.kv_buffer)
        recompute = model.new_cache(len(p) + N_DECODE)
        logits = model.forward(p, recompute)
        torch.testing.assert_close(b.prefill_logits, logits, **TOL)
        # Another layout's pages are other bytes: a miss, never misread.
        other = "layer_first" if layout == "page_first" else "page_first"
        s2, _ = storage_b(model, node, ns, other)
        assert s2.batch_exists(keys) == 0
        s2.close()
        # Another tensor-parallel rank keeps its own pages.
        s3, _ = storage_b(model, node, ns, layout, tp_rank=1, tp_size=2)
        assert s3.batch_exists(keys) == 0
        s3.close()
    finally:
        storage.close()


def test_partial_hit_and_miss(model, node, ns):
    shared = prompt(2, 5 * PAGE)
    p = shared[:2 * PAGE] + prompt(3, 3 * PAGE + 4)
    with saver(node, ns) as a:
        assert a.request(op="save", prompt=shared)["stored"] == 5
    storage, pool = storage_b(model, node, ns)
    try:
        b = hicache_load(model, storage, pool, p, N_DECODE)
        check_equal(model, p, b, "page_first", 2, source=shared)
        keys = page_keys(model, p, PAGE)
        # batch_get_v1 past the stored prefix: True for the prefix only.
        slots = pool.alloc(len(keys) * PAGE)
        assert storage.batch_get_v1(keys, slots) == [True, True] + [False] * (len(keys) - 2)
        miss = prompt(4, 4 * PAGE)
        assert storage.batch_exists(page_keys(model, miss, PAGE)) == 0
        b = hicache_load(model, storage, pool, miss, N_DECODE)
        check_equal(model, miss, b, "page_first", 0)
    finally:
        storage.close()


def test_full_pool_evicts(model):
    pages, prompts_n = 5, 8
    page_bytes = 2 * model.cfg.n_layers * PAGE * model.cfg.d_model * 4
    pool_size = 3 * pages * page_bytes + (1 << 20)  # room for about 3 prompts
    with MaruNode(pool_size=pool_size, extra=["--eviction", "prefix"]) as small:
        prompts = [prompt(100 + i, pages * PAGE + 3) for i in range(prompts_n)]
        with saver(small, "full") as a:
            stored = [a.request(op="save", prompt=q)["stored"] for q in prompts]
        assert all(s == pages for s in stored)  # eviction made room each time
        storage, pool = storage_b(model, small, "full")
        try:
            hits = []
            for q in reversed(prompts):
                pool.free_slots = torch.arange(pool.size)
                b = hicache_load(model, storage, pool, q, N_DECODE)
                check_equal(model, q, b, "page_first", b.hits)
                hits.append(b.hits)
            assert min(hits) < pages and max(hits) > 0
        finally:
            storage.close()


def test_saver_killed_mid_copy(model):
    p = prompt(5, 6 * PAGE + 2)
    with MaruNode(pool_size=64 << 20) as node:
        a = saver(node, "killed")
        try:
            assert a.request(op="stall", prompt=p, pages=3) == {"stalled": True}
        finally:
            a.kill()
            a.close()
        storage, pool = storage_b(model, node, "killed")
        try:
            keys = page_keys(model, p, PAGE)
            # The three stored pages are there; the half-copied ones never are.
            assert storage.batch_exists(keys) == 3
            slots = pool.alloc(len(keys) * PAGE)
            assert storage.batch_get_v1(keys, slots) == [True] * 3 + [False] * 3
            pool.free_slots = torch.arange(pool.size)
            b = hicache_load(model, storage, pool, p, N_DECODE)
            check_equal(model, p, b, "page_first", 3, source=p[:3 * PAGE])  # as A made them
        finally:
            storage.close()
