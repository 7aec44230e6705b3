"""The maru.vllm connector driven in vLLM's call order, across processes.

Process A (vllm_instance.py: the paged engine with the connector) computes a
prompt and saves its chunks; this test process is B: a paged engine whose
connector finds the chunks, loads them into its own blocks layer by layer
and computes the rest. B's logits must equal A's (torch.equal: both prefill
in steps of one block, so each step's arithmetic is the same whether its
context was computed or loaded). Also: partial hits, misses, eviction under
a full pool, a saver SIGKILLed between two layers (B recomputes and never
uses what was not published), a reader loading while A is still saving
layers, asynchronous and whole (not layer-wise) loads.
"""
import json
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
from paged_engine import PagedEngine  # noqa: E402
from proc import InstanceProcess  # noqa: E402

BLOCK = 16
N_DECODE = 6


@pytest.fixture(scope="module")
def node():
    with MaruNode(pool_size=128 << 20, extra=["--eviction", "prefix"]) as n:
        yield n


@pytest.fixture
def ns():
    return "vllm-" + uuid.uuid4().hex[:10]


def extra(node, ns, **more):
    return {"maru_server": node.url, "maru_namespace": ns, "maru_instance": "test-b",
            "maru_load_timeout_s": 60, **more}


def engine(model, node, ns, role="kv_both", **more):
    return PagedEngine(model, BLOCK, 256, extra(node, ns, **more), role=role)


def reference(model, p):
    """The same request without a connector: everything computed here."""
    return PagedEngine(model, BLOCK, 256).generate(p, N_DECODE)


