"""maru_sglang, the original Maru's SGLang module, against a real server:
its config (MaruSGLangConfig, parse_size) with the original's defaults and
errors, MaruStorage built as SGLang's factory builds it from the original's
keys (over unix:// and tcp://), sharing pages with maru.sglang, and
MaruHostTensorAllocator placing a host tensor in the pool."""

from __future__ import annotations

import socket

import pytest

torch = pytest.importorskip("torch")

from conftest import in_pool  # noqa: E402
from maru.sglang import HiCacheStorageConfig, MaruHiCacheStorage  # noqa: E402
from maru_sglang import MaruSGLangConfig, MaruStorage, parse_size  # noqa: E402
from maru_sglang.allocator import MaruHostTensorAllocator  # noqa: E402


def config(extra: dict, **fields) -> HiCacheStorageConfig:
    base = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=False,
                model_name="Qwen/Qwen2.5-0.5B", extra_config=extra)
    base.update(fields)
    return HiCacheStorageConfig(**base)


def original(server_url: str, **keys) -> dict:
    """The extra config of the original's docs, with its keys."""
    extra = {"backend_name": "maru", "module_path": "maru_sglang.maru_storage",
             "class_name": "MaruStorage", "interface_v1": 1, "maru_server_url": server_url,
             "maru_pool_size": "4G"}
    extra.update(keys)
    return extra


@pytest.mark.parametrize("text,size", [(1024, 1024), ("1024", 1024), ("4G", 4 << 30),
                                       ("500M", 500 << 20), ("128K", 128 << 10),
                                       ("1T", 1 << 40), ("4GB", 4 << 30), ("4g", 4 << 30),
                                       ("1.5G", 3 << 29), (2.5, 2)])
def test_parse_size(text, size) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["not_a_size", "4X", "", "G", "1..5G"])
def test_parse_size_refuses(bad) -> None:
    with pytest.raises(ValueError):
        parse_size(bad)


def test_config_defaults_and_keys() -> None:
    default = MaruSGLangConfig()
    assert (default.server_url, default.pool_size, default.chunk_size_bytes) == (
        "tcp://localhost:5555", 4 << 30, 1 << 20)
    assert MaruSGLangConfig.from_extra_config(None) == default
    assert MaruSGLangConfig.from_extra_config({}) == default
    full = MaruSGLangConfig.from_extra_config({
        "maru_server_url": "tcp://10.0.0.1:6666", "maru_pool_size": "8G",
        "maru_chunk_size_bytes": "2M", "maru_instance_id": "i", "maru_timeout_ms": 5000,
        "maru_use_async_rpc": False, "maru_max_inflight": 32, "maru_eager_map": False})
    assert full == MaruSGLangConfig("tcp://10.0.0.1:6666", 8 << 30, 2 << 20, "i", 5000,
                                    False, 32, False)
    assert MaruSGLangConfig.from_extra_config({"maru_pool_size": 123}).pool_size == 123
    with pytest.raises(ValueError):
        MaruSGLangConfig.from_extra_config({"maru_pool_size": "lots"})


class Pool:
    """A page_first MHA host pool (4 tokens a page, 2 layers, 2 heads of 8)."""

    layout, page_size = "page_first_direct", 4

    def __init__(self, dtype=torch.bfloat16) -> None:
        self.kv_buffer = torch.zeros(2, 8, 2, 4, 2, 8, dtype=dtype)  # [2, pages, L, P, H, D]

    def get_page_buffer_meta(self, indices) -> tuple:
        item = self.kv_buffer.element_size()
        per = 2 * 4 * 2 * 8 * item
        base, v = self.kv_buffer.data_ptr(), 8 * per
        ptrs = []
        for i in range(0, len(indices), 4):
            k = base + int(indices[i]) // 4 * per
            ptrs += [k, k + v]
        return ptrs, [per] * len(ptrs)


def test_storage_from_the_original_keys(server, make_server, ns) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tcp = make_server(extra=["--listen", f"tcp://127.0.0.1:{port}"])
    a_pool, b_pool = Pool(), Pool()
    a_pool.kv_buffer.copy_(torch.randn(a_pool.kv_buffer.shape))
    # As SGLang's factory: cls(storage_config, {}), then register_mem_pool_host.
    a = MaruStorage(config(original(f"tcp://127.0.0.1:{port}", maru_instance_id="inst1",
                                    maru_namespace=ns)), {})
    b = MaruStorage(config(original(tcp.url, maru_namespace=ns, maru_timeout_ms=100,
                                    maru_eager_map=False)), {})
    ours = MaruHiCacheStorage(config({"maru_server": tcp.url, "maru_namespace": ns,
                                      "interface_v1": 1}), {})
    try:
        assert a.maru_config.pool_size == 4 << 30 and a.maru_config.instance_id == "inst1"
        assert b.maru_config.timeout_ms == 100 and b.maru_config.eager_map is False
        a.register_mem_pool_host(a_pool)
        b.register_mem_pool_host(b_pool)
        ours.register_mem_pool_host(Pool())
        keys = ["p0", "p1"]
        assert a.batch_set_v1(keys, torch.arange(8)) == [True, True]
        assert b.batch_exists(keys) == 2
        assert b.batch_get_v1(keys, torch.arange(16, 24)) == [True, True]
        assert torch.equal(b_pool.kv_buffer[:, 4:6], a_pool.kv_buffer[:, 0:2])
        # The same pages as maru.sglang's own class.
        assert ours.batch_exists(keys) == 2
        assert ours.path("p0") == a.path("p0")
        a.close()
        a.close()  # twice is fine
    finally:
        a.close()
        b.close()
        ours.close()


def test_storage_refuses_bad_keys(server) -> None:
    with pytest.raises(ValueError):
        MaruStorage(config(original(server.url, maru_pool_size="huge")), {})
    with pytest.raises(TypeError):
        MaruStorage(config(original(server.url, maru_namespace=3)), {})
    with pytest.raises(TypeError):
        MaruStorage(config(original(5)), {})
    with pytest.raises(OSError):  # no server there
        MaruStorage(config(original("unix:///nonexistent/maru.sock")), {})


def test_host_tensor_allocator(server, monkeypatch) -> None:
    monkeypatch.setenv("MARU_SERVER_URL", server.url)
    monkeypatch.setenv("MARU_INSTANCE_ID", "sglang-host-pool")
    alloc = MaruHostTensorAllocator()
    try:
        t = alloc.allocate((2, 4, 16, 8), torch.bfloat16, "cpu")
        assert t.shape == (2, 4, 16, 8) and t.dtype == torch.bfloat16
        assert (alloc.dims, alloc.dtype) == ((2, 4, 16, 8), torch.bfloat16)
        assert alloc.base_ptr == t.data_ptr() and alloc.handler is not None
        assert in_pool(t.data_ptr(), t.numel() * 2, server.pool)
        t.copy_(torch.arange(t.numel()).view(t.shape).to(torch.bfloat16))
        assert t.float().sum() == torch.arange(t.numel()).to(torch.bfloat16).float().sum()
        with pytest.raises(ValueError):
            alloc.allocate((0, 4), torch.float32)
    finally:
        alloc.close()
