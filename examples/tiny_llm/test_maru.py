"""Cross-process KV reuse through a Maru pool.

Process A (an instance.py process) prefills a prompt and stores its blocks;
this test process is B: it counts the stored leading blocks, maps them in
place (tensors over the shared pool mapping, no copy), computes only the
rest of the prompt and decodes greedily. B's logits must equal those of B
reusing the same KV from its own memory, be allclose to a full recompute,
and give the same greedy tokens. Also: partial hits, a pool too small for
everything (eviction), and a writer SIGKILLed in the middle of storing.
"""
import uuid

import pytest
import torch

maru = pytest.importorskip("maru")

from blocks import Layout  # noqa: E402
from engine import Instance  # noqa: E402
from kvstore import MemoryKVStore  # noqa: E402
from maru_node import MaruNode, wait_for  # noqa: E402
from maru_store import MaruKVStore  # noqa: E402
from model import random_prompt as prompt  # noqa: E402
from proc import InstanceProcess  # noqa: E402

BLOCK = 16
N_DECODE = 8
TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def node():
    with MaruNode(pool_size=128 << 20, extra=["--eviction", "prefix"]) as n:
        yield n


@pytest.fixture
def ns():
    return "/tiny-" + uuid.uuid4().hex[:10]


@pytest.fixture
def store(node, ns):
    s = MaruKVStore(node.url, ns, instance="test-b")
    yield s
    s.close()


def in_mapping(address: int, length: int, pool: str) -> bool:
    """True if [address, address+length) lies in this process's mappings of `pool`."""
    spans = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith(pool):
                lo, hi = line.split()[0].split("-")
                spans.append((int(lo, 16), int(hi, 16)))
    at, end = address, address + length
    for lo, hi in sorted(spans):
        if lo <= at < hi:
            at = hi
    return at >= end


def run_a(node, ns, p, **kw):
    with InstanceProcess(node.url, ns, BLOCK, name="test-a") as a:
        return a.request(op="serve", prompt=p, decode=N_DECODE, **kw)


def memory_twin(model, stored_prompts, p, keep=None):
    """B again, reusing KV from its own memory, computed from the same prompts
    as A computed them (the first `keep` blocks of each, if given)."""
    mem = MemoryKVStore()
    for q in stored_prompts:
        inst = Instance(model, mem, BLOCK)
        inst.serve(q, 0)
        for key in inst.block_keys(q)[keep:] if keep is not None else []:
            del mem.chunks[key]
    return Instance(model, mem, BLOCK).serve(p, N_DECODE)


def test_b_maps_a_blocks_in_place(model, node, ns, store):
    p = prompt(1, 8 * BLOCK + 5)
    a = run_a(node, ns, p)
    assert (a["hit_blocks"], a["stored_blocks"]) == (0, 8)

    inst = Instance(model, store, BLOCK)
    lay = inst.layout
    keys = inst.block_keys(p)
    assert store.count_prefix(keys) == 8
    views = store.get_prefix(keys, lay.dtype, lay.shape)
    for v in views:  # tensors over the chunks' own bytes, in the pool mapping
        assert v.tensor.data_ptr() == v.chunk.data_ptr
        assert v.tensor.numel() * 4 == v.chunk.size == lay.chunk_bytes
        assert in_mapping(v.tensor.data_ptr(), v.chunk.size, node.pool)
    for v in views:
        v.close()

    b = inst.serve(p, N_DECODE, keep_views=True)
    assert (b.hit_blocks, b.stored_blocks) == (8, 0)
    assert len(b.prefix_views) == 8  # attention read these segments where they lie
    for k in b.prefix_views:
        assert in_mapping(k.data_ptr(), k.numel() * k.element_size(), node.pool)

    twin = memory_twin(model, [p], p)
    assert twin.hit_blocks == 8
    assert torch.equal(b.prefill_logits, twin.prefill_logits)
    assert torch.equal(b.decode_logits, twin.decode_logits)

    full = Instance(model, None, BLOCK).serve(p, N_DECODE)
    assert b.tokens == twin.tokens == full.tokens == a["tokens"]
    torch.testing.assert_close(b.prefill_logits, full.prefill_logits, **TOL)
    torch.testing.assert_close(b.decode_logits, full.decode_logits, **TOL)


def test_stored_bytes_equal_own_kv(model, node, ns, store):
    p = prompt(2, 3 * BLOCK)
    run_a(node, ns, p)
    mem = MemoryKVStore()
    Instance(model, mem, BLOCK).serve(p, 0)
    lay = Layout(model.cfg, BLOCK)
    keys = Instance(model, None, BLOCK).block_keys(p)
    for view in store.get_prefix(keys, lay.dtype, lay.shape):
        with view:
            assert torch.equal(view.tensor, mem.get(view.chunk.path.rsplit("/", 1)[1],
                                                     lay.dtype, lay.shape).tensor)


