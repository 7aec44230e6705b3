"""The maru.vllm connector along vLLM's control flow, across processes.

Each test runs engines of vllm_engine.py (vLLM's scheduler with its own
prefix cache, the factory's steps, the model runner's hooks; see its doc
for the file:function@commit each part follows). Instance A
(vllm_instance.py, a process of its own, its workers in it or in processes
of their own) computes prompts and saves their chunks; B, an engine whose
scheduler runs in this test process and whose workers run here ("uni") or
in worker processes ("mp", the SchedulerOutput and the connector metadata
pickled to them), loads them. B's logits must equal A's (torch.equal):
both prefill in steps of one block, so each step's arithmetic is the same
whether its context was computed or loaded.
"""
import errno
import json
import logging
import os
import tempfile
import threading
import uuid

import pytest
import torch

maru = pytest.importorskip("maru")
pytest.importorskip("maru.vllm")

from maru_node import MaruNode, wait_for  # noqa: E402
from model import random_prompt as prompt  # noqa: E402
from proc import InstanceProcess  # noqa: E402
from vllm_instance import harness_config, make_engine  # noqa: E402

BLOCK = 16
N_DECODE = 6

#: The configurations every case of test_b_loads_a runs in: layouts, dtypes,
#: kernel blocks smaller than vLLM's, ranks, executors, both model-runner versions.
CASES = {
    "fa-nhd-fp32": {},
    "fa-hnd-fp32": {"hnd": True},
    "flashinfer-nhd-bf16": {"layout": "flashinfer", "dtype": "bfloat16"},
    "flashinfer-hnd-fp16": {"layout": "flashinfer", "hnd": True, "dtype": "float16"},
    "mla-bf16": {"mla": True, "dtype": "bfloat16"},
    "fa-kernel-blocks-of-8": {"kernel_block": 8},
    "flashinfer-kernel-blocks-of-8": {"layout": "flashinfer", "kernel_block": 8},
    "mp-fa-fp32": {"executor": "mp"},
    "mp-tp2-bf16": {"executor": "mp", "tp": 2, "dtype": "bfloat16"},
    "mp-pp2-fp16": {"executor": "mp", "pp": 2, "dtype": "float16"},
    "mp-tp2-mla": {"executor": "mp", "tp": 2, "mla": True},
    "runner-00f4240": {"runner": "00f4240"},
    "runner-00f4240-async": {"runner": "00f4240", "extra": {"maru_async_load": True}},
}


@pytest.fixture(scope="module")
def node():
    with MaruNode(pool_size=128 << 20, extra=["--eviction", "prefix"]) as n:
        yield n


@pytest.fixture
def ns():
    return "vllm-" + uuid.uuid4().hex[:10]


def conf(node, ns, **more):
    extra = {"maru_load_timeout_s": 60, **more.pop("extra", {})}
    return {"server": node.url, "namespace": ns, "name": "test-b", "block": BLOCK,
            "extra": extra, **more}


def engine(node, ns, **more):
    return make_engine(conf(node, ns, **more))


def reference(p, **more):
    """The same request without a connector: everything computed here."""
    eng = make_engine({"connector": False, "block": BLOCK, **more})
    try:
        return eng.generate([p], N_DECODE)[0]
    finally:
        eng.close()


