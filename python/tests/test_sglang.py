"""maru.sglang.MaruHiCacheStorage against a real server: the HiCache calls
one by one, as SGLang's controller makes them at the pinned commit (the
model-level harness is examples/tiny_llm/test_sglang.py):

- the factory's construction, ``cls(storage_config, {})`` then
  ``register_mem_pool_host``, on SGLang's HiCacheStorageConfig;
- the legacy path (``batch_set`` of the host pool's flat ``get_data_page``
  tensors, ``batch_get`` into ``get_dummy_flat_data_page`` tensors) in
  fp32, bf16, fp16 and fp8-as-uint8;
- the v1 path (``batch_exists``, ``batch_set_v1``, ``batch_get_v1``);
- the multi-pool v2 path (``register_mem_host_pool_v2``,
  ``batch_set_v2``, ``batch_get_v2``, ``batch_exists_v2`` with both hit
  policies), pools apart, MLA pages shared across ranks but Mamba's not.
"""

from __future__ import annotations

import errno
import logging
from typing import List

import pytest

torch = pytest.importorskip("torch")

import maru  # noqa: E402
from maru import BATCH_MAX  # noqa: E402
from maru.sglang import (HiCacheStorage, HiCacheStorageConfig,  # noqa: E402
                         HiCacheStorageExtraInfo, MaruHiCacheStorage, PoolHitPolicy, PoolName,
                         PoolTransfer, shard_name)

FP8 = torch.uint8  # SGLang's host pool keeps fp8 KV as uint8 (store_dtype)
DTYPES = [torch.float32, torch.bfloat16, torch.float16, FP8]


def config(**fields) -> HiCacheStorageConfig:
    """SGLang's HiCacheStorageConfig for one worker (defaults: one rank)."""
    base = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
                model_name="org/model")
    base.update(fields)
    return HiCacheStorageConfig(**base)


