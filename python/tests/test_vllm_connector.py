"""The methods of vLLM's connector base that vLLM calls outside the KV hooks,
on MaruConnector against a real server: the class calls of the stat
loggers, handshake metadata, the EAGLE pair, preemptions in both of vLLM's
forms, get_transfer_results. (The hooks in vLLM's order:
examples/tiny_llm/test_vllm.py.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import maru.vllm as mv
from maru.vllm import KVConnectorRole, MaruConnector, MaruConnectorMetadata


def vllm_config(server, ns, **parallel):
    ktc = SimpleNamespace(kv_role="kv_both", is_kv_producer=True, kv_connector_extra_config={
        "maru_server": server.url, "maru_namespace": ns})
    return SimpleNamespace(
        kv_transfer_config=ktc, cache_config=SimpleNamespace(block_size=16),
        model_config=SimpleNamespace(model="m", dtype="float16"),
        parallel_config=SimpleNamespace(tensor_parallel_size=parallel.get("tp", 1),
                                        pipeline_parallel_size=parallel.get("pp", 1),
                                        rank=parallel.get("rank", 0)))


@pytest.fixture
def worker(server, ns):
    c = MaruConnector(vllm_config(server, ns), KVConnectorRole.WORKER, None)
    yield c
    c.shutdown()


class _Metric:
    def __init__(self, name="", documentation="", labelnames=()):
        self.name, self.value, self.children = name, 0, {}

    def labels(self, *values):
        return self.children.setdefault(values, _Metric(self.name))

    def inc(self, amount=1):
        self.value += amount


class Gauge(_Metric):
    pass


class Counter(_Metric):
    pass


class Histogram(_Metric):
    pass


def test_the_stat_loggers_class_calls(server, ns):
    """KVConnectorLogging.observe and KVConnectorPrometheus.__init__ call
    the class, before any connector object exists."""
    stats = MaruConnector.build_kv_connector_stats({"loaded_chunks": 2, "saved_bytes": 10})
    assert isinstance(stats, mv.KVConnectorStats) and not stats.is_empty()
    stats = stats.aggregate(MaruConnector.build_kv_connector_stats({"loaded_chunks": 3}))
    assert stats.reduce() == {"loaded_chunks": 5, "saved_bytes": 10}
    stats.reset()
    assert stats.is_empty()
    assert MaruConnector.build_kv_connector_stats(None).is_empty()
    prom = MaruConnector.build_prom_metrics(
        vllm_config(server, ns), {Gauge: Gauge, Counter: Counter, Histogram: Histogram},
        ["model_name", "engine"], {0: ["m", "0"], 1: ["m", "1"]})
    assert isinstance(prom, mv.KVConnectorPromMetrics)
    prom.observe({"loaded_chunks": 4, "unknown": 1}, 1)
    assert prom.counters["loaded_chunks"][1].value == 4
    assert prom.counters["loaded_chunks"][0].value == 0
    assert MaruConnector.get_required_kvcache_layout(None) == "NHD"
    assert MaruConnector.requires_piecewise_for_cudagraph({}) is True


def test_handshake_eagle_and_defaults(worker):
    assert worker.get_handshake_metadata() is None
    worker.set_xfer_handshake_metadata({0: None, 1: None})
    worker.set_xfer_handshake_metadata_pp_aware({(0, 0): None, (0, 1): None})
    with pytest.raises(ValueError):  # vLLM's default: pp_rank > 0 is not for us
        worker.set_xfer_handshake_metadata_pp_aware({(1, 0): None})
    assert worker.supports_eagle_prefix_cache_hashing is False
    worker.set_eagle_prefix_cache_hashing(True)
    assert worker.use_eagle_prefix_cache_hashing is True
    assert worker.prefer_cross_layer_blocks is False
    assert worker.requires_kv_delivery is True  # vLLM's default for a producer
    assert worker.role is KVConnectorRole.WORKER
    assert worker.reset_cache() is None
    assert worker.get_finished_count() is None
    assert worker.get_kv_connector_kv_cache_events() is None
    assert worker.build_connector_worker_meta() is None
    with pytest.raises(ValueError):
        worker.register_cross_layers_kv_cache(None, None)


def test_preemptions_in_both_forms_and_transfer_results(worker):
    meta = MaruConnectorMetadata(preempted=["a"])
    worker.handle_preemptions(meta)  # the pinned commit: the step's metadata
    worker.handle_preemptions({"a", "b"})  # older vLLM: a set of ids
    worker.handle_preemptions(None)
    results = worker.get_transfer_results(set())
    assert isinstance(results, mv.KVConnectorTransferResults)
    assert (results.finished_sending, results.finished_recving, results.failed_recving) == \
        (set(), set(), set())
    assert worker.get_finished(set()) == (None, None)
    assert worker.get_kv_connector_stats() is None  # nothing happened


def test_ranks_and_refusals(server, ns):
    c = MaruConnector(vllm_config(server, ns, tp=2, pp=2, rank=3), KVConnectorRole.WORKER)
    try:
        assert (c.config.tp_rank, c.config.pp_rank) == (1, 1)
        assert c._worker.rank_path("/x/k") == "/x/k.r1.p1"
    finally:
        c.shutdown()
    cfg = vllm_config(server, ns)
    cfg.parallel_config.decode_context_parallel_size = 2
    with pytest.raises(ValueError, match="decode_context_parallel_size"):
        MaruConnector(cfg, KVConnectorRole.SCHEDULER)
    groups = SimpleNamespace(kv_cache_groups=[object(), object()])
    with pytest.raises(ValueError, match="KV cache groups"):
        MaruConnector(vllm_config(server, ns), KVConnectorRole.SCHEDULER, groups)
    with pytest.raises(ValueError):
        MaruConnector(SimpleNamespace(kv_transfer_config=None), KVConnectorRole.SCHEDULER)