def test_partial_hit(model, node, ns, store):
    shared = prompt(3, 6 * BLOCK)
    p = shared[:2 * BLOCK] + prompt(4, 3 * BLOCK + 9)
    run_a(node, ns, shared)
    b = Instance(model, store, BLOCK).serve(p, N_DECODE)
    assert (b.hit_blocks, b.stored_blocks) == (2, 3)
    twin = memory_twin(model, [shared], p)
    assert twin.hit_blocks == 2
    assert torch.equal(b.decode_logits, twin.decode_logits)
    full = Instance(model, None, BLOCK).serve(p, N_DECODE)
    assert b.tokens == full.tokens
    torch.testing.assert_close(b.decode_logits, full.decode_logits, **TOL)
    # A third instance now finds all five of B's blocks.
    assert Instance(model, store, BLOCK).serve(p, 0).hit_blocks == 5


def test_full_pool_evicts_and_b_recomputes(model):
    lay = Layout(model.cfg, BLOCK)
    blocks_per_prompt, prompts_n = 6, 8
    # Room for about 3 of the 8 prompts: the rest must be evicted.
    pool = 3 * blocks_per_prompt * lay.chunk_bytes + (1 << 20)
    with MaruNode(pool_size=pool, extra=["--eviction", "prefix"]) as small:
        prompts = [prompt(100 + i, blocks_per_prompt * BLOCK + 3) for i in range(prompts_n)]
        with InstanceProcess(small.url, "/full", BLOCK, name="test-a") as a:
            for p in prompts:
                a.request(op="serve", prompt=p, decode=0)
        store = MaruKVStore(small.url, "/full", instance="test-b")
        try:
            hits = []
            for p in reversed(prompts):  # the newest first: they are still there
                b = Instance(model, store, BLOCK).serve(p, N_DECODE)
                full = Instance(model, None, BLOCK).serve(p, N_DECODE)
                assert b.tokens == full.tokens
                torch.testing.assert_close(b.decode_logits, full.decode_logits, **TOL)
                hits.append(b.hit_blocks)
            assert min(hits) < blocks_per_prompt  # some prompts lost blocks
            assert max(hits) > 0  # and some were still there to reuse
            info = store.client.pool_info()
            assert info.free <= info.total
        finally:
            store.close()


def test_writer_killed_mid_store(model):
    p = prompt(5, 6 * BLOCK + 2)
    # A short session timeout: the dead writer's reservation goes soon.
    with MaruNode(pool_size=64 << 20, extra=["--session-timeout-ms", "1500",
                                             "--heartbeat-ms", "300"]) as node:
        a = InstanceProcess(node.url, "/killed", BLOCK, name="test-a")
        try:
            stalled = a.request(op="stall", prompt=p, blocks=3)
            assert stalled["stored_blocks"] == 3
        finally:
            a.kill()
            a.close()
        store = MaruKVStore(node.url, "/killed", instance="test-b")
        try:
            check_after_kill(model, store, p, stalled["stalled"])
        finally:
            store.close()


def check_after_kill(model, store, p, stalled_path):
    inst = Instance(model, store, BLOCK)
    keys = inst.block_keys(p)
    # The three sealed blocks are visible; the half-written one never is.
    assert store.count_prefix(keys) == 3
    with pytest.raises(OSError):
        store.client.open(stalled_path)
    b = inst.serve(p, N_DECODE)
    assert b.hit_blocks == 3
    full = Instance(model, None, BLOCK).serve(p, N_DECODE)
    assert b.tokens == full.tokens
    torch.testing.assert_close(b.decode_logits, full.decode_logits, **TOL)
    twin = memory_twin(model, [p], p, keep=3)
    assert twin.hit_blocks == 3 and torch.equal(b.decode_logits, twin.decode_logits)

    # Once the dead writer's session expires, its reservation is dropped and
    # another instance stores the block; then more of the prompt is reused.
    mem = MemoryKVStore()
    Instance(model, mem, BLOCK).serve(p, 0)
    lay = inst.layout
    block3 = mem.get(keys[3], lay.dtype, lay.shape).tensor
    assert wait_for(lambda: store.put(keys[3], block3, keys[2]) or store.count_prefix(keys) > 3)
    again = Instance(model, store, BLOCK).serve(p, N_DECODE)
    assert again.hit_blocks > 3 and again.tokens == full.tokens
    torch.testing.assert_close(again.decode_logits, full.decode_logits, **TOL)