class HostPool:
    """An MHA host KV pool as SGLang's MHATokenToKVPoolHost lays it out
    (pool_host/mha.py): page_first [2, tokens, layers, heads, dim] or
    layer_first [2, layers, tokens, heads, dim], its get_page_buffer_meta
    and its flat data pages."""

    def __init__(self, tokens: int = 64, page_size: int = 4, layers: int = 2,
                 dtype: torch.dtype = torch.float32, layout: str = "page_first",
                 heads: int = 2, dim: int = 8) -> None:
        self.page_size, self.size, self.layer_num = page_size, tokens, layers
        self.head_num, self.head_dim, self.layout, self.dtype = heads, dim, layout, dtype
        shape = ((2, tokens, layers, heads, dim) if layout == "page_first"
                 else (2, layers, tokens, heads, dim))
        self.kv_buffer = torch.zeros(shape, dtype=dtype)

    def fill(self, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        raw = torch.randint(0, 256, (self.kv_buffer.numel() * self.kv_buffer.element_size(),),
                            dtype=torch.uint8, generator=gen)
        if self.dtype.is_floating_point:  # keep floats finite (NaN != NaN)
            raw = raw.view(-1, self.kv_buffer.element_size())
            raw[:, -1] &= 0x3F
            raw = raw.view(-1)
        self.kv_buffer.view(-1).view(torch.uint8).copy_(raw)

    def get_page_buffer_meta(self, indices) -> tuple:
        item = self.kv_buffer.element_size()
        tok = self.head_num * self.head_dim * item
        base, v = self.kv_buffer.data_ptr(), self.layer_num * self.size * tok
        ptrs: List[int] = []
        for i in range(0, len(indices), self.page_size):
            if self.layout == "page_first":
                k = base + int(indices[i]) * self.layer_num * tok
                ptrs += [k, k + v]
            else:
                for layer in range(self.layer_num):
                    k = base + (layer * self.size + int(indices[i])) * tok
                    ptrs += [k, k + v]
        per = self.page_size * tok * (self.layer_num if self.layout == "page_first" else 1)
        return ptrs, [per] * len(ptrs)

    def _page(self, index):
        i = int(index)
        if self.layout == "page_first":
            return self.kv_buffer[:, i:i + self.page_size]
        return self.kv_buffer[:, :, i:i + self.page_size]

    def get_data_page(self, index, flat: bool = True):
        page = self._page(index)
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        return torch.zeros((2, self.layer_num, self.page_size, self.head_num, self.head_dim),
                           dtype=self.dtype).flatten()

    def set_from_flat_data_page(self, index, data_page) -> None:
        page = self._page(index)
        page.copy_(data_page.reshape(page.shape))


class StatePool:
    """A side pool with no pointers to give (a Mamba state pool, say):
    flat pages only, one slot per page."""

    layout = "page_first"
    page_size = 1

    def __init__(self, slots: int = 16, width: int = 24, dtype=torch.bfloat16) -> None:
        self.buffer = torch.zeros(slots, width, dtype=dtype)

    def get_data_page(self, index, flat: bool = True):
        return self.buffer[int(index)].flatten()

    def get_dummy_flat_data_page(self):
        return torch.zeros_like(self.buffer[0])

    def set_from_flat_data_page(self, index, data_page) -> None:
        self.buffer[int(index)] = data_page


def make(server, ns, pool=None, extra=None, **fields) -> MaruHiCacheStorage:
    """As SGLang's factory builds a dynamic backend: cls(storage_config, {}),
    then register_mem_pool_host."""
    extra_config = {"backend_name": "maru", "module_path": "maru.sglang",
                    "class_name": "MaruHiCacheStorage", "interface_v1": 1,
                    "maru_server": server.url, "maru_namespace": ns}
    extra_config.update(extra or {})
    s = MaruHiCacheStorage(config(extra_config=extra_config, **fields), {})
    if pool is not None:
        s.register_mem_pool_host(pool)
    return s


def test_subclasses_the_interface_it_follows() -> None:
    assert issubclass(MaruHiCacheStorage, HiCacheStorage)  # the factory's check
    assert not MaruHiCacheStorage.__abstractmethods__


def test_shard_names() -> None:
    assert shard_name(config(tp_rank=1, tp_size=4), "page_first") == "tp1of4-page_first"
    assert shard_name(config(is_mla_model=True, tp_rank=3, tp_size=4), "layer_first") == \
        "mla-layer_first"
    assert shard_name({"tp_rank": 0, "tp_size": 2, "pp_rank": 1, "pp_size": 2,
                       "attn_cp_rank": 1, "attn_cp_size": 2}, "x") == "tp0of2-pp1of2-cp1of2-x"
    # Attention-DP ranks hold the same heads: their pages are shared.
    assert shard_name(config(dp_rank=3, dp_size=4), "page_head") == "tp0of1-page_head"
    # Side pools by name; under MLA only Mamba's state is split by rank.
    assert shard_name(config(), "page_first", PoolName.INDEXER) == "tp0of1-page_first-indexer"
    mla = config(is_mla_model=True, tp_rank=1, tp_size=2)
    assert shard_name(mla, "page_first", PoolName.INDEXER) == "mla-page_first-indexer"
    assert shard_name(mla, "page_first", PoolName.MAMBA) == "tp1of2-page_first-mamba"
    assert shard_name(mla, "page_first", PoolName.KV) == "mla-page_first"
    with pytest.raises(NotImplementedError):
        shard_name(config(should_split_heads=True, tp_lcm_size=4), "page_head")
    with pytest.raises(ValueError):
        shard_name(config(), "../x")


def test_bad_configuration_is_refused(server, ns) -> None:
    with pytest.raises(TypeError):
        MaruHiCacheStorage(None, {})
    with pytest.raises(TypeError):
        MaruHiCacheStorage(config(extra_config={"maru_server": server.url}), 42)
    with pytest.raises(ValueError, match="maru_sever"):  # a typo is not a default
        MaruHiCacheStorage(config(extra_config={"maru_sever": server.url}), {})
    with pytest.raises(TypeError):
        MaruHiCacheStorage(config(extra_config={"maru_server": 5}), {})
    with pytest.raises(ValueError):
        MaruHiCacheStorage(config(extra_config={"maru_server": server.url,
                                                "maru_namespace": ".."}), {})
    with pytest.raises(OSError):
        MaruHiCacheStorage(config(extra_config={"maru_server": "unix:///nonexistent/sock"}), {})


def test_interface_v1_missing_is_logged(server, ns, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="maru.sglang"):
        make(server, ns, extra={"interface_v1": 0}).close()
        make(server, ns, extra={"interface_v1": "false"}).close()
    text = caplog.text
    assert "legacy batch_get/batch_set" in text and "'false'" in text


def test_built_in_style_second_argument_is_the_pool(server, ns) -> None:
    pool = HostPool()
    s = MaruHiCacheStorage(config(extra_config={"maru_server": server.url,
                                                "maru_namespace": ns}), pool)
    try:
        assert s.mem_pool_host is pool and s.path("x").endswith("tp0of1-page_first/x")
    finally:
        s.close()


def test_set_get_exists_clear(server, ns) -> None:
    s = make(server, ns)
    try:
        value = torch.arange(64, dtype=torch.float32)
        assert not s.exists("k1") and s.get("k1") is None
        assert s.set("k1", value) and s.exists("k1")
        assert s.set("k1", torch.zeros(64))  # first writer wins
        out = torch.empty(64)
        assert s.get("k1", out) is out and torch.equal(out, value)
        view = s.get("k1")  # zero-copy bytes
        assert torch.equal(view.view(torch.float32), value)
        target = torch.empty(64)  # the pointer form of the legacy calls
        assert s.get("k1", target.data_ptr(), 256) is True and torch.equal(target, value)
        assert s.batch_set(["k2", "k3"], [value, value + 1])
        got = s.batch_get(["k2", "k3", "k4"], [torch.empty(64), torch.empty(64), torch.empty(64)])
        assert torch.equal(got[1], value + 1) and got[2] is None
        # Each key on its own, past a missing one (HiCacheStorage.batch_get).
        got = s.batch_get(["k4", "k2", "k5", "k3"], [torch.empty(64) for _ in range(4)])
        assert got[0] is None and got[2] is None
        assert torch.equal(got[1], value) and torch.equal(got[3], value + 1)
        # A target of another size is a miss, never a part of the page.
        assert s.get("k1", torch.empty(32)) is None
        assert s.get("k1", torch.empty(65)) is None
        assert s.batch_exists(["k1", "k2", "k3", "k4"]) == 3
        s.clear()
        assert s.batch_exists(["k1", "k2", "k3"]) == 0
        assert torch.equal(view.view(torch.float32), value)  # a view outlives the unlink
    finally:
        s.close()


def test_legacy_calls_refuse_bad_input_and_store_nothing(server, ns) -> None:
    s = make(server, ns)
    try:
        strided = torch.arange(64, dtype=torch.bfloat16).view(8, 8).t()
        with pytest.raises(ValueError, match="contiguous"):
            s.batch_set(["n1"], [strided])
        with pytest.raises(ValueError, match="contiguous"):
            s.batch_get(["n1"], [strided])
        with pytest.raises(ValueError):
            s.batch_set(["n1", "n2"], [torch.zeros(4)])  # one value for two keys
        with pytest.raises(ValueError):
            s.set("n1")  # nothing to store
        with pytest.raises(ValueError):
            s.get("n1", 12345)  # an address without its size
        with pytest.raises(TypeError):
            s.batch_exists([b"bytes"])
        assert s.batch_exists(["n1", "n2"]) == 0
    finally:
        s.close()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_legacy_path_in_every_dtype(server, ns, dtype, layout) -> None:
    # HiCacheController._generic_page_set / _generic_page_get at 001067ff:
    # batch_set(keys, [get_data_page(host_indices[i * page_size])]), then
    # batch_get(keys, [get_dummy_flat_data_page()]) and
    # set_from_flat_data_page(host_indices[i * page_size], page).
    a_pool = HostPool(dtype=dtype, layout=layout)
    b_pool = HostPool(dtype=dtype, layout=layout)
    a_pool.fill(7)
    a, b = make(server, ns, a_pool), make(server, ns, b_pool)
    try:
        keys = [f"d{i}" for i in range(3)]
        src = torch.tensor([8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23])  # pages 2, 0, 5
        data = [a_pool.get_data_page(src[i * 4]) for i in range(3)]
        assert all(d.dtype == dtype for d in data)
        assert a.batch_set(keys, data) is True
        dst = torch.arange(32, 44)
        dummies = [b_pool.get_dummy_flat_data_page() for _ in keys]
        pages = b.batch_get(keys, dummies)
        assert all(p is d for p, d in zip(pages, dummies))
        for i, page in enumerate(pages):
            b_pool.set_from_flat_data_page(dst[i * 4], page)
            assert torch.equal(b_pool.get_data_page(dst[i * 4]).view(torch.uint8),
                               a_pool.get_data_page(src[i * 4]).view(torch.uint8))
        # v1 reads what the legacy path wrote: the same bytes of the same page.
        v1_pool = HostPool(dtype=dtype, layout=layout)
        b.register_mem_pool_host(v1_pool)
        assert b.batch_get_v1(keys, dst) == [True] * 3
        assert torch.equal(v1_pool.kv_buffer.view(torch.uint8), b_pool.kv_buffer.view(torch.uint8))
    finally:
        a.close()
        b.close()


def test_hint_pages(server, ns) -> None:
    s = make(server, ns)
    try:
        value = torch.arange(64, dtype=torch.float32)
        assert s.batch_set(["h1", "h2"], [value, value])
        assert s.hint_pages(["h1", "h2", "missing"], maru.Hint.KEEP) == 2
        assert s.hint_pages(["h1", "h2"], maru.Hint.DROP) == 2
        assert s.hint_pages([], maru.Hint.NONE) == 0
        with pytest.raises(OSError) as e:
            s.hint_pages(["h1"], 9)
        assert e.value.errno == errno.EINVAL
        assert s.batch_exists(["h1", "h2"]) == 2  # a hint removes nothing
    finally:
        s.close()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batch_v1_round_trip_and_prefix(server, ns, dtype) -> None:
    a_pool, b_pool = HostPool(dtype=dtype), HostPool(dtype=dtype)
    a_pool.fill(3)
    a, b = make(server, ns, a_pool), make(server, ns, b_pool)
    try:
        keys = [f"h{i}" for i in range(4)]
        src = torch.tensor([8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23])  # pages 2, 0, 5
        info = HiCacheStorageExtraInfo(prefix_keys=["h-before"])
        assert a.batch_set_v1(keys[:3], src, info) == [True] * 3
        assert a.batch_set_v1(keys[:3], src) == [True] * 3  # already there
        assert b.batch_exists(keys, info) == 3
        dst = torch.arange(16, 32)
        assert b.batch_get_v1(keys, dst, info) == [True, True, True, False]
        for s_page, d_page in zip(src.view(-1, 4)[:, 0], dst.view(-1, 4)[:3, 0]):
            assert torch.equal(b_pool.kv_buffer[:, d_page:d_page + 4],
                               a_pool.kv_buffer[:, s_page:s_page + 4])
        assert not b_pool.kv_buffer[:, 28:32].any()
        # A chunk of another size under a page's name is not loaded.
        assert a.set("h3", torch.zeros(3))
        assert b.batch_get_v1(keys, dst) == [True, True, True, False]
        # Other ranks and layouts do not see these pages.
        other = make(server, ns, HostPool(dtype=dtype), tp_rank=1, tp_size=2)
        assert other.batch_exists(keys) == 0
        other.close()
        other = make(server, ns, HostPool(dtype=dtype, layout="layer_first"))
        assert other.batch_exists(keys) == 0
        other.close()
    finally:
        a.close()
        b.close()


def test_batch_exists_beyond_one_call(server, ns) -> None:
    s = make(server, ns, HostPool())
    try:
        keys = [f"p{i}" for i in range(BATCH_MAX + 3)]
        assert s.batch_exists(keys) == 0
        assert s.batch_get_v1(keys[:2], torch.arange(8)) == [False, False]
        with pytest.raises(ValueError):  # host indices for one page, two keys
            s.batch_get_v1(keys[:2], torch.arange(4))
    finally:
        s.close()


def test_full_pool_pages_fail_cleanly(make_server, ns) -> None:
    small = make_server(pool_size=1 << 20, unit=64 << 10)
    pool = HostPool(tokens=24 * 64, page_size=64, layers=2)
    s = make(small, ns, pool)
    try:
        keys = [f"big{i}" for i in range(24)]  # a 64 KiB unit each: more than the pool
        results = s.batch_set_v1(keys, torch.arange(24 * 64))
        assert True in results and False in results
        assert s.batch_exists(keys) == results.index(False)
    finally:
        s.close()


def test_lost_server_is_a_miss_not_an_exception(make_server, ns, monkeypatch) -> None:
    # HiCache's prefetch and backup threads are never restarted: an
    # exception there would switch the L3 tier off for good.
    monkeypatch.setenv("MARU_TIMEOUT_MS", "500")  # each call gives up soon
    monkeypatch.setenv("MARU_RETRY_MS", "100")
    gone = make_server()
    pool = HostPool()
    s = make(gone, ns, pool)
    try:
        assert s.batch_set_v1(["a", "b"], torch.arange(8)) == [True, True]
        gone.stop()
        assert s.batch_exists(["a", "b"]) == 0
        assert s.batch_get_v1(["a", "b"], torch.arange(8)) == [False, False]
        assert s.batch_set_v1(["c"], torch.arange(4)) == [False]
        assert s.batch_get(["a"], [pool.get_dummy_flat_data_page()]) == [None]
        assert s.batch_set(["c"], [pool.get_data_page(0)]) is False
    finally:
        s.close()


class LayerFirstPool:
    """A layer_first MHA host pool: kv_buffer [2, layers, tokens, heads, dim];
    a page is two strided pieces per layer."""

    layout = "layer_first"

    def __init__(self, tokens: int, page_size: int, layers: int) -> None:
        self.page_size, self.size, self.layers = page_size, tokens, layers
        self.kv_buffer = torch.zeros(2, layers, tokens, 1, 4)

    def get_page_buffer_meta(self, indices) -> tuple:
        tok, base = 16, self.kv_buffer.data_ptr()
        v = self.layers * self.size * tok
        ptrs: List[int] = []
        for i in range(0, len(indices), self.page_size):
            for layer in range(self.layers):
                k = base + (layer * self.size + int(indices[i])) * tok
                ptrs += [k, k + v]
        return ptrs, [self.page_size * tok] * len(ptrs)


def test_layer_first_pages_beyond_one_copy_call(server, ns) -> None:
    pages, layers = 60, 40  # 4800 pieces: more than BATCH_MAX ops
    a_pool, b_pool = LayerFirstPool(pages * 2, 2, layers), LayerFirstPool(pages * 2, 2, layers)
    a_pool.kv_buffer.copy_(torch.randn(a_pool.kv_buffer.shape))
    a, b = make(server, ns, a_pool), make(server, ns, b_pool)
    try:
        keys = [f"l{i}" for i in range(pages)]
        idx = torch.arange(pages * 2)
        assert 2 * layers * pages > BATCH_MAX
        assert a.batch_set_v1(keys, idx) == [True] * pages
        assert b.batch_get_v1(keys, idx.flip(0).view(-1, 2).flip(1).reshape(-1)) == [True] * pages
        # page i went to the slots of page pages-1-i in B's pool
        assert torch.equal(b_pool.kv_buffer.view(2, layers, pages, 2, 1, 4).flip(2),
                           a_pool.kv_buffer.view(2, layers, pages, 2, 1, 4))
    finally:
        a.close()
        b.close()


# --- the multi-pool (v2) interface -------------------------------------------


def hybrid(server, ns, **fields):
    """A backend with a KV pool, an indexer pool (pointers, KV-derived) and a
    Mamba state pool (flat pages), registered as HybridCacheController does:
    the base attach's register_mem_pool_host, then register_mem_host_pool_v2
    for every entry, KV included."""
    kv, indexer, mamba = HostPool(), HostPool(dim=4, dtype=FP8), StatePool()
    s = make(server, ns, kv, **fields)
    for pool, name in ((kv, PoolName.KV), (indexer, PoolName.INDEXER), (mamba, PoolName.MAMBA)):
        s.register_mem_host_pool_v2(pool, name)
    return s, kv, indexer, mamba


def test_v2_pools_round_trip_and_never_collide(server, ns) -> None:
    a, a_kv, a_idx, a_mamba = hybrid(server, ns)
    b, b_kv, b_idx, b_mamba = hybrid(server, ns)
    try:
        assert a.registered_pools[PoolName.MAMBA] is a_mamba  # SGLang's own record
        keys = [f"v{i}" for i in range(4)]
        a_kv.fill(1)
        a_idx.fill(2)
        a_mamba.buffer.copy_(torch.randn(a_mamba.buffer.shape))
        assert a.batch_set_v1(keys, torch.arange(16)) == [True] * 4
        done = a.batch_set_v2([
            PoolTransfer(name=PoolName.INDEXER, host_indices=torch.arange(12), keys=keys[:3],
                         indices_from_pool=PoolName.KV),
            PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([5]), keys=keys[3:],
                         hit_policy=PoolHitPolicy.TRAILING_PAGES)])
        assert done == {PoolName.INDEXER: [True] * 3, PoolName.MAMBA: [True]}
        # Same key, three pools, three chunks.
        paths = {b.path(keys[0], p) for p in ("kv", PoolName.INDEXER, PoolName.MAMBA)}
        assert len(paths) == 3
        got = b.batch_get_v2([
            PoolTransfer(name=PoolName.INDEXER, host_indices=torch.arange(20, 36), keys=keys),
            PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([9]), keys=keys[3:])])
        assert got == {PoolName.INDEXER: [True, True, True, False], PoolName.MAMBA: [True]}
        assert torch.equal(b_idx.kv_buffer[:, 20:32].view(torch.uint8),
                           a_idx.kv_buffer[:, 0:12].view(torch.uint8))
        assert torch.equal(b_mamba.buffer[9], a_mamba.buffer[5])
        with pytest.raises(ValueError):  # host indices that do not fit the keys
            b.batch_get_v2([PoolTransfer(name=PoolName.INDEXER, host_indices=torch.arange(5),
                                         keys=keys[:2])])
        with pytest.raises(ValueError):  # a pool nobody registered
            b.batch_set_v2([PoolTransfer(name=PoolName.SWA, host_indices=torch.arange(4),
                                         keys=keys[:1])])
    finally:
        a.close()
        b.close()


