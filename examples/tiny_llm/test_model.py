"""The tiny model reusing stored KV: same tokens, same logits (in one process).

Cross-process tests over a Maru pool are in test_maru.py.
"""

import pytest
import torch

from blocks import LAYOUTS, Layout, chain_keys
from engine import Instance
from kvstore import MemoryKVStore
from model import random_prompt as prompt

BLOCK = 16
N_DECODE = 8


def test_chain_keys_name_prefixes():
    a = prompt(1, 5 * BLOCK)
    b = a[:3 * BLOCK] + prompt(2, 2 * BLOCK + 5)
    ka, kb = chain_keys("m", a, BLOCK), chain_keys("m", b, BLOCK)
    assert len(ka) == 5 and len(kb) == 5  # the 5 trailing tokens make no block
    assert ka[:3] == kb[:3] and all(x != y for x, y in zip(ka[3:], kb[3:]))
    assert chain_keys("other-model", a, BLOCK)[0] != ka[0]
    assert len(set(ka)) == 5 and all(len(k) == 32 for k in ka)


def test_greedy_is_deterministic(model):
    p = prompt(3, 70)
    r1 = Instance(model, None, BLOCK).serve(p, N_DECODE)
    r2 = Instance(model, None, BLOCK).serve(p, N_DECODE)
    assert r1.tokens == r2.tokens
    assert torch.equal(r1.decode_logits, r2.decode_logits)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_reuse_equals_recompute(model, layout):
    p = prompt(4, 6 * BLOCK + 7)
    store = MemoryKVStore()
    full = Instance(model, None, BLOCK, layout).serve(p, N_DECODE)
    first = Instance(model, store, BLOCK, layout).serve(p, N_DECODE)
    again = Instance(model, store, BLOCK, layout).serve(p, N_DECODE)
    assert (first.hit_blocks, first.stored_blocks) == (0, 6)
    assert (again.hit_blocks, again.stored_blocks) == (6, 0)
    assert torch.equal(first.decode_logits, full.decode_logits)
    assert again.tokens == full.tokens
    torch.testing.assert_close(again.prefill_logits, full.prefill_logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(again.decode_logits, full.decode_logits, rtol=1e-4, atol=1e-4)


def test_partial_hit_stores_the_rest(model):
    store = MemoryKVStore()
    a = prompt(5, 6 * BLOCK)
    b = a[:2 * BLOCK] + prompt(6, 3 * BLOCK + 3)
    Instance(model, store, BLOCK).serve(a, 0)
    r = Instance(model, store, BLOCK).serve(b, N_DECODE)
    full = Instance(model, None, BLOCK).serve(b, N_DECODE)
    assert (r.hit_blocks, r.stored_blocks) == (2, 3)
    assert r.tokens == full.tokens
    torch.testing.assert_close(r.decode_logits, full.decode_logits, rtol=1e-4, atol=1e-4)


def test_whole_prompt_cached_still_computes_last_block(model):
    store = MemoryKVStore()
    p = prompt(7, 4 * BLOCK)
    Instance(model, store, BLOCK).serve(p, 0)
    r = Instance(model, store, BLOCK).serve(p, N_DECODE)
    assert r.hit_blocks == 3
    assert r.tokens == Instance(model, None, BLOCK).serve(p, N_DECODE).tokens


def test_layouts_hold_the_same_bytes(model):
    p = prompt(8, 2 * BLOCK)
    stores = {kind: MemoryKVStore() for kind in LAYOUTS}
    for kind, store in stores.items():
        Instance(model, store, BLOCK, kind).serve(p, 0)
    block = Layout(model.cfg, BLOCK, "block")
    key = chain_keys(model.cfg.tag(), p, BLOCK)[1]
    whole = stores["block"].get(key, block.dtype, block.shape).tensor
    for layer in range(model.cfg.n_layers):
        part = stores["layer"].get(f"{key}.l{layer}", block.dtype, block.shape[1:]).tensor
        assert torch.equal(whole[layer], part)
