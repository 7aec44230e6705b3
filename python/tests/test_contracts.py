"""Maru's classes held against the engines' own interfaces.

The manifests in python/contracts/ are facts read from each engine's source
at a pinned commit (scripts/engine-manifest.py): the base classes a
connector derives from, and what the engine's code that calls Maru uses.
Three things are checked against them:

1. The stand-ins (maru._upstream.*), which connectors derive from when the
   engine is not importable, are the engine's classes as its source defines
   them: every method with the same kind, parameters, defaults and
   annotations, every field. The same extractor reads both sides.
2. Each connector implements every abstract method of its base and accepts
   every call the base's signatures allow (same names in the same places;
   its own extra parameters have defaults).
3. What an engine's own code calls on Maru (LMCache's in-tree maru backend,
   its plugin launcher) and the whole public surface of the original Maru
   exist here with signatures that take those calls.

Where the engine is importable, its real classes are used instead of the
stand-ins (issubclass against them); here none is, and those checks say so
as skips.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.util
import inspect
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

SOURCE_ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = SOURCE_ROOT / "python" / "contracts"


def _extractor() -> Any:
    """scripts/engine-manifest.py, the one reader of both sides."""
    spec = importlib.util.spec_from_file_location(
        "engine_manifest", SOURCE_ROOT / "scripts" / "engine-manifest.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


EXTRACT = _extractor()


def manifest(engine: str) -> Dict[str, Any]:
    return json.loads((CONTRACTS / f"{engine}.json").read_text())


def upstream_class(engine: str, qualified: str) -> Dict[str, Any]:
    """A class of the manifest, by "path:Name"."""
    classes = manifest(engine)["classes"]
    assert qualified in classes, f"{qualified} is not in python/contracts/{engine}.json"
    return classes[qualified]


def engine_importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# --------------------------------------------------------------------------
# 1. The stand-ins are the engines' classes.

# (engine, stand-in module, manifest file, [classes], partial): a partial
# class need only match the methods it defines (LMCache's memory objects are
# large; a backend uses part of them), and must define those listed.
STANDINS: List[Tuple[str, str, str, Dict[str, List[str]]]] = [
    ("vllm", "maru._upstream.vllm", "vllm/distributed/kv_transfer/kv_connector/v1/base.py",
     {"KVConnectorBase_V1": [], "KVConnectorMetadata": [], "KVConnectorRole": []}),
    ("vllm", "maru._upstream.vllm", "vllm/distributed/kv_transfer/kv_connector/v1/metrics.py",
     {"KVConnectorStats": [], "KVConnectorPromMetrics": []}),
    ("sglang", "maru._upstream.sglang", "python/sglang/srt/mem_cache/hicache_storage.py",
     {"HiCacheStorage": [], "HiCacheStorageConfig": [], "HiCacheStorageExtraInfo": []}),
    ("lmcache", "maru._upstream.lmcache", "lmcache/v1/storage_backend/abstract_backend.py",
     {"StorageBackendInterface": [], "AllocatorBackendInterface": []}),
    ("lmcache", "maru._upstream.lmcache", "lmcache/v1/memory_management.py",
     {"MemoryFormat": [], "MemoryAllocatorInterface": [],
      "MemoryObjMetadata": None,  # fields only
      "MemoryObj": ["tensor", "byte_array", "metadata", "ref_count_up", "ref_count_down",
                    "pin", "unpin", "get_size"],
      "TensorMemoryObj": ["tensor", "byte_array", "metadata", "ref_count_up",
                          "ref_count_down", "pin", "unpin", "get_size"]}),
]


def _standin_cases() -> List[Any]:
    cases = []
    for engine, module, path, classes in STANDINS:
        for name, required in classes.items():
            cases.append(pytest.param(engine, module, path, name, required,
                                      id=f"{engine}:{name}"))
    return cases


def _our_classes(module: str) -> Dict[str, Any]:
    mod = importlib.import_module(module)
    source = inspect.getsource(mod)
    return EXTRACT.interface_of(source, module)["classes"]


def shape(method: Dict[str, Any]) -> Dict[str, Any]:
    """What a caller depends on: kind, abstract, async, and each parameter's
    name, kind and whether it has a default (annotations and the spelling
    of a default are the engine's prose, not its calls)."""
    return {
        "kind": method.get("kind"),
        "abstract": method.get("abstract"),
        "async": method.get("async"),
        "params": [(p["name"], p["kind"], "default" in p) for p in method.get("params", [])],
    }


def enum_values(fields: Dict[str, Any]) -> Dict[str, Any]:
    """An enum's members and values, `auto()` counted as Python counts it."""
    out: Dict[str, Any] = {}
    last = 0
    for name, spec in fields.items():
        if "value" not in spec:
            continue
        text = spec["value"]
        last = last + 1 if text == "auto()" else eval(text, {})
        out[name] = last
    return out


@pytest.mark.parametrize("engine,module,path,name,required", _standin_cases())
def test_the_stand_in_is_the_engines_class(engine: str, module: str, path: str, name: str,
                                           required: Optional[List[str]]) -> None:
    theirs = upstream_class(engine, f"{path}:{name}")
    ours = _our_classes(module)
    assert name in ours, f"{module} has no stand-in for {name}"
    mine = ours[name]
    if required:
        pass  # a partial class: its methods only (below)
    elif any(b.split(".")[-1] in ("Enum", "IntEnum") for b in theirs["bases"]):
        assert enum_values(mine["fields"]) == enum_values(theirs["fields"]), (
            f"{name}: members or values differ from {path}")
    else:
        assert list(mine["fields"])[:len(theirs["fields"])] == list(theirs["fields"]), (
            f"{name}: fields {list(mine['fields'])} are not upstream's {list(theirs['fields'])}")
        for field, spec in theirs["fields"].items():
            assert ("default" in spec) == ("default" in mine["fields"][field]), (
                f"{name}.{field}: a default upstream {'has' if 'default' in spec else 'lacks'}")
    if required is None:
        return
    expected = theirs["methods"] if required == [] else {
        m: v for m, v in theirs["methods"].items() if m in mine["methods"] or m in required}
    missing = sorted(set(expected) - set(mine["methods"]))
    assert not missing, f"{name}: the stand-in lacks {missing}"
    for method, spec in expected.items():
        assert shape(mine["methods"][method]) == shape(spec), (
            f"{name}.{method}: stand-in {shape(mine['methods'][method])} != upstream {shape(spec)}")
    unknown = sorted(m for m in mine["methods"] if m not in theirs["methods"]
                     and not m.startswith("_"))
    assert not unknown, f"{name}: the stand-in has public methods upstream lacks: {unknown}"


# --------------------------------------------------------------------------
# 2. Connectors implement their bases.

def _kind(cls: type, name: str) -> str:
    attr = inspect.getattr_static(cls, name)
    if isinstance(attr, classmethod):
        return "classmethod"
    if isinstance(attr, staticmethod):
        return "staticmethod"
    if isinstance(attr, property):
        return "property"
    return "method"


def accepts(ours: inspect.Signature, theirs: List[Dict[str, Any]], what: str) -> None:
    """Every call `theirs` allows, `ours` takes: positional parameters by the
    same name in the same place, keyword-only ones by name, *args/**kwargs
    where theirs has them; ours may add parameters only with defaults."""
    params = list(ours.parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    theirs = [p for p in theirs if p["name"] not in ("self", "cls")]
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in params}
    their_positional = [p for p in theirs
                        if p["kind"] in ("positional_only", "positional_or_keyword")]
    for i, p in enumerate(their_positional):
        if i < len(positional):
            assert positional[i].name == p["name"] or p["kind"] == "positional_only", (
                f"{what}: parameter {i} is {positional[i].name!r}, the engine's is {p['name']!r}")
        else:
            assert var_pos, f"{what}: takes no parameter {p['name']!r} (position {i})"
    for p in theirs:
        if p["kind"] == "keyword_only":
            assert p["name"] in by_name or var_kw, f"{what}: takes no keyword {p['name']!r}"
        if p["kind"] == "var_positional":
            assert var_pos, f"{what}: takes no *{p['name']}"
        if p["kind"] == "var_keyword":
            assert var_kw, f"{what}: takes no **{p['name']}"
    theirs_names = {p["name"] for p in theirs}
    for p in params:
        if p.name not in theirs_names and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            assert p.default is not p.empty, (
                f"{what}: its own parameter {p.name!r} needs a default (the engine never passes it)")


def accepts_keywords(fn: Any, keywords: List[str], what: str) -> None:
    sig = inspect.signature(fn)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return
    missing = [k for k in keywords if k not in sig.parameters]
    assert not missing, f"{what} takes no keyword {missing}"


def implements(cls: type, engine: str, base: str, standin: type) -> None:
    """`cls` has every method of the engine's `base`, of the same kind, with a
    signature that takes the engine's calls; abstract ones defined by us."""
    spec = upstream_class(engine, base)
    ours_only = [c for c in cls.__mro__ if not issubclass(standin, c) and c is not standin]
    for name, m in spec["methods"].items():
        if name == "__init__":
            continue
        what = f"{cls.__name__}.{name}"
        assert hasattr(cls, name), f"{what} is missing ({base})"
        assert _kind(cls, name) == m["kind"], f"{what} is a {_kind(cls, name)}, not a {m['kind']}"
        if m["abstract"]:
            assert any(name in vars(c) for c in ours_only), f"{what} (abstract) is not implemented"
        if m["kind"] == "property":
            continue
        assert inspect.iscoroutinefunction(getattr(cls, name)) == m["async"], (
            f"{what}: {'async' if m['async'] else 'not async'} in the engine")
        accepts(inspect.signature(inspect.getattr_static(cls, name).__func__
                                  if m["kind"] in ("classmethod", "staticmethod")
                                  else getattr(cls, name)), m["params"], what)


VLLM_BASE = "vllm/distributed/kv_transfer/kv_connector/v1/base.py"


def test_the_vllm_connector_implements_kvconnectorbase_v1() -> None:
    from maru._upstream import vllm as standin
    from maru.vllm import MaruConnector, MaruConnectorMetadata
    if not engine_importable("vllm"):
        assert issubclass(MaruConnector, standin.KVConnectorBase_V1)
        assert issubclass(MaruConnectorMetadata, standin.KVConnectorMetadata)
    implements(MaruConnector, "vllm", f"{VLLM_BASE}:KVConnectorBase_V1",
               standin.KVConnectorBase_V1)
    accepts(inspect.signature(MaruConnector.__init__),
            upstream_class("vllm", f"{VLLM_BASE}:KVConnectorBase_V1")["methods"]["__init__"]["params"],
            "MaruConnector.__init__")


def test_the_sglang_backend_implements_hicachestorage() -> None:
    from maru._upstream import sglang as standin
    from maru.sglang import MaruHiCacheStorage
    if not engine_importable("sglang"):
        assert issubclass(MaruHiCacheStorage, standin.HiCacheStorage)
    implements(MaruHiCacheStorage, "sglang",
               "python/sglang/srt/mem_cache/hicache_storage.py:HiCacheStorage",
               standin.HiCacheStorage)
    # The dynamic-backend factory calls cls(storage_config, kwargs) by position
    # (storage/backend_factory.py: StorageBackendFactory._create_dynamic_backend).
    params = list(inspect.signature(MaruHiCacheStorage.__init__).parameters)[1:]
    assert len(params) >= 2, "MaruHiCacheStorage(storage_config, kwargs)"


def test_the_lmcache_backend_implements_allocatorbackendinterface() -> None:
    from maru._upstream import lmcache as standin
    from maru.lmcache import MaruBackend
    if not engine_importable("lmcache"):
        assert issubclass(MaruBackend, standin.AllocatorBackendInterface)
    for base in ("StorageBackendInterface", "AllocatorBackendInterface"):
        implements(MaruBackend, "lmcache", f"lmcache/v1/storage_backend/abstract_backend.py:{base}",
                   getattr(standin, base))
    # Its allocator and memory objects are LMCache's kinds, formats and all.
    assert not getattr(MaruBackend, "__abstractmethods__", None)
    from maru.lmcache import MaruAllocator, MaruMemoryObj
    assert issubclass(MaruAllocator, standin.MemoryAllocatorInterface) or engine_importable("lmcache")
    assert not getattr(MaruAllocator, "__abstractmethods__", None)
    assert issubclass(MaruMemoryObj, standin.TensorMemoryObj) or engine_importable("lmcache")
    assert standin.MemoryFormat.KV_2LTD.token_dim() == 2
    assert standin.MemoryFormat.KV_MLA_FMT.token_dim() == 2
    # The plugin launcher's call, keyword by keyword.
    launcher = manifest("lmcache")["callers"]["lmcache/v1/storage_backend/__init__.py"]
    accepts_keywords(MaruBackend.__init__, launcher["calls"]["backend_class"],
                     "MaruBackend (as a storage plugin)")


@pytest.mark.parametrize("engine,module", [("vllm", "vllm"), ("sglang", "sglang"),
                                           ("lmcache", "lmcache")])
def test_with_the_engine_installed_its_real_classes_are_the_bases(engine: str,
                                                                   module: str) -> None:
    if not engine_importable(module):
        pytest.skip(f"{module} is not installed here: the stand-ins stood in for its classes")
    if engine == "vllm":
        from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                                        KVConnectorMetadata)
        from maru.vllm import MaruConnector, MaruConnectorMetadata
        assert issubclass(MaruConnector, KVConnectorBase_V1)
        assert issubclass(MaruConnectorMetadata, KVConnectorMetadata)
    elif engine == "sglang":
        from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
        from maru.sglang import MaruHiCacheStorage
        assert issubclass(MaruHiCacheStorage, HiCacheStorage)
    else:
        from lmcache.v1.storage_backend.abstract_backend import AllocatorBackendInterface
        from maru.lmcache import MaruBackend
        assert issubclass(MaruBackend, AllocatorBackendInterface)