def test_v2_exists_by_hit_policy(server, ns) -> None:
    s, kv, _, _ = hybrid(server, ns)
    try:
        keys = [f"e{i}" for i in range(6)]
        assert s.batch_set_v1(keys[:5], torch.arange(20)) == [True] * 5  # KV: 5 pages
        s.batch_set_v2([PoolTransfer(name=PoolName.INDEXER, host_indices=torch.arange(12),
                                     keys=keys[:3])])  # indexer: pages 0-2
        s.batch_set_v2([PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([0, 1]),
                                     keys=[keys[1], keys[3]])])  # states after pages 1, 3
        r = s.batch_exists_v2(keys)
        assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (5, {PoolName.KV: 5})
        all_pages = PoolTransfer(name=PoolName.INDEXER, hit_policy=PoolHitPolicy.ALL_PAGES)
        r = s.batch_exists_v2(keys, [all_pages])
        assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (
            3, {PoolName.KV: 5, PoolName.INDEXER: 3})
        # Trailing: the longest prefix whose last page has a state: page 3 (4 pages).
        trailing = PoolTransfer(name=PoolName.MAMBA, keys=keys[4:5],
                                hit_policy=PoolHitPolicy.TRAILING_PAGES)
        r = s.batch_exists_v2(keys, [trailing])
        assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (
            4, {PoolName.KV: 5, PoolName.MAMBA: 4})
        r = s.batch_exists_v2(keys, [trailing, all_pages])
        assert r.kv_hit_pages == 3
        # Two trailing pages needed: 3 and 4 never both have states.
        two = PoolTransfer(name=PoolName.MAMBA, keys=keys[3:5],
                           hit_policy=PoolHitPolicy.TRAILING_PAGES)
        assert s.batch_exists_v2(keys, [two]).kv_hit_pages == 0
        assert s.batch_exists_v2(["zz"], [all_pages]).kv_hit_pages == 0
    finally:
        s.close()


