"""A tiny paged-KV "engine" that drives a vLLM KV connector in vLLM's order.

The model of model.py, run layer by layer over a paged KV cache shaped as
vLLM's FlashAttention cache (``[2, num_blocks, block_size, heads,
head_dim]`` per layer), one request at a time, prefill in steps of one
block (vLLM's chunked prefill with a budget of one block). Per request:

  scheduler: get_num_new_matched_tokens, update_state_after_alloc;
  per step:  build_connector_meta (scheduler); bind_connector_metadata,
             start_load_kv, then per layer wait_for_layer_load before
             attention reads the cache and save_kv_layer after it wrote
             the step's KV, wait_for_save, get_finished,
             get_block_ids_with_load_errors, clear_connector_metadata
             (worker);
  at the end: request_finished.

An asynchronous load (get_num_new_matched_tokens answering True) keeps the
request out of the batch until get_finished reports it, as vLLM's
WAITING_FOR_REMOTE_KVS does. Blocks reported by
get_block_ids_with_load_errors are recomputed: the step's output is dropped
and the request resumes from the first failed block (vLLM's "recompute"
policy).

Steps of one block make the arithmetic of every step independent of where
its context came from: the logits of an instance that loaded a prefix equal
(torch.equal) those of one that computed it.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

from model import TinyLM, bmm_t
from vllm_types import (CacheConfig, CachedRequestData, ForwardContext, KVCacheBlocks,
                        KVTransferConfig, ModelConfig, NewRequestData, Request, SchedulerOutput,
                        VllmConfig)

#: (step, layer) -> None, called after save_kv_layer of that layer
LayerHook = Callable[[int, int], None]


@dataclass
class Result:
    tokens: List[int]
    prefill_logits: torch.Tensor  # logits of the last prompt token
    decode_logits: torch.Tensor  # [n, vocab]
    loaded_tokens: int  # tokens the connector said it would load
    recomputed_tokens: int  # of those, tokens recomputed because their load failed
    steps: int


def vllm_config(block_size: int, extra: Dict[str, Any], role: str = "kv_both") -> VllmConfig:
    return VllmConfig(KVTransferConfig(kv_role=role, kv_connector_extra_config=dict(extra)),
                      CacheConfig(block_size), ModelConfig("tiny-llm", "float32"))


class PagedEngine:
    """One instance: the model, its paged cache, and a connector per role."""

    _ids = itertools.count()

    def __init__(self, model: TinyLM, block_size: int, num_blocks: int,
                 connector: Optional[Dict[str, Any]] = None, role: str = "kv_both"):
        cfg = model.cfg
        self.model, self.bs = model, block_size
        self.names = [f"model.layers.{i}.self_attn.attn" for i in range(cfg.n_layers)]
        self.kv = {n: torch.zeros(2, num_blocks, block_size, cfg.n_heads, cfg.head_dim)
                   for n in self.names}
        self.free = list(range(num_blocks))
        self.sched = self.worker = None
        if connector is not None:
            from maru.vllm import KVConnectorRole, MaruConnector

            vcfg = vllm_config(block_size, connector, role)
            self.sched = MaruConnector(vcfg, KVConnectorRole.SCHEDULER)
            self.worker = MaruConnector(vcfg, KVConnectorRole.WORKER)
            self.worker.register_kv_caches(self.kv)

    def close(self) -> None:
        for c in (self.sched, self.worker):
            if c is not None:
                c.shutdown()

    # --- the model over the paged cache -----------------------------------

    @torch.no_grad()
    def forward(self, tokens: Sequence[int], start: int, table: Sequence[int],
                on_saved: Optional[Callable[[int], None]] = None) -> torch.Tensor:
        """Runs ``tokens`` at positions start.. ; returns the last one's logits."""
        cfg, m, bs = self.model.cfg, self.model, self.bs
        t, end = len(tokens), start + len(tokens)
        slots = torch.tensor([table[p // bs] * bs + p % bs for p in range(end)])
        x = m.tok(torch.as_tensor(list(tokens))) + m.pos(torch.arange(start, end))
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        for layer, block in enumerate(m.blocks):
            name = self.names[layer]
            h = block.ln1(x)
            q, k, v = block.qkv(h).view(t, 3, cfg.n_heads, cfg.head_dim).permute(1, 0, 2, 3)
            if self.worker is not None:
                self.worker.wait_for_layer_load(name)  # vLLM: in the attention op
            cache = self.kv[name]
            flat_k = cache[0].view(-1, cfg.n_heads, cfg.head_dim)
            flat_v = cache[1].view(-1, cfg.n_heads, cfg.head_dim)
            flat_k[slots[start:]] = k
            flat_v[slots[start:]] = v
            keys = flat_k[slots].permute(1, 0, 2).contiguous()  # [heads, end, head_dim]
            values = flat_v[slots].permute(1, 2, 0).contiguous()  # [heads, head_dim, end]
            scores = bmm_t(q.permute(1, 0, 2), keys) * (1.0 / math.sqrt(cfg.head_dim))
            scores[:, :, start:].masked_fill_(causal, float("-inf"))
            out = bmm_t(torch.softmax(scores, dim=2), values)
            if self.worker is not None:
                self.worker.save_kv_layer(name, cache, None)
                if on_saved is not None:
                    on_saved(layer)
            x = x + block.out(out.permute(1, 0, 2).reshape(t, cfg.d_model))
            x = x + block.down(F.gelu(block.up(block.ln2(x))))
        return m.head(m.ln(x[-1:]))[0]

    # --- one request, in vLLM's order ---------------------------------------

    def generate(self, prompt: Sequence[int], n_decode: int,
                 hook: Optional[LayerHook] = None,
                 kv_transfer_params: Optional[Dict[str, Any]] = None) -> Result:
        req = Request(f"req-{next(self._ids)}", list(prompt),
                      kv_transfer_params=kv_transfer_params)
        table: List[int] = []
        loaded = 0
        try:
            if self.sched is not None:
                got, is_async = self.sched.get_num_new_matched_tokens(req, 0)
                loaded = got or 0
                self._alloc(table, loaded + min(self.bs, len(prompt) - loaded))
                self.sched.update_state_after_alloc(req, KVCacheBlocks(table), loaded)
                if is_async:
                    failed = self._wait_async(req.request_id)
                    if failed:  # resume at the first block that did not load
                        loaded = min(loaded, self.bs * min(
                            i for i, b in enumerate(table) if b in failed))
            return self._run(req, table, loaded, n_decode, hook)
        finally:
            if self.sched is not None:
                self.sched.request_finished(req, table)
            self.free.extend(table)

    def _alloc(self, table: List[int], tokens: int) -> List[int]:
        new = []
        while len(table) * self.bs < tokens:
            if not self.free:
                raise MemoryError("paged cache full")
            new.append(self.free.pop(0))
            table.append(new[-1])
        return new

    def _wait_async(self, req_id: str) -> set:
        """Steps with nothing scheduled until get_finished reports the load;
        returns the blocks that failed to load."""
        while True:
            self._step_begin(SchedulerOutput())
            _, recved = self.worker.get_finished(set())
            failed = self.worker.get_block_ids_with_load_errors()
            self.worker.clear_connector_metadata()
            if recved and req_id in recved:
                return failed

    def _step_begin(self, so: SchedulerOutput) -> None:
        meta = self.sched.build_connector_meta(so)
        self.worker.bind_connector_metadata(meta)
        self.worker.start_load_kv(ForwardContext())
        self.worker.wait_for_save()

    def _run(self, req: Request, table: List[int], loaded: int, n_decode: int,
             hook: Optional[LayerHook]) -> Result:
        prompt = req.prompt_token_ids
        computed, usable, step = loaded, loaded, 0
        first = True
        prefill = None
        while computed < len(prompt):
            n = min(self.bs, len(prompt) - computed)
            new_blocks = self._alloc(table, computed + n)
            logits, failed = self._step(req, table, first, new_blocks, computed, prompt,
                                        n, step, hook)
            step += 1
            first = False
            if failed:  # vLLM drops the step and resumes at the first failed block
                redo = min(i for i, b in enumerate(table) if b in failed) * self.bs
                usable = min(usable, redo)
                computed = redo
                continue
            computed += n
            prefill = logits
        assert prefill is not None
        tokens, decode = [], []
        cur = prefill
        for _ in range(n_decode):
            tok = int(torch.argmax(cur))
            tokens.append(tok)
            new_blocks = self._alloc(table, computed + 1)
            cur, _ = self._step(req, table, False, new_blocks, computed, [tok], 1, step, hook,
                                at=0)
            step += 1
            decode.append(cur)
            computed += 1
        return Result(tokens, prefill, torch.stack(decode) if decode else
                      torch.empty(0, self.model.cfg.vocab), loaded, loaded - usable, step)

    def _step(self, req: Request, table: List[int], first: bool, new_blocks: List[int],
              computed: int, tokens: Sequence[int], n: int, step: int,
              hook: Optional[LayerHook], at: Optional[int] = None):
        start = computed if at is None else at
        chunk = list(tokens[start:start + n])
        if self.worker is None:
            return self.forward(chunk, computed, table), set()
        so = SchedulerOutput(num_scheduled_tokens={req.request_id: n})
        if first:
            so.scheduled_new_reqs.append(NewRequestData(
                req.request_id, req.prompt_token_ids, (list(table),), computed))
        else:
            so.scheduled_cached_reqs = CachedRequestData(
                [req.request_id], set(), [(new_blocks,) if new_blocks else None], [computed])
        meta = self.sched.build_connector_meta(so)
        self.worker.bind_connector_metadata(meta)
        self.worker.start_load_kv(ForwardContext())
        on_saved = (lambda layer: hook(step, layer)) if hook is not None else None
        logits = self.forward(chunk, computed, table, on_saved)
        self.worker.wait_for_save()
        self.worker.get_finished(set())
        failed = self.worker.get_block_ids_with_load_errors()
        self.worker.clear_connector_metadata()
        return logits, failed