# --------------------------------------------------------------------------
# 3. What the engines' own code calls on Maru, and the original's surface.

def _receiver_classes() -> Dict[str, Any]:
    """The objects LMCache's maru backend holds, as our classes."""
    import maru
    import maru_lmcache
    from maru import handler as handler_module
    from maru._upstream import lmcache as standin
    return {
        "self._handler": maru.MaruHandler,
        "handler": maru.MaruHandler,
        "allocator": maru_lmcache.CxlMemoryAdapter,
        "CxlMemoryAdapter": maru_lmcache.CxlMemoryAdapter,
        "mem_info": handler_module.MemoryInfo,
        "handle": maru.AllocHandle,
        "memory_obj": standin.TensorMemoryObj,
    }


def _has(cls: type, attr: str) -> bool:
    if hasattr(cls, attr):
        return True
    return dataclasses.is_dataclass(cls) and attr in {f.name for f in dataclasses.fields(cls)}


def test_lmcaches_own_maru_backend_finds_what_it_calls() -> None:
    """lmcache/v1/storage_backend/maru_backend.py (LMCache's, built from
    ``maru_path``): every import, constructor keyword and attribute it uses."""
    uses = manifest("lmcache")["callers"]["lmcache/v1/storage_backend/maru_backend.py"]
    for module in ("maru", "maru_lmcache"):
        mod = importlib.import_module(module)
        for name in uses["imports"][module]:
            assert hasattr(mod, name), f"`from {module} import {name}` fails"
    import maru
    import maru_lmcache
    accepts_keywords(maru.MaruConfig, uses["calls"]["MaruConfig"], "MaruConfig")
    accepts_keywords(maru_lmcache.CxlMemoryAdapter.__init__, uses["calls"]["CxlMemoryAdapter"],
                     "CxlMemoryAdapter")
    for receiver, cls in _receiver_classes().items():
        for attr, keywords in uses["receivers"].get(receiver, {}).items():
            assert _has(cls, attr), f"maru_backend.py uses {receiver}.{attr}: {cls.__name__} lacks it"
            target = getattr(cls, attr, None)
            if keywords and callable(target):
                accepts_keywords(target, keywords, f"{cls.__name__}.{attr}")


