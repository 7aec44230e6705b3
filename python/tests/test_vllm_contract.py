"""maru.vllm against vLLM's interface at the pinned commit.

python/contracts/vllm.json holds vLLM's classes as facts read from its source
(scripts/engine-manifest.py). The stand-ins in maru/_upstream/vllm.py are read
with the same extractor and must match them method for method (name, kind,
abstract or not, parameters with kinds, annotations and defaults, return
annotation) and field for field; MaruConnector must implement every abstract
method and override base methods only with signatures vLLM can call.
When vLLM is importable, the real classes are checked instead.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
from pathlib import Path

import pytest

import maru.vllm as mv
from maru._upstream import vllm as standin

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = json.loads((ROOT / "python" / "contracts" / "vllm.json").read_text())
BASE = "vllm/distributed/kv_transfer/kv_connector/v1/base.py"
METRICS = "vllm/distributed/kv_transfer/kv_connector/v1/metrics.py"
#: Classes of the manifest the stand-in module mirrors.
MIRRORED = [(BASE, n) for n in ("SupportsHMA", "KVConnectorRole", "KVConnectorHandshakeMetadata",
                                "KVConnectorMetadata", "KVConnectorWorkerMetadata",
                                "KVConnectorBase_V1")] + \
           [(METRICS, n) for n in ("KVConnectorStats", "KVConnectorPromMetrics")]


def _extractor():
    spec = importlib.util.spec_from_file_location("engine_manifest",
                                                  ROOT / "scripts" / "engine-manifest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pinned_commits_are_the_manifests():
    assert MANIFEST["files"][BASE] == standin.VLLM_COMMIT
    assert MANIFEST["files"][METRICS] == standin.METRICS_COMMIT
    assert mv.VLLM_COMMIT == standin.VLLM_COMMIT


@pytest.mark.parametrize("path,name", MIRRORED, ids=[n for _, n in MIRRORED])
def test_standins_mirror_vllm(path, name):
    ours = _extractor().interface_of(Path(standin.__file__).read_text(),
                                     "maru/_upstream/vllm.py")["classes"][name]
    theirs = MANIFEST["classes"][f"{path}:{name}"]
    assert ours["bases"] == theirs["bases"]
    assert ours["decorators"] == theirs["decorators"]
    assert ours["fields"] == theirs["fields"]
    assert sorted(ours["methods"]) == sorted(theirs["methods"])
    for method, spec in theirs["methods"].items():
        assert ours["methods"][method] == spec, method


def test_supports_hma_function_mirrors_vllm():
    ours = _extractor().interface_of(Path(standin.__file__).read_text(), "x")["functions"]
    theirs = MANIFEST["functions"][f"{BASE}:supports_hma"]
    assert {k: v for k, v in ours["supports_hma"].items() if k != "file"} == \
        {k: v for k, v in theirs.items() if k != "file"}


def _abstract(cls):
    return set(getattr(cls, "__abstractmethods__", ()))


def test_the_connector_is_a_kv_connector_of_vllm():
    base = mv.KVConnectorBase_V1
    assert issubclass(mv.MaruConnector, base)
    assert issubclass(mv.MaruConnectorMetadata, mv.KVConnectorMetadata)
    assert not _abstract(mv.MaruConnector)
    assert issubclass(mv.MaruConnectorStats, mv.KVConnectorStats)
    assert issubclass(mv.MaruPromMetrics, mv.KVConnectorPromMetrics)
    if not mv.UPSTREAM:
        assert base is standin.KVConnectorBase_V1


def _callable_as(ours, theirs) -> bool:
    """True if every call vLLM makes with ``theirs``' signature fits ``ours``."""
    o = list(inspect.signature(ours).parameters.values())
    t = list(inspect.signature(theirs).parameters.values())
    named = {p.name: p for p in o}
    var_kw = any(p.kind is p.VAR_KEYWORD for p in o)
    for i, p in enumerate(t):
        if p.kind is p.VAR_KEYWORD:
            if not var_kw:
                return False
            continue
        if p.kind is p.VAR_POSITIONAL:
            continue
        q = named.get(p.name)
        if q is None or o.index(q) != i or q.kind != p.kind:
            return False
    extra = [p for p in o if p.name not in {x.name for x in t}]
    return all(p.default is not p.empty or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
               for p in extra)


def test_every_override_keeps_vllms_signature_and_kind():
    base = mv.KVConnectorBase_V1
    methods = MANIFEST["classes"][f"{BASE}:KVConnectorBase_V1"]["methods"]
    for name, spec in methods.items():
        ours = inspect.getattr_static(mv.MaruConnector, name)
        theirs = inspect.getattr_static(base, name)
        kind = {"classmethod": classmethod, "property": property}.get(spec["kind"])
        if kind is not None:
            assert isinstance(ours, kind), name
        if isinstance(ours, property):
            continue
        fn = ours.__func__ if isinstance(ours, classmethod) else ours
        their_fn = theirs.__func__ if isinstance(theirs, classmethod) else theirs
        assert _callable_as(fn, their_fn), name


def test_the_methods_vllm_calls_are_overridden():
    """Implemented by the connector, not left to the base's default."""
    for name in ("get_num_new_matched_tokens", "update_state_after_alloc",
                 "build_connector_meta", "request_finished", "start_load_kv",
                 "wait_for_layer_load", "save_kv_layer", "wait_for_save", "get_finished",
                 "get_block_ids_with_load_errors", "register_kv_caches", "shutdown",
                 "handle_preemptions", "get_kv_connector_stats", "build_kv_connector_stats",
                 "build_prom_metrics", "set_xfer_handshake_metadata",
                 "supports_eagle_prefix_cache_hashing", "set_eagle_prefix_cache_hashing",
                 "get_required_kvcache_layout", "requires_piecewise_for_cudagraph",
                 "register_cross_layers_kv_cache", "reset_cache", "get_transfer_results"):
        assert name in vars(mv.MaruConnector), name


def test_maru_vllm_has_the_originals_public_names():
    """The original Maru's maru_vllm (python/contracts/maru.json): its module,
    its class's methods, callable as the original's."""
    import maru_vllm
    from maru_vllm import connector

    original = json.loads((ROOT / "python" / "contracts" / "maru.json").read_text())["classes"]
    cls = original["maru_vllm/connector.py:MaruKVConnector"]
    assert cls["bases"] == ["KVConnectorBase_V1"]
    assert issubclass(maru_vllm.MaruKVConnector, mv.KVConnectorBase_V1)
    assert issubclass(connector.MaruConnectorMetadata, mv.KVConnectorMetadata)
    assert connector.DEFAULT_KV_CHUNK_TOKENS == 256
    for name, spec in cls["methods"].items():
        ours = inspect.signature(getattr(maru_vllm.MaruKVConnector, name))
        names = [p["name"] for p in spec["params"] if p["kind"] != "var_keyword"]
        assert [p.name for p in ours.parameters.values()
                if p.kind is not p.VAR_KEYWORD][:len(names)] == names, name
        if name == "__init__":
            assert ours.parameters["kv_cache_config"].default is None
