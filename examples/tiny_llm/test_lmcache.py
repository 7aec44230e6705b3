"""maru.lmcache driven as LMCache drives its maru storage backend.

Process A (connector_instance.py --engine lmcache) prefills and stores its
chunks: batched_contains, batched_allocate (memory objects IN the pool),
the KV written into them, batched_submit_put_task (publish). This process
is B: batched_contains(pin=True), batched_get_blocking (tensors over the
pool, no copy), attention reads them in place, batched_unpin. B's logits
must equal (torch.equal) B reusing KV it computed itself, kept in its own
memory in the same format and views. Partial hits, misses, a pool too small
(eviction), a saver SIGKILLed with a chunk half written.
"""
import uuid

import pytest
import torch

maru = pytest.importorskip("maru")
pytest.importorskip("maru.lmcache")

from engines import (lmcache_keys, lmcache_load, lmcache_metadata, lmcache_twin,  # noqa: E402
                     CacheEngineKey)
from maru.lmcache import MaruBackend  # noqa: E402
from maru_node import MaruNode  # noqa: E402
from model import random_prompt as prompt  # noqa: E402
from proc import InstanceProcess  # noqa: E402
from test_maru import in_mapping  # noqa: E402

CHUNK = 16
N_DECODE = 6


@pytest.fixture(scope="module")
def node():
    with MaruNode(pool_size=64 << 20, extra=["--eviction", "prefix"]) as n:
        yield n


@pytest.fixture
def ns():
    return "lmc-" + uuid.uuid4().hex[:10]


def saver(node, ns):
    return InstanceProcess(node.url, ns, CHUNK, "-", "lmcache-a", script="connector_instance.py",
                           extra=["--engine", "lmcache"])


def backend_b(model, node, ns):
    return MaruBackend({"maru_path": "maru://" + node.socket,  # maru:///path/to.sock
                        "extra_config": {"maru_namespace": ns, "maru_instance_id": "lmcache-b"}},
                       lmcache_metadata(model.cfg, CHUNK))


def check_equal(model, p, b, hits, source=None):
    assert b.hits == hits
    twin = lmcache_twin(model, p, CHUNK, hits, N_DECODE, source)
    assert torch.equal(b.prefill_logits, twin.prefill_logits)
    assert torch.equal(b.decode_logits, twin.decode_logits)
    assert b.tokens == twin.tokens


def test_b_reads_a_chunks_in_place(model, node, ns):
    p = prompt(1, 5 * CHUNK + 7)  # the last chunk is partial: 6 chunks stored
    with saver(node, ns) as a:
        assert a.request(op="save", prompt=p)["stored"] == 6
        assert a.request(op="save", prompt=p)["stored"] == 0
    backend = backend_b(model, node, ns)
    try:
        keys = lmcache_keys(model, p, CHUNK)
        assert backend.batched_contains(keys) == 6
        tail = backend.get_blocking(keys[-1])  # the partial chunk: 7 tokens
        assert tail.tensor.shape == (2, model.cfg.n_layers, 7, model.cfg.d_model)
        tail.ref_count_down()
        b = lmcache_load(model, backend, p, CHUNK, N_DECODE, keep_views=True)
        for obj in b.objs:  # the tensors attention read lie in the pool
            t = obj.tensor
            assert t.data_ptr() == obj.chunk.data_ptr
            assert in_mapping(t.data_ptr(), t.numel() * 4, node.pool)
            obj.ref_count_down()
        check_equal(model, p, b, 5)
        recompute = model.new_cache(len(p))
        torch.testing.assert_close(b.prefill_logits, model.forward(p, recompute),
                                   rtol=1e-4, atol=1e-4)
    finally:
        backend.close()


def test_pin_remove_and_misses(model, node, ns):
    shared = prompt(2, 4 * CHUNK)
    p = shared[:2 * CHUNK] + prompt(3, 2 * CHUNK + 5)
    with saver(node, ns) as a:
        assert a.request(op="save", prompt=shared)["stored"] == 4
    backend = backend_b(model, node, ns)
    try:
        b = lmcache_load(model, backend, p, CHUNK, N_DECODE)
        check_equal(model, p, b, 2, source=shared)
        keys = lmcache_keys(model, shared, CHUNK)
        assert backend.batched_contains(keys, pin=True) == 4
        assert backend.contains(keys[1], pin=True)
        backend.batched_unpin(keys)
        assert backend.unpin(keys[1])
        assert backend.remove(keys[2]) and not backend.remove(keys[2])
        assert backend.batched_contains(keys) == 2  # stops at the removed one
        assert backend.batched_get_blocking(keys)[2:] == [None, None]
        b = lmcache_load(model, backend, shared, CHUNK, N_DECODE)
        check_equal(model, shared, b, 2)
        miss = [CacheEngineKey("other-model", 1, 0, k.chunk_hash) for k in keys]
        assert backend.batched_contains(miss) == 0 and not backend.contains(miss[0])
        assert backend.get_blocking(miss[0]) is None
    finally:
        backend.close()


def test_full_pool_evicts(model):
    chunks, prompts_n = 5, 8
    chunk_bytes = 2 * model.cfg.n_layers * CHUNK * model.cfg.d_model * 4
    with MaruNode(pool_size=3 * chunks * chunk_bytes + (1 << 20),
                  extra=["--eviction", "prefix"]) as small:
        prompts = [prompt(100 + i, chunks * CHUNK) for i in range(prompts_n)]
        with saver(small, "full") as a:
            stored = [a.request(op="save", prompt=q)["stored"] for q in prompts]
        assert all(s == chunks for s in stored)  # allocations evicted older chunks
        backend = backend_b(model, small, "full")
        try:
            hits = []
            for q in reversed(prompts):
                b = lmcache_load(model, backend, q, CHUNK, N_DECODE)
                check_equal(model, q, b, b.hits)
                hits.append(b.hits)
            assert min(hits) < chunks - 1 and max(hits) > 0
        finally:
            backend.close()


def test_saver_killed_mid_write(model):
    p = prompt(5, 6 * CHUNK)
    with MaruNode(pool_size=64 << 20) as node:
        a = saver(node, "killed")
        try:
            assert a.request(op="stall", prompt=p, pages=3) == {"stalled": True}
        finally:
            a.kill()
            a.close()
        backend = backend_b(model, node, "killed")
        try:
            keys = lmcache_keys(model, p, CHUNK)
            assert backend.batched_contains(keys) == 3  # the half-written one is not there
            assert backend.batched_get_blocking(keys)[3:] == [None] * 3
            b = lmcache_load(model, backend, p, CHUNK, N_DECODE)
            check_equal(model, p, b, 3, source=p[:3 * CHUNK])
        finally:
            backend.close()