# The original Maru's public classes and the modules its users import them from.
ORIGINAL = [
    ("maru_common/config.py", "MaruConfig", "maru", "MaruConfig"),
    ("maru_handler/handler.py", "MaruHandler", "maru", "MaruHandler"),
    ("maru_handler/memory/types.py", "AllocHandle", "maru", "AllocHandle"),
    ("maru_handler/memory/types.py", "MemoryInfo", "maru.handler", "MemoryInfo"),
    ("maru_vllm/connector.py", "MaruKVConnector", "maru_vllm", "MaruKVConnector"),
    ("maru_sglang/maru_storage.py", "MaruStorage", "maru_sglang.maru_storage", "MaruStorage"),
    ("maru_lmcache/adapter.py", "CxlMemoryAdapter", "maru_lmcache", "CxlMemoryAdapter"),
]


@pytest.mark.parametrize("path,name,module,ours", ORIGINAL, ids=[o[1] for o in ORIGINAL])
def test_the_original_maru_public_surface_is_here(path: str, name: str, module: str,
                                                  ours: str) -> None:
    theirs = upstream_class("maru", f"{path}:{name}")
    cls = getattr(importlib.import_module(module), ours)
    for field, spec in theirs["fields"].items():
        if field.startswith("_") and name not in ("AllocHandle",):
            continue
        assert _has(cls, field), f"{ours} lacks the field {field}"
        if "default" in spec and dataclasses.is_dataclass(cls):
            ours_default = {f.name: f.default for f in dataclasses.fields(cls)}[field]
            if ours_default is not dataclasses.MISSING:
                assert repr(ours_default) == repr(eval(spec["default"], {})) or _computed(
                    spec["default"]), f"{ours}.{field} defaults to {ours_default!r}, not {spec['default']}"
    for method, m in theirs["methods"].items():
        if method.startswith("_") and method not in ("__init__", "__enter__", "__exit__"):
            continue
        what = f"{ours}.{method}"
        assert hasattr(cls, method), f"{what} is missing (the original has it)"
        if method != "__init__":
            assert _kind(cls, method) == m["kind"], f"{what} is a {_kind(cls, method)}, not a {m['kind']}"
        if m["kind"] == "property":
            continue
        fn = (inspect.getattr_static(cls, method).__func__
              if m["kind"] in ("classmethod", "staticmethod") else getattr(cls, method))
        accepts(inspect.signature(fn), m["params"], what)


def _computed(default: str) -> bool:
    """A default written as an expression of constants (1024 * 1024 * 100)
    is compared by value above; anything else (a call) is not compared."""
    try:
        eval(default, {"__builtins__": {}})
        return False
    except Exception:
        return True