def test_v2_mla_shares_pages_across_ranks_but_not_mamba_state(server, ns) -> None:
    r0, kv0, idx0, mamba0 = hybrid(server, ns, is_mla_model=True, tp_rank=0, tp_size=2)
    r1, kv1, idx1, mamba1 = hybrid(server, ns, is_mla_model=True, tp_rank=1, tp_size=2)
    try:
        keys = ["m0", "m1"]
        # Rank 0 writes KV and indexer; every rank writes its Mamba state
        # (HybridCacheController.should_backup).
        assert r0.batch_set_v1(keys, torch.arange(8)) == [True, True]
        r0.batch_set_v2([PoolTransfer(name=PoolName.INDEXER, host_indices=torch.arange(8),
                                      keys=keys),
                         PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([0]),
                                      keys=keys[1:])])
        need = [PoolTransfer(name=PoolName.INDEXER),
                PoolTransfer(name=PoolName.MAMBA, keys=keys[1:],
                             hit_policy=PoolHitPolicy.TRAILING_PAGES)]
        assert r0.batch_exists_v2(keys, need).kv_hit_pages == 2
        assert r1.batch_exists_v2(keys, need[:1]).kv_hit_pages == 2  # shared
        assert r1.batch_exists_v2(keys, need).kv_hit_pages == 0  # rank 1's state is its own
        r1.batch_set_v2([PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([3]),
                                      keys=keys[1:])])
        assert r1.batch_exists_v2(keys, need).kv_hit_pages == 2
    finally:
        r0.close()
        r1.close()
