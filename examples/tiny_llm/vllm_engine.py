"""A vLLM engine for the tiny model: vLLM's scheduler with its own prefix
cache, an executor with the workers in-process or in processes of their
own, and the stat loggers' calls on the connector class.

Followed from vLLM's source (file:function@commit):

- v1/core/sched/scheduler.py@003df29:
  Scheduler.__init__ (the SCHEDULER connector through the factory),
  add_request (connector.on_new_request), schedule: RUNNING requests first
  (allocate_slots; on failure preempt the last running request:
  _preempt_request frees its blocks, sets num_computed_tokens = 0,
  PREEMPTED, back to the front of waiting, its id in preempted_req_ids),
  then WAITING ones: vLLM's own prefix cache (get_computed_blocks), then
  ``connector.get_num_new_matched_tokens(request, local_hit)``,
  allocate_slots, **``connector.update_state_after_alloc(request,
  get_blocks(id), num_external)`` while ``request.num_computed_tokens`` is
  still 0**, then num_computed_tokens = local + external; an asynchronous
  load waits in WAITING_FOR_REMOTE_KVS until finished_recving; chunked
  prefill (long_prefill_token_threshold, the token budget);
  ``scheduler_output.kv_connector_metadata = build_connector_meta(...)``
  before _update_after_schedule; update_from_output: invalid blocks
  (the "recompute" policy: num_computed_tokens cut to the first invalid
  block, the step's output dropped), update_connector_output,
  finished_recving, the scheduler connector's stats aggregated with the
  workers'; _free_request -> request_finished(request, block_ids).
- v1/core/kv_cache_manager.py@ace980e: prefix caching over full blocks,
  never the last token (get_computed_blocks caps at num_tokens - 1).
- v1/executor (UniProcExecutor: the worker in this process;
  MultiprocExecutor: one process per rank, the SchedulerOutput pickled to
  each), kv_connector/utils.py:KVOutputAggregator@18157ec (a request is
  finished sending/receiving once every worker said so; invalid blocks of
  all workers), the output of the last pipeline stage.
- v1/metrics/loggers.py + kv_connector/v1/metrics.py@578b601 at startup:
  ``connector_cls.build_prom_metrics(vllm_config, {Gauge: .., Counter: ..,
  Histogram: ..}, ["model_name", "engine"], {0: [model, "0"]})`` and per
  interval ``connector_cls.build_kv_connector_stats(data)``, aggregate,
  reduce, is_empty, prom observe.
"""
from __future__ import annotations

import itertools
import multiprocessing
import os
import tempfile
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Optional, Sequence, Set, Tuple

import torch

from vllm_types import (CachedRequestData, KVCacheBlock, KVCacheBlocks, KVCacheConfig,
                        KVCacheGroupSpec, KVConnectorOutput, ModelRunnerOutput, NewRequestData,
                        Request, RequestStatus, SamplingParams, SchedulerOutput, VllmConfig)
from vllm_worker import Runner, create_connector, get_connector_class, worker_main


# --- prefix cache and blocks ----------------------------------------------

