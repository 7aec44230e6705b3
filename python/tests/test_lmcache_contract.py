"""Our LMCache classes held against LMCache's interface at its pinned commit
(python/contracts/lmcache.json, written by scripts/engine-manifest.py from
LMCache's source): the stand-ins of maru._upstream.lmcache match it method
for method; maru.lmcache.MaruBackend implements every method of the
interfaces it subclasses; and everything LMCache's own maru backend
(maru_backend.py @ b4dd69b4) uses of ``maru`` and ``maru_lmcache`` exists
with the keywords it passes. When LMCache is importable, maru.lmcache uses
its real classes and the same checks run against those."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import maru  # noqa: E402
import maru.lmcache as ml  # noqa: E402
from maru._upstream import lmcache as standin  # noqa: E402

MANIFEST = json.loads((Path(__file__).resolve().parents[1] / "contracts" / "lmcache.json")
                      .read_text())
CLASSES = MANIFEST["classes"]
MM = "lmcache/v1/memory_management.py"
AB = "lmcache/v1/storage_backend/abstract_backend.py"
CALLER = MANIFEST["callers"]["lmcache/v1/storage_backend/maru_backend.py"]


def methods(name):
    return CLASSES[name]["methods"]


def params(fn):
    return list(inspect.signature(fn).parameters.values())


def check_method(ours, spec, name, renamed=()):
    """``ours`` takes the manifest's parameters, in order (defaults where
    LMCache has them), async where LMCache's is."""
    if spec["kind"] == "property":
        return
    assert inspect.iscoroutinefunction(ours) == spec["async"], name
    got = params(ours)
    if spec["kind"] != "staticmethod" and got and got[0].name != "self":
        got = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + got
    want = spec["params"]
    assert len(got) >= len(want), (name, got, want)
    for g, w in zip(got, want):
        assert g.name == w["name"] or (w["name"], g.name) in renamed, (name, g.name, w["name"])
        if "default" in w and g.name != "self":
            assert g.default is not inspect.Parameter.empty, (name, g.name)
    for extra in got[len(want):]:
        assert extra.default is not inspect.Parameter.empty, (name, extra.name)


@pytest.mark.parametrize("name", ["MemoryObj", "TensorMemoryObj", "MemoryAllocatorInterface"])
def test_memory_management_stand_ins(name):
    cls = getattr(standin, name)
    for method, spec in methods(f"{MM}:{name}").items():
        if method.startswith("__") and method != "__init__":
            continue
        ours = getattr(cls, method)
        if spec["kind"] == "property":
            assert isinstance(inspect.getattr_static(cls, method), property), method
            continue
        check_method(ours, spec, f"{name}.{method}")
        if name == "MemoryObj" or name == "MemoryAllocatorInterface":
            assert getattr(ours, "__isabstractmethod__", False) == spec["abstract"], method


def test_memory_format_and_metadata_stand_ins():
    fmt = CLASSES[f"{MM}:MemoryFormat"]["fields"]
    assert {m.name for m in standin.MemoryFormat} == set(fmt)
    assert standin.MemoryFormat.UNDEFINED.value == 0
    assert len({m.value for m in standin.MemoryFormat}) == len(fmt)
    assert standin.MemoryFormat.KV_2LTD.token_dim() == 2
    assert standin.MemoryFormat.KV_MLA_FMT.token_dim() == 2
    fields = CLASSES[f"{MM}:MemoryObjMetadata"]["fields"]
    ours = {f.name: f for f in dataclasses.fields(standin.MemoryObjMetadata)}
    assert set(ours) == set(fields)
    for name, spec in fields.items():
        has_default = ours[name].default is not dataclasses.MISSING
        assert has_default == ("default" in spec), name


@pytest.mark.parametrize("name", ["StorageBackendInterface", "AllocatorBackendInterface",
                                  "StoragePluginInterface"])
def test_backend_interface_stand_ins(name):
    cls = getattr(standin, name)
    for method, spec in methods(f"{AB}:{name}").items():
        ours = getattr(cls, method)
        check_method(ours, spec, f"{name}.{method}")
        assert getattr(ours, "__isabstractmethod__", False) == spec["abstract"], method
        assert method in cls.__dict__, f"{name} itself defines {method}"


