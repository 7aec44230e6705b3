"""Our SGLang classes held against SGLang's interface at its pinned commit
(python/contracts/sglang.json, written by scripts/engine-manifest.py from
SGLang's hicache_storage.py and backend_factory.py at 001067ff):

- the stand-ins of maru._upstream.sglang match it class for class: fields
  (annotations and defaults, as text), enum members, methods (parameters,
  annotations and defaults as text, return annotations, abstract or not);
- maru.sglang.MaruHiCacheStorage implements every abstract method and
  every method SGLang's controller calls, with SGLang's parameters;
- maru_sglang (the original Maru's module) matches the original's
  MaruStorage and MaruSGLangConfig (python/contracts/maru.json).

When SGLang is importable, maru.sglang uses its real classes, and the
checks of MaruHiCacheStorage run against those.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pytest

import maru.sglang as ms
from maru._upstream import sglang as standin

CONTRACTS = Path(__file__).resolve().parents[1] / "contracts"
MANIFEST = json.loads((CONTRACTS / "sglang.json").read_text())
ORIGINAL = json.loads((CONTRACTS / "maru.json").read_text())
HS = "python/sglang/srt/mem_cache/hicache_storage.py"
CLASSES = MANIFEST["classes"]

#: What HiCacheController and HybridCacheController call on a backend at
#: the pinned commit (managers/cache_controller.py,
#: hybrid_cache/hybrid_cache_controller.py), close() when it has one.
CONTROLLER_CALLS = ["register_mem_pool_host", "register_mem_host_pool_v2", "batch_exists",
                    "batch_exists_v2", "batch_get_v1", "batch_set_v1", "batch_get_v2",
                    "batch_set_v2", "batch_get", "batch_set", "get", "set", "exists", "clear",
                    "get_stats", "close"]


def annotation_text(annotation: object) -> object:
    return None if annotation is inspect.Parameter.empty else annotation


def check_params(fn, spec, name, defaults_equal=True):
    """``fn`` takes the manifest's parameters in order, with its annotations
    and defaults as text; extra parameters of ours have defaults."""
    got = list(inspect.signature(fn).parameters.values())
    want = spec["params"]
    first = want[0]["name"] if want else None
    if first in ("self", "cls") and (not got or got[0].name != first):  # bound: cls dropped
        got = [inspect.Parameter(first, inspect.Parameter.POSITIONAL_OR_KEYWORD)] + got
    assert [p.name for p in got[:len(want)]] == [w["name"] for w in want], name
    for g, w in zip(got, want):
        if "default" in w:
            assert g.default is not inspect.Parameter.empty, (name, g.name)
            if defaults_equal:
                assert repr(g.default) == w["default"], (name, g.name)
    for extra in got[len(want):]:
        assert extra.default is not inspect.Parameter.empty, (name, extra.name)
    return got


def test_the_manifest_is_the_pinned_commit():
    assert standin.SGLANG_COMMIT == ms.SGLANG_COMMIT
    assert set(MANIFEST["files"].values()) == {standin.SGLANG_COMMIT}


@pytest.mark.parametrize("cls_name", [
    "HiCacheStorageConfig", "HiCacheStorageExtraInfo", "PrefetchTimeoutConfig", "PoolTransfer",
    "SidecarPoolSpec", "PoolTransferResult"])
def test_dataclasses(cls_name):
    spec = CLASSES[f"{HS}:{cls_name}"]
    cls = getattr(standin, cls_name)
    ours = {f.name: f for f in dataclasses.fields(cls)}
    assert list(ours) == list(cls.__annotations__)  # declared in this order
    assert set(ours) == set(spec["fields"]), cls_name
    for name, field in spec["fields"].items():
        assert cls.__annotations__[name] == field["annotation"], (cls_name, name)
        has_default = ours[name].default is not dataclasses.MISSING
        assert has_default == ("default" in field), (cls_name, name)
        if has_default:
            default = ours[name].default
            text = f"{type(default).__name__}.{default.name}" if hasattr(default, "name") \
                else repr(default)
            assert text == field["default"], (cls_name, name)
    frozen = "dataclass(frozen=True)" in spec["decorators"]
    assert cls.__dataclass_params__.frozen == frozen, cls_name
    for method, mspec in spec["methods"].items():
        fn = getattr(cls, method)
        check_params(fn, mspec, f"{cls_name}.{method}")
        assert annotation_text(inspect.signature(fn).return_annotation) == \
            mspec.get("returns"), (cls_name, method)


def test_field_order_of_the_config():
    # SGLang builds it by keywords, tests and backends positionally.
    order = ["tp_rank", "tp_size", "pp_rank", "pp_size", "attn_cp_rank", "attn_cp_size",
             "is_mla_model", "enable_storage_metrics", "is_page_first_layout", "model_name",
             "dp_rank", "dp_size", "tp_lcm_size", "should_split_heads", "extra_config"]
    assert [f.name for f in dataclasses.fields(standin.HiCacheStorageConfig)] == order


@pytest.mark.parametrize("cls_name", ["PoolName", "PoolHitPolicy"])
def test_enums(cls_name):
    spec = CLASSES[f"{HS}:{cls_name}"]
    cls = getattr(standin, cls_name)
    assert {m.name: repr(m.value) for m in cls} == {k: v["value"] for k, v in
                                                    spec["fields"].items()}
    assert issubclass(cls, str)
    assert str(standin.PoolName.MAMBA) == "mamba"


def test_count_pool_hits():
    spec = MANIFEST["functions"][f"{HS}:count_pool_hits"]
    check_params(standin.count_pool_hits, spec, "count_pool_hits")
    assert standin.count_pool_hits({"a": [True, True, False, True], "b": []}) == {"a": 2, "b": 0}
    r = standin.PoolTransferResult.empty()
    r.update_kv_hit_pages(3)
    r.update_kv_hit_pages(2)
    r.update_extra_pool_hit_pages({"mamba": 1})
    assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (3, {"mamba": 1})


def test_hicache_storage_stand_in():
    spec = CLASSES[f"{HS}:HiCacheStorage"]
    cls = standin.HiCacheStorage
    assert set(spec["methods"]) == {n for n, v in vars(cls).items()
                                    if inspect.isfunction(v)}
    for method, mspec in spec["methods"].items():
        fn = getattr(cls, method)
        got = check_params(fn, mspec, method)
        for g, w in zip(got, mspec["params"]):
            assert annotation_text(g.annotation) == w.get("annotation"), (method, g.name)
        assert annotation_text(inspect.signature(fn).return_annotation) == \
            mspec.get("returns"), method
        assert getattr(fn, "__isabstractmethod__", False) == mspec["abstract"], method
    assert cls.__abstractmethods__ == {m for m, s in spec["methods"].items() if s["abstract"]}


def test_stand_in_defaults_behave_as_sglang():
    class Keys(standin.HiCacheStorage):
        def __init__(self, present):
            self.present = present

        def get(self, key, target_location=None, target_sizes=None):
            return None

        def batch_get(self, keys, target_locations=None, target_sizes=None):
            return [None] * len(keys)

        def set(self, key, value=None, target_location=None, target_sizes=None):
            return False

        def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
            return False

        def exists(self, key):
            return key in self.present

    s = Keys({"a", "b", "d"})
    assert s.batch_exists(["a", "b", "c", "d"]) == 2
    for call in (lambda: s.batch_get_v1(["a"], None), lambda: s.batch_set_v1(["a"], None),
                 lambda: s.batch_exists_v2(["a"]), lambda: s.batch_get_v2([]),
                 lambda: s.batch_set_v2([])):
        with pytest.raises(NotImplementedError):
            call()
    s.register_mem_pool_host("pool")
    s.register_mem_host_pool_v2("p2", standin.PoolName.SWA)
    assert s.mem_pool_host == "pool" and s.registered_pools == {standin.PoolName.SWA: "p2"}
    assert s.clear() is None and s.get_stats() is None
    with pytest.raises(TypeError):
        standin.HiCacheStorage()  # abstract


def test_our_backend_implements_what_sglang_calls():
    cls = ms.MaruHiCacheStorage
    assert issubclass(cls, ms.HiCacheStorage)
    assert not cls.__abstractmethods__
    spec = CLASSES[f"{HS}:HiCacheStorage"]["methods"]
    for method in CONTROLLER_CALLS:
        assert method in cls.__dict__, f"MaruHiCacheStorage itself defines {method}"
        if method in spec:
            check_params(getattr(cls, method), spec[method], method, defaults_equal=True)
    # The factory's constructor call: backend_class(storage_config, kwargs).
    params = list(inspect.signature(cls.__init__).parameters)
    assert params[:3] == ["self", "storage_config", "kwargs"]


def test_factory_contract_in_the_manifest():
    # What the dynamic path of StorageBackendFactory does at the pinned
    # commit, as far as the manifest records it: the harness
    # (examples/tiny_llm/sglang_engine.py) re-implements these steps.
    factory = CLASSES["python/sglang/srt/mem_cache/storage/backend_factory.py:"
                      "StorageBackendFactory"]["methods"]
    assert [p["name"] for p in factory["_create_dynamic_backend"]["params"]] == \
        ["cls", "backend_config", "storage_config", "mem_pool_host", "kwargs"]
    assert [p["name"] for p in factory["_load_backend_class"]["params"]] == \
        ["module_path", "class_name", "backend_name"]


def test_the_original_maru_sglang_module():
    import maru_sglang
    from maru_sglang.config import MaruSGLangConfig, parse_size
    from maru_sglang.maru_storage import MaruStorage

    classes = ORIGINAL["classes"]
    conf = classes["maru_sglang/config.py:MaruSGLangConfig"]
    ours = {f.name: f for f in dataclasses.fields(MaruSGLangConfig)}
    assert set(ours) == set(conf["fields"])
    for name, field in conf["fields"].items():
        assert ours[name].default == eval(field["default"]), name  # noqa: S307 (literals)
    check_params(MaruSGLangConfig.from_extra_config, conf["methods"]["from_extra_config"],
                 "from_extra_config")
    check_params(parse_size, ORIGINAL["functions"]["maru_sglang/config.py:parse_size"],
                 "parse_size")
    storage = classes["maru_sglang/maru_storage.py:MaruStorage"]["methods"]
    assert issubclass(MaruStorage, ms.HiCacheStorage)
    assert issubclass(MaruStorage, ms.MaruHiCacheStorage)  # one implementation
    for method, mspec in storage.items():
        if method.startswith("_") and method != "__init__":
            continue  # the original's private helpers
        check_params(getattr(MaruStorage, method), mspec, f"MaruStorage.{method}",
                     defaults_equal=False)
    assert maru_sglang.MaruStorage is MaruStorage


def test_sglang_own_factory_builds_it(server, ns):
    """With SGLang installed: its own StorageBackendFactory builds our class
    from the documented config (skipped here, where SGLang is not)."""
    factory = pytest.importorskip("sglang.srt.mem_cache.storage.backend_factory")
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

    config = HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name="m", extra_config={"backend_name": "maru", "module_path": "maru.sglang",
                                      "class_name": "MaruHiCacheStorage", "interface_v1": 1,
                                      "maru_server": server.url, "maru_namespace": ns})
    backend = factory.StorageBackendFactory.create_backend("dynamic", config, None)
    try:
        assert isinstance(backend, HiCacheStorage) and ms.SGLANG_IMPORTED
    finally:
        backend.close()
