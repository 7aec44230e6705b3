"""maru.sglang.MaruHiCacheStorage against a real server: the HiCache calls
one by one (the model-level harness is examples/tiny_llm/test_sglang.py)."""

from __future__ import annotations

import dataclasses
import errno
from typing import List, Optional

import pytest

torch = pytest.importorskip("torch")

import maru  # noqa: E402
from maru import BATCH_MAX  # noqa: E402
from maru.sglang import MaruHiCacheStorage, shard_name  # noqa: E402


@dataclasses.dataclass
class StorageConfig:  # SGLang's HiCacheStorageConfig, field for field
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    is_mla_model: bool = False
    enable_storage_metrics: bool = False
    is_page_first_layout: bool = True
    model_name: Optional[str] = "org/model"
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


class PageFirstPool:
    """A page_first MHA host pool: kv_buffer [2, tokens, layers, heads, dim]."""

    layout = "page_first"

    def __init__(self, tokens: int = 64, page_size: int = 4, layers: int = 2) -> None:
        self.page_size, self.size, self.layers = page_size, tokens, layers
        self.kv_buffer = torch.zeros(2, tokens, layers, 2, 8)

    def get_page_buffer_meta(self, indices) -> tuple:
        tok = self.layers * 2 * 8 * 4
        base, v = self.kv_buffer.data_ptr(), self.size * tok
        ptrs: List[int] = []
        for i in range(0, len(indices), self.page_size):
            ptrs += [base + int(indices[i]) * tok, base + int(indices[i]) * tok + v]
        return ptrs, [self.page_size * tok] * len(ptrs)


def make(server, ns, pool=None, **fields) -> MaruHiCacheStorage:
    config = StorageConfig(extra_config={"maru_server": server.url, "maru_namespace": ns,
                                         "backend_name": "maru"}, **fields)
    return MaruHiCacheStorage(config, pool if pool is not None else {})


def test_shard_names() -> None:
    assert shard_name(StorageConfig(tp_rank=1, tp_size=4), "page_first") == "tp1of4-page_first"
    assert shard_name(StorageConfig(is_mla_model=True, tp_rank=3), "layer_first") == \
        "mla-layer_first"
    assert shard_name({"tp_rank": 0, "tp_size": 2, "pp_rank": 1, "pp_size": 2,
                       "attn_cp_rank": 1, "attn_cp_size": 2}, "x") == "tp0of2-pp1of2-cp1of2-x"
    with pytest.raises(NotImplementedError):
        shard_name(StorageConfig(should_split_heads=True), "page_first")


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
        assert s.batch_exists(["k1", "k2", "k3", "k4"]) == 3
        s.clear()
        assert s.batch_exists(["k1", "k2", "k3"]) == 0
        assert torch.equal(view.view(torch.float32), value)  # a view outlives the unlink
    finally:
        s.close()


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


def test_batch_v1_round_trip_and_prefix(server, ns) -> None:
    a_pool, b_pool = PageFirstPool(), PageFirstPool()
    a_pool.kv_buffer.copy_(torch.randn(a_pool.kv_buffer.shape))
    a, b = make(server, ns, a_pool), make(server, ns, b_pool)
    try:
        keys = [f"h{i}" for i in range(4)]
        src = torch.tensor([8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23])  # pages 2, 0, 5
        assert a.batch_set_v1(keys[:3], src) == [True] * 3
        assert a.batch_set_v1(keys[:3], src) == [True] * 3  # already there
        assert b.batch_exists(keys) == 3
        dst = torch.arange(16, 32)
        assert b.batch_get_v1(keys, dst) == [True, True, True, False]
        for s_page, d_page in zip(src.view(-1, 4)[:, 0], dst.view(-1, 4)[:3, 0]):
            assert torch.equal(b_pool.kv_buffer[:, d_page:d_page + 4],
                               a_pool.kv_buffer[:, s_page:s_page + 4])
        assert torch.equal(b_pool.kv_buffer[:, 28:32], torch.zeros(2, 4, 2, 2, 8))
        # A chunk of another size under a page's name is not loaded.
        assert a.set("h3", torch.zeros(3))
        assert b.batch_get_v1(keys, dst) == [True, True, True, False]
        # Other ranks and layouts do not see these pages.
        other = make(server, ns, PageFirstPool(), tp_rank=1, tp_size=2)
        assert other.batch_exists(keys) == 0
        other.close()
    finally:
        a.close()
        b.close()


def test_batch_exists_beyond_one_call(server, ns) -> None:
    s = make(server, ns, PageFirstPool())
    try:
        keys = [f"p{i}" for i in range(BATCH_MAX + 3)]
        assert s.batch_exists(keys) == 0
        assert s.batch_get_v1(keys[:2], torch.arange(8)) == [False, False]
    finally:
        s.close()


def test_full_pool_pages_fail_cleanly(make_server, ns) -> None:
    small = make_server(pool_size=1 << 20, unit=64 << 10)
    pool = PageFirstPool(tokens=24 * 64, page_size=64, layers=2)
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
    s = make(gone, ns, PageFirstPool())
    try:
        assert s.batch_set_v1(["a", "b"], torch.arange(8)) == [True, True]
        gone.stop()
        assert s.batch_exists(["a", "b"]) == 0
        assert s.batch_get_v1(["a", "b"], torch.arange(8)) == [False, False]
        assert s.batch_set_v1(["c"], torch.arange(4)) == [False]
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