class InstanceA(InstanceProcess):
    def __init__(self, node, ns, **more):
        c = conf(node, ns, **more)
        c["name"] = "test-a"
        super().__init__(node.url, script="vllm_instance.py", argv=["--config", json.dumps(c)])

    def generate(self, *prompts, **kw):
        """A's answers and logits, one per prompt."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "logits.pt")
            answer = self.request(op="generate", prompts=list(prompts), max_tokens=N_DECODE,
                                  save=path, **kw)
            return answer["results"], torch.load(path)


def chunk_paths_of(ns, p, chunk_blocks=1, tp=0, pp=0, **tag):
    """The connector's pool paths of the chunks of ``p`` (the engine's model tag)."""
    from maru.vllm.keys import chain_keys, chunk_paths, model_tag

    t = model_tag("tiny-llm", tag.pop("dtype", "float32"), BLOCK, chunk_blocks,
                  tag.pop("tp_size", 1), **tag)
    return chunk_paths(ns, chain_keys(t, p, BLOCK * chunk_blocks), tp, pp)


def settled(client, path):
    """True once ``path`` is no longer being written: missing, or sealed."""
    try:
        client.open(path).release()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def assert_same(b, a_answer, a_logits):
    assert b.tokens == a_answer["tokens"]
    assert torch.equal(b.prefill_logits, a_logits["prefill"])
    assert torch.equal(b.decode_logits, a_logits["decode"])


def run(eng, *prompts, **kw):
    try:
        out = eng.generate(list(prompts), N_DECODE, **kw)
        return out[0] if len(out) == 1 else out
    finally:
        eng.close()


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_b_loads_a_and_gets_a_logits(node, ns, case):
    more = CASES[case]
    p, q = prompt(1, 6 * BLOCK + 5), prompt(11, 3 * BLOCK + 9)
    with InstanceA(node, ns, **more) as a:
        answers, logits = a.generate(p, q)
    assert [x["loaded_tokens"] for x in answers] == [0, 0]
    b_eng = engine(node, ns, **more)
    b = run(b_eng, p, q)
    assert [(r.loaded_tokens, r.recomputed_tokens) for r in b] == [(6 * BLOCK, 0), (3 * BLOCK, 0)]
    for r, answer, lg in zip(b, answers, logits):
        assert_same(r, answer, lg)
    if case in ("fa-nhd-fp32", "mp-pp2-fp16"):  # loading equals computing here
        ref = reference(p, **{k: v for k, v in more.items() if k not in ("extra",)})
        assert torch.equal(ref.decode_logits, b[0].decode_logits)


@pytest.mark.parametrize("a_layout", [{"layout": "flashinfer", "hnd": True},
                                      {"layout": "flashinfer", "kernel_block": 8}],
                         ids=["flashinfer-hnd", "flashinfer-kernel-8"])
def test_the_layouts_store_the_same_bytes(node, ns, a_layout):
    """FlashAttention and FlashInfer caches, NHD or HND, whole or kernel
    blocks, give the same chunk bytes for the same KV: B with one layout
    loads what A stored with another."""
    p = prompt(12, 4 * BLOCK + 3)
    with InstanceA(node, ns, **a_layout) as a:
        answers, logits = a.generate(p)
    b = run(engine(node, ns), p)  # FlashAttention, NHD
    assert b.loaded_tokens == 4 * BLOCK
    assert_same(b, answers[0], logits[0])


def test_ranks_name_their_own_chunks(node, ns):
    """TP=2 stores a chunk per rank, PP=2 one per stage (paths .r<tp>[.p<pp>])."""
    p = prompt(13, 3 * BLOCK + 1)
    for more, ranks, tag in (({"tp": 2}, [(0, 0), (1, 0)], {"tp_size": 2}),
                             ({"pp": 2}, [(0, 0), (0, 1)], {"pp_size": 2})):
        with InstanceA(node, ns, executor="mp", **more) as a:
            a.generate(p)
        with maru.Client(node.url) as c:
            for tp, pp in ranks:
                assert c.count_prefix(chunk_paths_of(ns, p, tp=tp, pp=pp, **tag)) == 3


@pytest.mark.parametrize("chunk_blocks,shared", [(1, 2), (2, 3)])
def test_a_local_prefix_cache_hit_loads_from_there(node, ns, chunk_blocks, shared):
    """vLLM's own prefix cache holds L tokens: get_num_new_matched_tokens gets
    L and update_state_after_alloc is called before num_computed_tokens is
    set. The connector loads [L, end), leaves vLLM's blocks alone, and B's
    logits equal A's (the connector that read num_computed_tokens there
    loaded from 0 and left the tail unloaded)."""
    extra = {"maru_chunk_blocks": chunk_blocks}
    p = prompt(2, 6 * BLOCK + 5)
    other = p[:shared * BLOCK] + prompt(3, 2 * BLOCK + 7)
    with InstanceA(node, ns, extra=extra) as a:
        answers, logits = a.generate(p)
    b_eng = engine(node, ns, role="kv_consumer", extra=extra)
    try:
        b_eng.generate([other], N_DECODE)  # fills B's own prefix cache
        b_eng.log()
        b = b_eng.generate([p], N_DECODE)[0]
        loaded = b_eng.log()
        assert b.local_hit_tokens == shared * BLOCK
        assert b.loaded_tokens == 6 * BLOCK - shared * BLOCK
        assert b.recomputed_tokens == 0
        # Only blocks [shared, 6) were loaded: the chunks that hold them.
        assert loaded["loaded_chunks"] == -(-6 // chunk_blocks) - shared // chunk_blocks
        assert loaded["loaded_bytes"] == (6 - shared) * 4 * 2 * BLOCK * 256 * 4
        assert_same(b, answers[0], logits[0])
    finally:
        b_eng.close()


def test_chunked_prefill_saves_each_step(model, node, ns):
    """One block per step: each prefill step stores the chunk it completes."""
    p = prompt(4, 5 * BLOCK + 3)
    eng = engine(node, ns)
    paths = chunk_paths_of(ns, p)
    stored = []
    try:
        eng.add_request(p, N_DECODE)
        with maru.Client(node.url) as c:
            while eng.has_unfinished():
                eng.step()
                stored.append(c.count_prefix(paths))
    finally:
        eng.close()
    assert stored[:6] == [1, 2, 3, 4, 5, 5]


def test_preemption_and_resume(node, ns):
    """B's cache is too small for both requests: the scheduler preempts the
    later one in its prefill, frees its blocks and resumes it through
    get_num_new_matched_tokens again; it loads what it (and A) stored."""
    long_decode, p = prompt(5, 2 * BLOCK + 1), prompt(6, 7 * BLOCK + 5)
    with InstanceA(node, ns) as a:
        answers, logits = a.generate(long_decode, p)
    b_eng = engine(node, ns + "-b", blocks=10)  # its own namespace: it computes all
    try:
        b1 = b_eng.add_request(long_decode, 40)
        b_eng.step()
        b2 = b_eng.add_request(p, N_DECODE)
        b_eng.run()
        r1, r2 = b_eng.results[b1], b_eng.results[b2]
    finally:
        b_eng.close()
    assert r2.preemptions >= 1 and r2.loaded_tokens > 0
    assert r1.tokens[:N_DECODE] == answers[0]["tokens"]
    assert torch.equal(r1.prefill_logits, logits[0]["prefill"])
    assert_same(r2, answers[1], logits[1])


def test_whole_prompt_stored_still_computes_its_last_block(node, ns):
    p = prompt(7, 4 * BLOCK)
    with InstanceA(node, ns) as a:
        answers, logits = a.generate(p)
    b = run(engine(node, ns), p)
    assert b.loaded_tokens == 3 * BLOCK  # the last token's logits are computed
    assert_same(b, answers[0], logits[0])


def test_partial_hit_then_full_hit(node, ns):
    shared = prompt(8, 6 * BLOCK)
    p = shared[:2 * BLOCK] + prompt(9, 3 * BLOCK + 9)
    with InstanceA(node, ns) as a:
        a.generate(shared)
    b = run(engine(node, ns), p)
    assert b.loaded_tokens == 2 * BLOCK
    ref = reference(p)
    assert b.tokens == ref.tokens and torch.equal(b.decode_logits, ref.decode_logits)
    c = run(engine(node, ns), p)  # B stored its other three blocks
    assert c.loaded_tokens == 5 * BLOCK and torch.equal(c.decode_logits, ref.decode_logits)


def test_miss(node, ns):
    p = prompt(10, 3 * BLOCK + 1)
    b = run(engine(node, ns), p)
    assert b.loaded_tokens == 0
    assert torch.equal(b.decode_logits, reference(p).decode_logits)


@pytest.mark.parametrize("mode", [{"maru_layerwise": False}, {"maru_async_load": True}])
def test_whole_and_async_loads(node, ns, mode):
    p = prompt(14, 5 * BLOCK + 3)
    with InstanceA(node, ns) as a:
        answers, logits = a.generate(p)
    b = run(engine(node, ns, extra=mode), p)
    assert b.loaded_tokens == 5 * BLOCK
    assert_same(b, answers[0], logits[0])


def test_full_pool_evicts_and_b_recomputes(model):
    cfg = model.cfg
    chunk = cfg.n_layers * 2 * BLOCK * cfg.d_model * 4
    blocks, n = 6, 8
    pool = 3 * blocks * chunk + (1 << 20)  # room for about 3 of the 8 prompts
    prompts = [prompt(100 + i, blocks * BLOCK + 3) for i in range(n)]
    with MaruNode(pool_size=pool, extra=["--eviction", "prefix"]) as small:
        with InstanceA(small, "full") as a:
            for p in prompts:
                a.generate(p)
        loaded = []
        for p in reversed(prompts):  # the newest first: they are still there
            b = run(engine(small, "full", role="kv_consumer"), p)
            ref = reference(p)
            assert b.tokens == ref.tokens and torch.equal(b.decode_logits, ref.decode_logits)
            loaded.append(b.loaded_tokens // BLOCK)
    assert min(loaded) < blocks and max(loaded) > 0


def test_saver_killed_between_layers():
    p = prompt(15, 6 * BLOCK + 2)
    with MaruNode(pool_size=64 << 20, extra=["--session-timeout-ms", "1500",
                                             "--heartbeat-ms", "300"]) as node:
        a = InstanceA(node, "killed")
        try:
            # Chunks 0-2 sealed; chunk 3 created, layers 0 and 1 written
            # (layer 0 published, with the layer-wise API), then SIGKILL.
            a.send(op="generate", prompts=[p], max_tokens=1, stall_at=[3, 1])
            assert a.read() == {"stalled": [3, 1]}
        finally:
            a.kill()
            a.close()
        b = run(engine(node, "killed"), p)
        ref = reference(p)
        assert b.loaded_tokens - b.recomputed_tokens == 3 * BLOCK
        assert b.tokens == ref.tokens
        assert torch.equal(b.prefill_logits, ref.prefill_logits)
        assert torch.equal(b.decode_logits, ref.decode_logits)
        # Once the dead writer's session expires its reservation is dropped;
        # then an instance stores chunks 3-5 and the next one loads all six.
        with maru.Client(node.url) as client:
            assert wait_for(lambda: settled(client, chunk_paths_of("killed", p)[3]))
        run(engine(node, "killed"), p)
        c = run(engine(node, "killed"), p)
        assert c.loaded_tokens == 6 * BLOCK and torch.equal(c.decode_logits, ref.decode_logits)


def test_b_loads_layers_while_a_still_saves(node, ns):
    p = prompt(16, 4 * BLOCK + 5)
    with InstanceA(node, ns) as a:
        # A stops in step 3, which completes chunk 3, after save_kv_layer of
        # layer 2: chunks 0-2 are sealed, chunk 3 has layers 0 and 1
        # published (layer 2 is copied, published at the next layer).
        a.send(op="generate", prompts=[p], max_tokens=N_DECODE, pause_at=[3, 2])
        assert a.read() == {"paused": [3, 2]}
        b_eng = engine(node, ns)
        worker = b_eng.executor.runner.connector._worker
        result = {}
        thread = threading.Thread(target=lambda: result.update(r=b_eng.generate([p], N_DECODE)))
        thread.start()
        try:
            # B counts chunk 3 and loads its published layers while A holds the rest.
            assert wait_for(lambda: worker.loading is not None
                            and worker.loading.layers[1].is_set())
            job = worker.loading
            assert not job.layers[2].is_set()
            with maru.Client(node.url) as c:
                assert c.count_prefix(chunk_paths_of(ns, p)) == 3  # chunk 3 unsealed
        finally:
            a.send(op="go")
            thread.join()
            b_eng.close()
        answer = a.read()["results"][0]
    b = result["r"][0]
    assert (b.loaded_tokens, b.recomputed_tokens) == (4 * BLOCK, 0)
    assert b.tokens == answer["tokens"]
    assert torch.equal(b.decode_logits, reference(p).decode_logits)


def test_tensor_copies_of_strided_and_device_caches(node, ns):
    """The copy path for caches the library cannot reach (a GPU's) or whose
    blocks are not one run (HND), run on CPU tensors: the bytes land where
    the batch calls put them, in C order whatever the strides."""
    from maru.vllm.store import copy_tensors

    src = torch.arange(256, dtype=torch.uint8)
    strided = torch.arange(32, dtype=torch.bfloat16).view(4, 8).t()  # not contiguous
    with maru.Client(node.url) as client:
        chunk = client.create(f"/{ns}/t", 576)
        assert copy_tensors([(chunk, src, 0), (chunk, src.flip(0), 256),
                             (chunk, strided, 512)], True) == [None] * 3
        chunk.seal()
        chunk.release()
        back = torch.zeros(256, dtype=torch.uint8)
        again = torch.zeros(4, 8, dtype=torch.bfloat16).t()
        with client.open(f"/{ns}/t") as sealed:
            assert copy_tensors([(sealed, back, 256), (sealed, again, 512)], False) == [None] * 2
            assert torch.equal(back, src.flip(0))
            assert torch.equal(again, strided)
            whole = bytearray(576)
            sealed.read_into(whole)
            assert bytes(whole[:256]) == bytes(range(256))
            assert bytes(whole[512:]) == strided.contiguous().view(torch.uint8).numpy().tobytes()


def test_chunks_of_two_blocks(node, ns):
    p = prompt(17, 5 * BLOCK + 7)
    extra = {"maru_chunk_blocks": 2}
    with InstanceA(node, ns, extra=extra) as a:
        answers, logits = a.generate(p)
    b = run(engine(node, ns, extra=extra), p)
    assert b.loaded_tokens == 4 * BLOCK  # two chunks; the fifth block is in none
    assert_same(b, answers[0], logits[0])
    # Another chunk size names other chunks: nothing found, nothing mixed up.
    assert run(engine(node, ns), p).loaded_tokens == 0


def test_chunk_gone_between_count_and_load(node, ns):
    """Evicted (here: unlinked) after the scheduler counted it: the worker
    reports its blocks and all after them, the engine recomputes them."""
    p = prompt(18, 6 * BLOCK + 5)
    with InstanceA(node, ns) as a:
        answers, logits = a.generate(p)
    b_eng = engine(node, ns, role="kv_consumer")
    count = b_eng.connector.get_num_new_matched_tokens

    def count_then_evict(request, computed):
        got = count(request, computed)
        b_eng.connector.client.unlink(chunk_paths_of(ns, p)[2])
        return got

    b_eng.connector.get_num_new_matched_tokens = count_then_evict
    b = run(b_eng, p)
    assert (b.loaded_tokens, b.recomputed_tokens) == (6 * BLOCK, 4 * BLOCK)
    assert_same(b, answers[0], logits[0])


def test_a_dead_server_is_logged_and_recomputed(caplog, monkeypatch):
    """The server goes away under a running engine: the connector's hooks
    log, vLLM computes everything, the engine keeps serving. A call waits
    for a restart up to MARU_RETRY_MS (short here); after that the
    connector does not ask the server again for maru_retry_after_s."""
    monkeypatch.setenv("MARU_RETRY_MS", "300")
    p, q = prompt(19, 4 * BLOCK + 3), prompt(21, 3 * BLOCK + 1)
    with MaruNode(pool_size=32 << 20) as gone:
        eng = engine(gone, "gone", extra={"maru_retry_after_s": 3600})
    try:
        with caplog.at_level(logging.WARNING, logger="maru.vllm"):
            b, c = eng.generate([p, q], N_DECODE)
        store = eng.connector._scheduler.store
        assert store.down_until > 0  # found unreachable: not asked again for now
        with pytest.raises(OSError) as e:
            store.count(["/gone/x.r0"], True)
        assert e.value.errno == errno.ENOTCONN
    finally:
        eng.close()
    assert b.loaded_tokens == 0 and c.loaded_tokens == 0
    assert torch.equal(b.decode_logits, reference(p).decode_logits)
    assert torch.equal(c.decode_logits, reference(q).decode_logits)
    assert "unreachable" in caplog.text


def test_stats_and_prometheus_metrics(node, ns):
    """The stat loggers' calls on the class: build_kv_connector_stats of the
    dict the scheduler aggregated, build_prom_metrics at startup."""
    p = prompt(20, 3 * BLOCK + 2)
    with InstanceA(node, ns) as a:
        a.generate(p)
    eng = engine(node, ns)
    try:
        eng.generate([p], N_DECODE)
        logged = eng.log()
        counters = eng.prom.counters
    finally:
        eng.close()
    assert logged["lookups"] == 1 and logged["hit_tokens"] == 3 * BLOCK
    assert logged["loaded_chunks"] == 3
    assert logged["loaded_bytes"] == 3 * 4 * 2 * BLOCK * 256 * 4
    assert counters["loaded_chunks"][0].value == 3


def test_bad_configs_are_refused(node, ns):
    from maru.vllm import KVConnectorRole, MaruConnector
    from vllm_worker import create_connector

    def cfg(**more):
        return harness_config(conf(node, ns, **more))

    with pytest.raises(ValueError):
        MaruConnector(cfg(extra={"maru_chunk_blocks": 0}), KVConnectorRole.WORKER)
    with pytest.raises(ValueError, match="decode_context_parallel_size"):
        c = cfg()
        c.parallel_config.decode_context_parallel_size = 2
        MaruConnector(c, KVConnectorRole.SCHEDULER)
    with pytest.raises(ValueError, match="does not support HMA"):
        create_connector(cfg(disable_hma=False), KVConnectorRole.SCHEDULER, None)
    with pytest.raises(AttributeError, match="not found in maru.vllm"):
        create_connector(cfg(kv_connector="NoSuchConnector"), KVConnectorRole.SCHEDULER, None)
    worker = MaruConnector(cfg(), KVConnectorRole.WORKER)
    try:
        with pytest.raises(ValueError):  # not a paged cache
            worker.register_kv_caches({"l0": torch.zeros(4, BLOCK, 4, 64)})
        with pytest.raises(ValueError):  # an MLA cache for a model that is not MLA
            worker.register_kv_caches({"l0": torch.zeros(8, BLOCK, 96)})
        with pytest.raises(ValueError):  # layers that differ
            worker.register_kv_caches({"l0": torch.zeros(2, 8, BLOCK, 4, 64),
                                       "l1": torch.zeros(2, 8, BLOCK, 2, 64)})
        with pytest.raises(RuntimeError):  # a scheduler call on the worker side
            worker.build_connector_meta(None)
    finally:
        worker.shutdown()


def test_retention_hints_from_requests_reorder_eviction(model, caplog):
    """``sampling_params.extra_args["kv_transfer_params"] = {"maru_retain":
    ...}`` (vLLM's Request.kv_transfer_params): when a request ends, its
    chunks get the hint; under the default policy a dropped conversation's
    chunks go first and a kept one's stay. A bad value is logged and the
    request served and stored as without it."""
    cfg = model.cfg
    blocks = 4
    chunk = cfg.n_layers * 2 * BLOCK * cfg.d_model * 4
    pool = 8 * blocks * chunk + (1 << 20)
    dropped, kept, *plain = (prompt(300 + i, blocks * BLOCK + 3) for i in range(7))
    with MaruNode(pool_size=pool, extra=["--high-watermark", "1", "--low-watermark", "1"]) as small:
        eng = engine(small, "retain")
        try:
            eng.generate([dropped], N_DECODE, {"maru_retain": "drop"})
            eng.generate([kept], N_DECODE, {"maru_retain": "keep"})
            for p, bad in zip(plain, (42, "KEEP", "x" * 10000, None, {"other": 1})):
                params = bad if isinstance(bad, dict) else {"maru_retain": bad}
                eng.generate([p], N_DECODE, params)
            assert eng.connector._scheduler.hinted == 2 * blocks
            assert "maru_retain 42 is not one of keep, drop, none" in caplog.text
            assert "x" * 41 not in caplog.text  # a huge value is cut in the log
            with maru.Client(small.url) as c:
                def stored(p):
                    return c.count_prefix(chunk_paths_of("retain", p))

                assert [stored(p) for p in [dropped, kept] + plain] == [blocks] * 7
                n = 0
                while stored(plain[0]) == blocks:  # fill until an unhinted one goes
                    assert n < 64, "the pool never evicted"
                    eng.generate([prompt(400 + n, blocks * BLOCK + 3)], N_DECODE)
                    n += 1
                assert stored(dropped) == 0
                assert stored(kept) == blocks
        finally:
            eng.close()