def test_marubackend_implements_the_interfaces():
    assert issubclass(ml.MaruBackend, ml.AllocatorBackendInterface)
    assert not ml.MaruBackend.__abstractmethods__  # instantiable
    assert issubclass(ml.MaruAllocator, ml.MemoryAllocatorInterface)
    assert not ml.MaruAllocator.__abstractmethods__
    assert issubclass(ml.MaruMemoryObj, ml.TensorMemoryObj)
    for name in ("StorageBackendInterface", "AllocatorBackendInterface"):
        for method, spec in methods(f"{AB}:{name}").items():
            if method == "__init__":
                continue
            check_method(getattr(ml.MaruBackend, method), spec, f"MaruBackend.{method}",
                         renamed={("objs", "memory_objs")})
    for method, spec in methods(f"{MM}:MemoryAllocatorInterface").items():
        check_method(getattr(ml.MaruAllocator, method), spec, f"MaruAllocator.{method}")


def test_plugin_launcher_keywords_reach_the_constructor():
    # storage_plugin_launcher calls cls(config=, dst_device=, metadata=,
    # local_cpu_backend=, loop=): every keyword is a parameter.
    sig = inspect.signature(ml.MaruBackend)
    for keyword in ("config", "dst_device", "metadata", "local_cpu_backend", "loop"):
        assert keyword in sig.parameters
    # and LMCache's own maru backend is built positionally: (config, metadata, loop, dst_device)
    assert list(sig.parameters)[:4] == ["config", "metadata", "loop", "dst_device"]


def test_what_lmcaches_maru_backend_imports_and_calls():
    from maru_lmcache import CxlMemoryAdapter

    imports = CALLER["imports"]
    for name in imports["maru"]:
        assert hasattr(maru, name), name
    import maru_lmcache

    for name in imports["maru_lmcache"]:
        assert hasattr(maru_lmcache, name), name
    calls = CALLER["calls"]
    config_fields = {f.name for f in dataclasses.fields(maru.MaruConfig)}
    assert set(calls["MaruConfig"]) <= config_fields
    adapter_params = inspect.signature(CxlMemoryAdapter).parameters
    assert set(calls["CxlMemoryAdapter"]) <= set(adapter_params)
    receivers = CALLER["receivers"]
    for method in receivers["self._handler"]:
        assert callable(getattr(maru.MaruHandler, method)), method
    for method, keywords in receivers["allocator"].items():
        assert set(keywords) <= set(inspect.signature(getattr(CxlMemoryAdapter, method))
                                    .parameters), method
    for method in receivers["self.memory_allocator"]:
        assert callable(getattr(CxlMemoryAdapter, method)), method
    for method in receivers["CxlMemoryAdapter"]:
        assert isinstance(inspect.getattr_static(CxlMemoryAdapter, method), staticmethod)
    info_fields = {f.name for f in dataclasses.fields(maru.MemoryInfo)}
    assert set(receivers["mem_info"]) <= info_fields
    for attr in receivers["handle"]:
        assert isinstance(inspect.getattr_static(maru.AllocHandle, attr), property), attr
    for attr in receivers["memory_obj"]:
        assert hasattr(ml.MaruMemoryObj, attr), attr
    assert set(receivers["MemoryFormat"]) <= {m.name for m in ml.MemoryFormat}


def test_real_lmcache_when_importable():
    lmcache = pytest.importorskip("lmcache")  # noqa: F841 (skipped where it is not installed)
    from lmcache.v1.memory_management import TensorMemoryObj
    from lmcache.v1.storage_backend.abstract_backend import AllocatorBackendInterface

    assert ml.LMCACHE_IMPORTED
    assert issubclass(ml.MaruBackend, AllocatorBackendInterface)
    assert issubclass(ml.MaruMemoryObj, TensorMemoryObj)
    assert asyncio  # the async methods are checked above against the same manifest