class KVCacheManager:
    """KVCacheManager + BlockPool with prefix caching, one KV cache group."""

    def __init__(self, num_blocks: int, block_size: int, caching: bool = True) -> None:
        self.bs, self.caching = block_size, caching
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.free: Deque[KVCacheBlock] = deque(self.blocks)  # LRU order, evict from the left
        self.cached: Dict[int, KVCacheBlock] = {}  # block hash -> block
        self.req_blocks: Dict[str, List[KVCacheBlock]] = {}
        self.num_cached: Dict[str, int] = {}

    def _hashes(self, request: Request, n_blocks: int) -> List[int]:
        out, prev, tokens = [], None, request.all_token_ids
        for b in range(n_blocks):
            prev = hash((prev, tuple(tokens[b * self.bs:(b + 1) * self.bs])))
            out.append(prev)
        return out

    def get_computed_blocks(self, request: Request) -> Tuple[List[KVCacheBlock], int]:
        """The longest cached prefix of full blocks, never the last token."""
        if not self.caching:
            return [], 0
        hit = []
        for h in self._hashes(request, (request.num_tokens - 1) // self.bs):
            block = self.cached.get(h)
            if block is None:
                break
            hit.append(block)
        return hit, len(hit) * self.bs

    def num_free(self) -> int:
        return len(self.free)

    def allocate_slots(self, request: Request, num_new_tokens: int,
                       num_new_computed_tokens: int = 0,
                       new_computed_blocks: Sequence[KVCacheBlock] = (),
                       num_external_computed_tokens: int = 0,
                       delay_cache_blocks: bool = False) -> Optional[List[KVCacheBlock]]:
        have = self.req_blocks.setdefault(request.request_id, [])
        total = request.num_computed_tokens + num_new_computed_tokens + \
            num_external_computed_tokens + num_new_tokens
        need = -(-total // self.bs) - len(have) - len(new_computed_blocks)
        reusable = sum(1 for b in new_computed_blocks if b.ref_cnt == 0)
        if need > len(self.free) - reusable:
            return None
        for b in new_computed_blocks:  # touch: out of the free queue
            if b.ref_cnt == 0:
                self.free.remove(b)
            b.ref_cnt += 1
            have.append(b)
        new = []
        for _ in range(max(need, 0)):
            b = self.free.popleft()
            if b.block_hash is not None:  # evicted from the prefix cache
                self.cached.pop(b.block_hash, None)
                b.block_hash = None
            b.ref_cnt = 1
            new.append(b)
        have.extend(new)
        if not delay_cache_blocks:
            self.cache_blocks(request, min(total, request.num_tokens))
        return new

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        if not self.caching:
            return
        have = self.req_blocks.get(request.request_id, [])
        full = min(num_tokens // self.bs, len(have))
        done = self.num_cached.get(request.request_id, 0)
        for b, h in list(zip(have, self._hashes(request, full)))[done:]:
            if b.block_hash is None and h not in self.cached:
                b.block_hash = h
                self.cached[h] = b
        self.num_cached[request.request_id] = max(done, full)

    def uncache(self, block_ids: Set[int]) -> None:
        """Drops blocks whose KV failed to load from the prefix cache."""
        for i in block_ids:
            b = self.blocks[i]
            if b.block_hash is not None and self.cached.get(b.block_hash) is b:
                del self.cached[b.block_hash]
            b.block_hash = None

    def free_request(self, req_id: str) -> None:
        for b in reversed(self.req_blocks.pop(req_id, [])):
            b.ref_cnt -= 1
            if b.ref_cnt == 0:
                self.free.append(b)
        self.num_cached.pop(req_id, None)

    def get_blocks(self, req_id: str) -> KVCacheBlocks:
        return KVCacheBlocks((list(self.req_blocks.get(req_id, [])),))

    def get_block_ids(self, req_id: str) -> Tuple[List[int], ...]:
        return self.get_blocks(req_id).get_block_ids()


# --- the stat loggers' metric types (prometheus_client's names) -------------

class _Metric:
    def __init__(self, name: str, documentation: str = "", labelnames: Sequence[str] = ()):
        self.name, self.labelnames, self.children = name, list(labelnames), {}
        self.value = 0.0

    def labels(self, *values: object) -> "_Metric":
        return self.children.setdefault(values, type(self)(self.name))

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class Gauge(_Metric):
    """prometheus_client.Gauge's calls the connector makes."""


class Counter(_Metric):
    """prometheus_client.Counter's calls the connector makes."""


class Histogram(_Metric):
    """prometheus_client.Histogram's calls the connector makes."""


# --- executors ---------------------------------------------------------------

class UniProcExecutor:
    """The worker in the scheduler's process (vLLM's uni executor)."""

    def __init__(self, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig, layout: str,
                 hnd: bool, runner: str, hooks: Any = None) -> None:
        assert vllm_config.parallel_config.world_size == 1
        self.runner = Runner(vllm_config, kv_cache_config, layout, hnd, runner, hooks=hooks)
        self.world = 1

    def execute_model(self, so: SchedulerOutput) -> List[ModelRunnerOutput]:
        return [self.runner.execute_model(so)]

    def shutdown(self) -> None:
        self.runner.shutdown()


class MultiprocExecutor:
    """One worker process per rank; each step's SchedulerOutput is pickled
    to every worker (its connector metadata with it)."""

    def __init__(self, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig, layout: str,
                 hnd: bool, runner: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.world = vllm_config.parallel_config.world_size
        self.dir = tempfile.mkdtemp(prefix="maru-vllm-dist-")
        init = os.path.join(self.dir, "init")
        self.procs, self.conns = [], []
        try:
            for rank in range(self.world):
                mine, theirs = ctx.Pipe()
                p = ctx.Process(target=worker_main, args=(
                    theirs, rank, vllm_config, kv_cache_config, layout, hnd, runner, init),
                    daemon=True)
                p.start()
                theirs.close()
                self.procs.append(p)
                self.conns.append(mine)
            for c in self.conns:
                self._check(c.recv())
        except BaseException:
            self.shutdown()
            raise

    @staticmethod
    def _check(answer: Any) -> Any:
        if isinstance(answer, dict) and "error" in answer:
            raise RuntimeError("worker failed: " + answer["error"])
        return answer

    def execute_model(self, so: SchedulerOutput) -> List[ModelRunnerOutput]:
        for c in self.conns:
            c.send(so)  # pickled, as vLLM's message queue does
        return [self._check(c.recv()) for c in self.conns]

    def shutdown(self) -> None:
        for c in self.conns:
            try:
                c.send(None)
            except (OSError, BrokenPipeError):
                pass
        for p in self.procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
                p.join()
        for c in self.conns:
            c.close()
        self.conns, self.procs = [], []
        try:
            for name in os.listdir(self.dir):
                os.unlink(os.path.join(self.dir, name))
            os.rmdir(self.dir)
        except OSError:
            pass


class KVOutputAggregator:
    """kv_connector/utils.py:KVOutputAggregator: a request is reported
    finished once every worker reported it; invalid blocks of any worker."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.sending: Dict[str, int] = {}
        self.recving: Dict[str, int] = {}

    def aggregate(self, outputs: List[ModelRunnerOutput], output_rank: int) -> ModelRunnerOutput:
        out = outputs[output_rank]
        if all(o.kv_connector_output is None for o in outputs):
            return out
        agg = KVConnectorOutput(finished_sending=set(), finished_recving=set(),
                                failed_recving=set())
        stats = None
        for o in outputs:
            kv = o.kv_connector_output
            if kv is None:
                continue
            for ids, count, done in ((kv.finished_sending, self.sending, agg.finished_sending),
                                     (kv.finished_recving, self.recving, agg.finished_recving)):
                for r in ids or ():
                    count[r] = count.get(r, self.world) - 1
                    if count[r] == 0:
                        done.add(r)
                        del count[r]
            agg.failed_recving |= set(kv.failed_recving or ())
            agg.invalid_block_ids |= set(kv.invalid_block_ids or ())
            if kv.kv_connector_stats is not None:
                stats = kv.kv_connector_stats if stats is None else \
                    stats.aggregate(kv.kv_connector_stats)
        agg.kv_connector_stats = stats
        return ModelRunnerOutput(out.req_ids, out.logits, agg)


# --- the scheduler and the engine --------------------------------------------

@dataclass
class Result:
    """What a request produced: its tokens and the logits of every sampled step."""

    tokens: List[int] = field(default_factory=list)
    logits: List[torch.Tensor] = field(default_factory=list)
    local_hit_tokens: int = 0  # vLLM's own prefix cache, first scheduling
    loaded_tokens: int = 0  # the connector's external tokens, every scheduling
    recomputed_tokens: int = 0  # of those, cut by load errors
    preemptions: int = 0

    @property
    def prefill_logits(self) -> torch.Tensor:
        return self.logits[0]

    @property
    def decode_logits(self) -> torch.Tensor:
        return torch.stack(self.logits[1:]) if len(self.logits) > 1 else torch.empty(0)


class Engine:
    """EngineCore: a Scheduler, an executor and the stat loggers.

    ``executor``: "uni" (the worker here, tests can reach its connector) or
    "mp" (worker processes, the metadata pickled to them). ``layout``:
    flash_attn, flashinfer or mla; ``hnd`` the HND stride order.
    ``runner``: "003df29" or "00f4240" (see vllm_worker.Runner).
    """

    _ids = itertools.count()

    def __init__(self, vllm_config: VllmConfig, executor: str = "uni",
                 layout: str = "flash_attn", hnd: bool = False, runner: str = "003df29",
                 hooks: Any = None) -> None:
        self.config = vllm_config
        cc, sc = vllm_config.cache_config, vllm_config.scheduler_config
        self.bs = cc.block_size
        layers = [f"model.layers.{i}.self_attn.attn" for i in range(4)]
        self.kv_cache_config = KVCacheConfig(cc.num_gpu_blocks, [KVCacheGroupSpec(layers)])
        self.kv = KVCacheManager(cc.num_gpu_blocks, self.bs, cc.enable_prefix_caching)
        self.sc = sc
        self.connector = None
        self.prom = self.logging = None
        ktc = vllm_config.kv_transfer_config
        if ktc is not None:
            from maru.vllm import KVConnectorRole

            # The stat loggers, built at startup, call the class.
            cls, _ = get_connector_class(ktc)
            self.prom = cls.build_prom_metrics(
                vllm_config, {Gauge: Gauge, Counter: Counter, Histogram: Histogram},
                ["model_name", "engine"], {0: [vllm_config.model_config.model, "0"]})
            self.connector_cls = cls
            self.stats_acc = None
            self.connector = create_connector(vllm_config, KVConnectorRole.SCHEDULER,
                                              self.kv_cache_config)
            self.connector.bind_gpu_block_pool(self.kv)
        if executor == "uni":
            self.executor: Any = UniProcExecutor(vllm_config, self.kv_cache_config, layout, hnd,
                                                 runner, hooks)
        else:
            self.executor = MultiprocExecutor(vllm_config, self.kv_cache_config, layout, hnd,
                                              runner)
        pc = vllm_config.parallel_config
        self.output_rank = (pc.pipeline_parallel_size - 1) * pc.tensor_parallel_size
        self.aggregator = KVOutputAggregator(self.executor.world)
        self.waiting: Deque[Request] = deque()
        self.running: List[Request] = []
        self.requests: Dict[str, Request] = {}
        self.results: Dict[str, Result] = {}
        self.finished_req_ids: Set[str] = set()
        self.finished_recving: Set[str] = set()
        self.failed_recving: Set[str] = set()
        self.preempted: Set[str] = set()
        self.sent_outputs: Dict[str, int] = {}  # output tokens the workers were sent

    # --- requests ------------------------------------------------------------

    def add_request(self, prompt: Sequence[int], max_tokens: int,
                    kv_transfer_params: Optional[Dict[str, Any]] = None) -> str:
        req_id = f"req-{next(self._ids)}"
        extra = {"kv_transfer_params": kv_transfer_params} if kv_transfer_params else None
        req = Request(req_id, prompt, SamplingParams(max_tokens, extra))
        self.requests[req_id] = req
        self.results[req_id] = Result()
        self.waiting.append(req)
        if self.connector is not None:
            self.connector.on_new_request(req)
        return req_id

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def run(self, max_steps: int = 10000) -> None:
        for _ in range(max_steps):
            if not self.has_unfinished():
                return
            self.step()
        raise RuntimeError("requests did not finish")

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int,
                 kv_transfer_params: Optional[Dict[str, Any]] = None) -> List[Result]:
        ids = [self.add_request(p, max_tokens, kv_transfer_params) for p in prompts]
        self.run()
        return [self.results[i] for i in ids]

    # --- schedule --------------------------------------------------------------

    def _preempt(self, req: Request) -> None:
        self.kv.free_request(req.request_id)
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.results[req.request_id].preemptions += 1
        self.waiting.appendleft(req)
        self.preempted.add(req.request_id)

    def schedule(self) -> SchedulerOutput:
        budget = self.sc.max_num_batched_tokens
        new_reqs: List[Request] = []
        resumed: List[Request] = []
        cached: List[Tuple[Request, List[KVCacheBlock]]] = []
        num_scheduled: Dict[str, int] = {}
        has_sync_loads = False
        preempted_now = False
        # RUNNING requests.
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_tokens - req.num_computed_tokens,
                    self.sc.long_prefill_token_threshold, budget)
            if n <= 0:
                i += 1
                continue
            while True:
                new_blocks = self.kv.allocate_slots(req, n)
                if new_blocks is not None:
                    break
                victim = self.running.pop()  # the lowest priority: the last
                self._preempt(victim)
                preempted_now = True
                if victim is req:
                    break
            if new_blocks is None:
                break
            cached.append((req, new_blocks))
            num_scheduled[req.request_id] = n
            budget -= n
            i += 1
        # WAITING requests (none while this step preempted).
        skipped: List[Request] = []
        while self.waiting and budget > 0 and not preempted_now and \
                len(self.running) < self.sc.max_num_seqs:
            req = self.waiting[0]
            if req.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                if req.request_id not in self.finished_recving:
                    skipped.append(self.waiting.popleft())
                    continue
                self._update_waiting_for_remote_kv(req)
            local_blocks: List[KVCacheBlock] = []
            local = external = 0
            load_async = False
            if req.num_computed_tokens == 0:
                local_blocks, local = self.kv.get_computed_blocks(req)
                if self.connector is not None:
                    ext, load_async = self.connector.get_num_new_matched_tokens(req, local)
                    if ext is None:
                        skipped.append(self.waiting.popleft())
                        continue
                    external = ext
                computed = local + external
                assert computed <= req.num_tokens
            else:
                computed = req.num_computed_tokens
            if load_async:
                assert external > 0
                n = 0
            else:
                n = min(req.num_tokens - computed, self.sc.long_prefill_token_threshold, budget)
                assert n > 0
            if req.num_computed_tokens == 0:
                new_blocks = self.kv.allocate_slots(req, n + external, local, local_blocks,
                                                    delay_cache_blocks=load_async)
            else:
                new_blocks = self.kv.allocate_slots(req, n)
            if new_blocks is None:
                break
            if self.connector is not None:
                # Before request.num_computed_tokens is set (still its old value).
                self.connector.update_state_after_alloc(
                    req, self.kv.get_blocks(req.request_id),
                    external if req.num_computed_tokens == 0 else 0)
            self.waiting.popleft()
            res = self.results[req.request_id]
            if req.num_computed_tokens == 0:
                res.loaded_tokens += external
                if not req.num_preemptions:
                    res.local_hit_tokens = local
            if load_async:
                req.status = RequestStatus.WAITING_FOR_REMOTE_KVS
                req.num_computed_tokens = computed
                skipped.append(req)
                continue
            has_sync_loads |= external > 0 and req.num_computed_tokens == 0
            was_preempted = req.status == RequestStatus.PREEMPTED
            self.running.append(req)
            req.status = RequestStatus.RUNNING
            req.num_computed_tokens = computed
            (resumed if was_preempted else new_reqs).append(req)
            num_scheduled[req.request_id] = n
            budget -= n
        for req in reversed(skipped):
            self.waiting.appendleft(req)

        c = CachedRequestData()
        for req, blocks in cached:
            c.req_ids.append(req.request_id)
            sent = self.sent_outputs.get(req.request_id, 0)
            c.new_token_ids.append(list(req.output_token_ids[sent:]))
            self.sent_outputs[req.request_id] = req.num_output_tokens
            c.new_block_ids.append(([b.block_id for b in blocks],) if blocks else None)
            c.num_computed_tokens.append(req.num_computed_tokens)
            c.num_output_tokens.append(req.num_output_tokens)
        for req in resumed:  # MRV1: resumed requests go with the cached ones
            c.req_ids.append(req.request_id)
            self.sent_outputs[req.request_id] = req.num_output_tokens
            c.resumed_req_ids.add(req.request_id)
            c.all_token_ids[req.request_id] = list(req.all_token_ids)
            c.new_token_ids.append([])
            c.new_block_ids.append(self.kv.get_block_ids(req.request_id))
            c.num_computed_tokens.append(req.num_computed_tokens)
            c.num_output_tokens.append(req.num_output_tokens)
        so = SchedulerOutput(
            scheduled_new_reqs=[NewRequestData(r.request_id, list(r.prompt_token_ids),
                                               self.kv.get_block_ids(r.request_id),
                                               r.num_computed_tokens, r.sampling_params)
                                for r in new_reqs],
            scheduled_cached_reqs=c, num_scheduled_tokens=num_scheduled,
            total_num_scheduled_tokens=sum(num_scheduled.values()),
            finished_req_ids=self.finished_req_ids, preempted_req_ids=self.preempted,
            has_sync_kv_loads=has_sync_loads)
        self.finished_req_ids, self.preempted = set(), set()
        if self.connector is not None:
            so.kv_connector_metadata = self.connector.build_connector_meta(so)
        # _update_after_schedule
        for req_id, n in num_scheduled.items():
            self.requests[req_id].num_computed_tokens += n
        return so

    def _update_waiting_for_remote_kv(self, req: Request) -> None:
        failed = req.request_id in self.failed_recving
        self.finished_recving.discard(req.request_id)
        self.failed_recving.discard(req.request_id)
        if not failed:
            self.kv.cache_blocks(req, req.num_computed_tokens)
        if req.num_computed_tokens == req.num_tokens:
            req.num_computed_tokens = req.num_tokens - 1
        req.status = RequestStatus.PREEMPTED if req.num_preemptions else RequestStatus.WAITING

    # --- update_from_output ------------------------------------------------------

    def update_from_output(self, so: SchedulerOutput, out: ModelRunnerOutput) -> None:
        kv = out.kv_connector_output
        skip: Set[str] = set()
        if kv is not None and kv.invalid_block_ids:
            skip = self._handle_invalid_blocks(kv.invalid_block_ids, so)
        for req_id, n in so.num_scheduled_tokens.items():
            req = self.requests.get(req_id)
            if req is None or req_id in skip or req.status != RequestStatus.RUNNING:
                continue
            if req.num_computed_tokens < req.num_tokens:
                continue  # a chunk of a prefill: nothing sampled
            logits = out.logits[req_id]
            res = self.results[req_id]
            res.logits.append(logits)
            token = int(torch.argmax(logits))
            req.append_output_token_ids(token)
            res.tokens.append(token)
            if req.num_output_tokens >= req.max_tokens:
                req.status = RequestStatus.FINISHED_LENGTH_CAPPED
                self.running.remove(req)
                self._free_request(req)
        if kv is not None:
            if self.connector is not None:
                self.connector.update_connector_output(kv)
            self.finished_recving |= set(kv.finished_recving or ())
            self.failed_recving |= set(kv.failed_recving or ())
        self._log_stats(kv)

    def _handle_invalid_blocks(self, invalid: Set[int], so: SchedulerOutput) -> Set[str]:
        """The "recompute" policy: each affected request resumes at its first
        invalid block; the step's output of sync-affected requests is dropped."""
        self.kv.uncache(invalid)
        affected = set()
        for req in list(self.running) + [r for r in self.waiting
                                         if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS]:
            (ids,) = self.kv.get_block_ids(req.request_id)
            before = req.num_computed_tokens - so.num_scheduled_tokens.get(req.request_id, 0)
            bad = [i for i, b in enumerate(ids[:-(-before // self.bs)]) if b in invalid]
            if not bad:
                continue
            cut = bad[0] * self.bs
            self.results[req.request_id].recomputed_tokens += before - cut
            req.num_computed_tokens = cut
            if req.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                self.failed_recving.add(req.request_id)
            else:
                affected.add(req.request_id)
        return affected

    def _free_request(self, req: Request) -> None:
        if self.connector is not None:
            block_ids = self.kv.get_block_ids(req.request_id)[0]
            self.connector.request_finished(req, block_ids)
        self.kv.free_request(req.request_id)
        self.finished_req_ids.add(req.request_id)
        self.sent_outputs.pop(req.request_id, None)
        del self.requests[req.request_id]

    def _log_stats(self, kv: Optional[KVConnectorOutput]) -> None:
        if self.connector is None:
            return
        stats = kv.kv_connector_stats if kv is not None else None
        own = self.connector.get_kv_connector_stats()
        if own is not None:
            stats = own if stats is None else stats.aggregate(own)
        if stats is None:
            return
        data = stats.data  # only the dict crosses to the stat loggers
        observed = self.connector_cls.build_kv_connector_stats(data)
        if observed is None:
            return
        self.stats_acc = observed if self.stats_acc is None else self.stats_acc.aggregate(observed)
        if self.prom is not None:
            self.prom.observe(data, 0)

    def log(self) -> Dict[str, Any]:
        """LoggingStatLogger.log: the reduced stats of the interval, then reset."""
        acc, self.stats_acc = getattr(self, "stats_acc", None), None
        if acc is None or acc.is_empty():
            return {}
        return acc.reduce()

    def step(self) -> None:
        so = self.schedule()
        outputs = self.executor.execute_model(so)
        self.update_from_output(so, self.aggregator.aggregate(outputs, self.output_rank))

    def close(self) -> None:
        try:
            self.executor.shutdown()
        finally:
            if self.connector is not None:
                self.connector.shutdown()