class InstanceA(InstanceProcess):
    def __init__(self, node, ns, **more):
        argv = ["--server", node.url, "--namespace", ns, "--block", str(BLOCK),
                "--name", "test-a", "--extra", json.dumps(more)]
        super().__init__(node.url, script="vllm_instance.py", argv=argv)

    def generate(self, p, **kw):
        """A's answer and logits."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "logits.pt")
            answer = self.request(op="generate", prompt=p, decode=N_DECODE, save=path, **kw)
            return answer, torch.load(path)


def chunk_paths_of(ns, p):
    """The connector's pool paths of the chunks of ``p`` (the engine's model tag)."""
    from maru.vllm.keys import chain_keys, chunk_paths, model_tag

    return chunk_paths(ns, chain_keys(model_tag("tiny-llm", "float32", BLOCK, 1, 1), p, BLOCK))


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


def run(eng, p, **kw):
    try:
        return eng.generate(p, N_DECODE, **kw)
    finally:
        eng.close()


def test_b_loads_a_and_gets_a_logits(model, node, ns):
    p = prompt(1, 6 * BLOCK + 5)
    with InstanceA(node, ns) as a:
        answer, logits = a.generate(p)
    assert answer["loaded_tokens"] == 0
    b = run(engine(model, node, ns), p)
    assert (b.loaded_tokens, b.recomputed_tokens) == (6 * BLOCK, 0)
    assert_same(b, answer, logits)
    ref = reference(model, p)
    assert torch.equal(ref.decode_logits, b.decode_logits)


def test_whole_prompt_stored_still_computes_its_last_block(model, node, ns):
    p = prompt(2, 4 * BLOCK)
    with InstanceA(node, ns) as a:
        answer, logits = a.generate(p)
    b = run(engine(model, node, ns), p)
    assert b.loaded_tokens == 3 * BLOCK  # the last token's logits are computed
    assert_same(b, answer, logits)


def test_partial_hit_then_full_hit(model, node, ns):
    shared = prompt(3, 6 * BLOCK)
    p = shared[:2 * BLOCK] + prompt(4, 3 * BLOCK + 9)
    with InstanceA(node, ns) as a:
        a.generate(shared)
    b = run(engine(model, node, ns), p)
    assert b.loaded_tokens == 2 * BLOCK
    ref = reference(model, p)
    assert b.tokens == ref.tokens and torch.equal(b.decode_logits, ref.decode_logits)
    # B stored its other three blocks: a third instance loads all five.
    c = run(engine(model, node, ns), p)
    assert c.loaded_tokens == 5 * BLOCK and torch.equal(c.decode_logits, ref.decode_logits)


def test_miss(model, node, ns):
    p = prompt(5, 3 * BLOCK + 1)
    b = run(engine(model, node, ns), p)
    assert b.loaded_tokens == 0
    assert torch.equal(b.decode_logits, reference(model, p).decode_logits)


@pytest.mark.parametrize("mode", [{"maru_layerwise": False}, {"maru_async_load": True}])
def test_whole_and_async_loads(model, node, ns, mode):
    p = prompt(6, 5 * BLOCK + 3)
    with InstanceA(node, ns) as a:
        answer, logits = a.generate(p)
    b = run(engine(model, node, ns, **mode), p)
    assert b.loaded_tokens == 5 * BLOCK
    assert_same(b, answer, logits)


def test_full_pool_evicts_and_b_recomputes(model):
    from maru.vllm.paged import PagedLayout

    cfg = model.cfg
    chunk = PagedLayout(cfg.n_layers, BLOCK * cfg.d_model * 4, 1).chunk_bytes
    blocks, n = 6, 8
    pool = 3 * blocks * chunk + (1 << 20)  # room for about 3 of the 8 prompts
    prompts = [prompt(100 + i, blocks * BLOCK + 3) for i in range(n)]
    with MaruNode(pool_size=pool, extra=["--eviction", "prefix"]) as small:
        with InstanceA(small, "full") as a:
            for p in prompts:
                a.generate(p)
        loaded = []
        for p in reversed(prompts):  # the newest first: they are still there
            b = run(engine(model, small, "full", role="kv_consumer"), p)
            ref = reference(model, p)
            assert b.tokens == ref.tokens and torch.equal(b.decode_logits, ref.decode_logits)
            loaded.append(b.loaded_tokens // BLOCK)
    assert min(loaded) < blocks and max(loaded) > 0


def test_saver_killed_between_layers(model):
    p = prompt(7, 6 * BLOCK + 2)
    with MaruNode(pool_size=64 << 20, extra=["--session-timeout-ms", "1500",
                                             "--heartbeat-ms", "300"]) as node:
        a = InstanceA(node, "killed")
        try:
            # Chunks 0-2 sealed; chunk 3 created, layers 0 and 1 written
            # (layer 0 published, with the layer-wise API), then SIGKILL.
            a.send(op="generate", prompt=p, decode=0, stall_at=[3, 1])
            assert a.read() == {"stalled": [3, 1]}
        finally:
            a.kill()
            a.close()
        b = run(engine(model, node, "killed"), p)
        ref = reference(model, p)
        assert b.loaded_tokens - b.recomputed_tokens == 3 * BLOCK
        assert b.tokens == ref.tokens
        assert torch.equal(b.prefill_logits, ref.prefill_logits)
        assert torch.equal(b.decode_logits, ref.decode_logits)
        # Once the dead writer's session expires its reservation is dropped;
        # then an instance stores chunks 3-5 and the next one loads all six.
        with maru.Client(node.url) as client:
            assert wait_for(lambda: settled(client, chunk_paths_of("killed", p)[3]))
        run(engine(model, node, "killed"), p)
        c = run(engine(model, node, "killed"), p)
        assert c.loaded_tokens == 6 * BLOCK and torch.equal(c.decode_logits, ref.decode_logits)


def test_b_loads_layers_while_a_still_saves(model, node, ns):
    p = prompt(8, 4 * BLOCK + 5)
    with InstanceA(node, ns) as a:
        # A stops in step 3, which completes chunk 3, after save_kv_layer of
        # layer 2: chunks 0-2 are sealed, chunk 3 has layers 0 and 1
        # published (layer 2 is copied, published at the next layer).
        a.send(op="generate", prompt=p, decode=N_DECODE, save=None, pause_at=[3, 2])
        assert a.read() == {"paused": [3, 2]}
        b_eng = engine(model, node, ns)
        result = {}
        thread = threading.Thread(target=lambda: result.update(r=b_eng.generate(p, N_DECODE)))
        thread.start()
        try:
            # B counts chunk 3 and loads its published layers while A holds the rest.
            assert wait_for(lambda: b_eng.worker._worker.loading is not None
                            and b_eng.worker._worker.loading.layers[1].is_set())
            job = b_eng.worker._worker.loading
            assert not job.layers[2].is_set()
            assert b_eng.worker.client.count_prefix(
                [c.path for c in job.requests[0].spec.chunks]) == 3  # chunk 3 unsealed
        finally:
            a.send(op="go")
            thread.join()
            b_eng.close()
        answer = a.read()
    b = result["r"]
    assert (b.loaded_tokens, b.recomputed_tokens) == (4 * BLOCK, 0)
    assert b.tokens == answer["tokens"]
    assert torch.equal(b.decode_logits, reference(model, p).decode_logits)


def test_tensor_copies_of_device_caches(node, ns):
    """The copy path for caches the library cannot reach (a GPU's), run on
    CPU tensors: the same bytes land where the batch calls put them."""
    from maru.vllm.store import copy_tensors

    src = torch.arange(256, dtype=torch.uint8)
    with maru.Client(node.url) as client:
        chunk = client.create(f"/{ns}/t", 512)
        assert copy_tensors([(chunk, src, 0), (chunk, src.flip(0), 256)], True) == [None, None]
        chunk.seal()
        chunk.release()
        back = torch.zeros(256, dtype=torch.uint8)
        with client.open(f"/{ns}/t") as sealed:
            assert copy_tensors([(sealed, back, 256)], False) == [None]
            assert torch.equal(back, src.flip(0))
            whole = bytearray(512)
            sealed.read_into(whole)
            assert bytes(whole[:256]) == bytes(range(256))


def test_chunks_of_two_blocks(model, node, ns):
    p = prompt(9, 5 * BLOCK + 7)
    with InstanceA(node, ns, maru_chunk_blocks=2) as a:
        answer, logits = a.generate(p)
    b = run(engine(model, node, ns, maru_chunk_blocks=2), p)
    assert b.loaded_tokens == 4 * BLOCK  # two chunks; the fifth block is in none
    assert_same(b, answer, logits)
    # Another chunk size names other chunks: nothing found, nothing mixed up.
    assert run(engine(model, node, ns), p).loaded_tokens == 0


def test_chunk_gone_between_count_and_load(model, node, ns):
    """Evicted (here: unlinked) after the scheduler counted it: the worker
    reports its blocks and all after them, the engine recomputes them."""
    p = prompt(10, 6 * BLOCK + 5)
    with InstanceA(node, ns) as a:
        answer, logits = a.generate(p)
    b_eng = engine(model, node, ns, role="kv_consumer")
    count = b_eng.sched.get_num_new_matched_tokens

    def count_then_evict(request, computed):
        got = count(request, computed)
        b_eng.sched.client.unlink(chunk_paths_of(ns, p)[2])
        return got

    b_eng.sched.get_num_new_matched_tokens = count_then_evict
    b = run(b_eng, p)
    assert (b.loaded_tokens, b.recomputed_tokens) == (6 * BLOCK, 4 * BLOCK)
    assert_same(b, answer, logits)


def test_bad_configs_are_refused(model, node, ns):
    from maru.vllm import KVConnectorRole, MaruConnector
    from paged_engine import vllm_config

    with pytest.raises(ValueError):
        MaruConnector(vllm_config(BLOCK, extra(node, ns, maru_chunk_blocks=0)),
                      KVConnectorRole.WORKER)
    worker = MaruConnector(vllm_config(BLOCK, extra(node, ns)), KVConnectorRole.WORKER)
    try:
        with pytest.raises(ValueError):  # an HND cache: heads before tokens
            worker.register_kv_caches({"l0": torch.zeros(2, 4, 4, BLOCK, 64).transpose(2, 3)})
        with pytest.raises(ValueError):  # not [2, blocks, block, heads, dim]
            worker.register_kv_caches({"l0": torch.zeros(4, BLOCK, 4, 64)})
        with pytest.raises(RuntimeError):  # a scheduler call on the worker side
            worker.build_connector_meta(None)
    finally:
        worker.shutdown()


def test_retention_hints_from_requests_reorder_eviction(model, caplog):
    """``kv_transfer_params={"maru_retain": ...}``: when a request ends, its
    chunks get the hint; under the default policy a dropped conversation's
    chunks go first and a kept one's stay. A bad value is logged and the
    request served and stored as without it."""
    from maru.vllm.paged import PagedLayout

    cfg = model.cfg
    blocks = 4
    chunk = PagedLayout(cfg.n_layers, BLOCK * cfg.d_model * 4, 1).chunk_bytes
    pool = 8 * blocks * chunk + (1 << 20)
    dropped, kept, *plain = (prompt(300 + i, blocks * BLOCK + 3) for i in range(7))
    with MaruNode(pool_size=pool, extra=["--high-watermark", "1", "--low-watermark", "1"]) as small:
        eng = engine(model, small, "retain")
        try:
            eng.generate(dropped, N_DECODE, kv_transfer_params={"maru_retain": "drop"})
            eng.generate(kept, N_DECODE, kv_transfer_params={"maru_retain": "keep"})
            for p, bad in zip(plain, (42, "KEEP", "x" * 10000, None, {"other": 1})):
                params = bad if isinstance(bad, dict) else {"maru_retain": bad}
                eng.generate(p, N_DECODE, kv_transfer_params=params)
            assert eng.sched._scheduler.hinted == 2 * blocks
            assert "maru_retain 42 is not one of keep, drop, none" in caplog.text
            assert "x" * 41 not in caplog.text  # a huge value is cut in the log
            with maru.Client(small.url) as c:
                def stored(p):
                    return c.count_prefix(chunk_paths_of("retain", p))

                assert [stored(p) for p in [dropped, kept] + plain] == [blocks] * 7
                n = 0
                while stored(plain[0]) == blocks:  # fill until an unhinted one goes
                    assert n < 64, "the pool never evicted"
                    eng.generate(prompt(400 + n, blocks * BLOCK + 3), N_DECODE)
                    n += 1
                assert stored(dropped) == 0
                assert stored(kept) == blocks
        finally:
            eng.close()
