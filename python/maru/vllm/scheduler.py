"""The scheduler side of the connector: what to load and what to save.

vLLM's scheduler (v1/core/sched/scheduler.py:Scheduler.schedule at the
pinned commit) calls, for a waiting request: ``get_num_new_matched_tokens
(request, L)`` with ``L`` the tokens vLLM's own prefix cache already holds
(block-aligned; side-effect free, may be called again), then, once the
blocks are allocated, ``update_state_after_alloc(request, blocks, n)`` with
``n`` the external tokens to load, **before** it sets
``request.num_computed_tokens`` (still 0 there): so the loads start at the
``L`` remembered from the first call, never at that field. Then
``build_connector_meta`` once per step and ``request_finished`` at the end.

A request may carry a retention hint for its chunks in vLLM's
``kv_transfer_params`` (``sampling_params.extra_args["kv_transfer_params"]``,
the OpenAI server's request field of that name):
``{"maru_retain": "keep"}`` while its conversation is open, ``"drop"``
once the front end knows it ended, ``"none"`` to forget an earlier one.
When the request ends, every chunk of its prompt (every rank's, the loaded
prefix too) gets that hint in one round trip per ``maru.BATCH_MAX`` chunks
(docs/integrations.md#retention-hints).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..client import Hint
from .config import ConnectorConfig
from .keys import base_paths, chain_keys, model_tag, rank_path
from .metadata import ChunkSpec, LoadSpec, MaruConnectorMetadata, SaveSpec
from .store import ChunkStore

logger = logging.getLogger(__name__)

#: Values of ``kv_transfer_params["maru_retain"]`` and the hints they give.
RETAIN_HINTS = {"keep": Hint.KEEP, "drop": Hint.DROP, "none": Hint.NONE}


@dataclass
class _Request:
    paths: List[str]  # base paths of the prompt's complete chunks
    hits: int = 0  # chunks found by the last count
    local: Optional[int] = None  # vLLM's own prefix-cache hit at the last count
    block_ids: List[int] = field(default_factory=list)
    saved: int = 0  # chunks [0, saved) are stored, being stored or loaded


def _tokens(request: Any) -> List[int]:
    return list(getattr(request, "prompt_token_ids", None) or [])


class SchedulerSide:
    """Scheduler-side state: the prompt's chunk names and what is done with them."""

    def __init__(self, cfg: ConnectorConfig, store: ChunkStore) -> None:
        self.cfg, self.store = cfg, store
        self.tag = model_tag(cfg.model, cfg.dtype, cfg.block_size, cfg.chunk_blocks,
                             cfg.tp_size, cfg.pp_size, cfg.cache_dtype, cfg.mla)
        self.requests: Dict[str, _Request] = {}
        self.pending_loads: List[LoadSpec] = []
        self.hinted = 0  # chunks whose retention hint the server accepted
        self.stats: Dict[str, int] = {"lookups": 0, "hit_tokens": 0}

    def _state(self, req_id: str, tokens: Sequence[int]) -> _Request:
        st = self.requests.get(req_id)
        if st is None:
            st = self.requests[req_id] = _Request(self._paths(tokens))
        return st

    def _paths(self, tokens: Sequence[int]) -> List[str]:
        return base_paths(self.cfg.namespace,
                          chain_keys(self.tag, tokens, self.cfg.chunk_tokens))

    def every_rank(self, paths: Sequence[str]) -> List[str]:
        """Each chunk's path for every rank that holds part of it, chunk by chunk."""
        ranks = self.cfg.ranks()
        return [rank_path(p, tp, pp) for p in paths for tp, pp in ranks]

    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        """Tokens beyond ``num_computed_tokens`` (vLLM's own prefix-cache
        hit) that can be loaded: the chunks of the prompt found in the pool
        for every rank, from the start, never the whole prompt (its last
        token is computed for its logits)."""
        tokens = _tokens(request)
        if not self.cfg.load or not tokens:
            return 0, False
        st = self._state(request.request_id, tokens)
        st.local = num_computed_tokens
        loadable = (len(tokens) - 1) // self.cfg.chunk_tokens
        ranks = len(self.cfg.ranks())
        found = self.store.count(self.every_rank(st.paths[:loadable]), self.cfg.count_writing)
        st.hits = found // ranks
        self.stats["lookups"] += 1
        external = st.hits * self.cfg.chunk_tokens - num_computed_tokens
        if external <= 0:
            return 0, False
        self.stats["hit_tokens"] += external
        return external, self.cfg.async_load

    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None:
        """Records the request's blocks and, if it loads, the chunks to load:
        tokens [L, L + num_external_tokens), L the prefix-cache hit given to
        get_num_new_matched_tokens (blocks before L hold vLLM's own KV and
        are left alone)."""
        st = self._state(request.request_id, _tokens(request))
        block_ids = blocks.get_block_ids()[0] if blocks is not None else []
        if block_ids:
            st.block_ids = list(block_ids)
        st.saved = max(st.saved, st.hits)  # found in the pool: nothing to store
        if num_external_tokens <= 0:
            return
        bs, g = self.cfg.block_size, self.cfg.chunk_blocks
        start = st.local if st.local is not None else \
            int(getattr(request, "num_computed_tokens", 0) or 0)
        first_block, end_block = start // bs, (start + num_external_tokens) // bs
        chunks = []
        for c in range(first_block // g, -(-end_block // g)):
            lo, hi = max(c * g, first_block), min((c + 1) * g, end_block)
            chunks.append(ChunkSpec(st.paths[c], st.block_ids[lo:hi], skip=lo - c * g))
        # Sent with the next step's metadata, whether or not the request is
        # scheduled in it (an asynchronous load waits outside the batch).
        self.pending_loads.append(LoadSpec(request.request_id, chunks, self.cfg.async_load))
        st.saved = max(st.saved, -(-end_block // g))

    def build_connector_meta(self, scheduler_output: Any) -> MaruConnectorMetadata:
        """The loads and saves of this step; resets the pending loads."""
        meta = MaruConnectorMetadata(loads=self.pending_loads)
        self.pending_loads = []
        preempted = getattr(scheduler_output, "preempted_req_ids", None) or ()
        meta.preempted = sorted(preempted)
        for req_id in preempted:  # its blocks are freed; it resumes with new ones
            st = self.requests.get(req_id)
            if st is not None:
                st.block_ids = []
        try:
            self._plan_saves(meta, scheduler_output)
        except Exception:  # a save not planned is a later miss, never an error
            logger.exception("maru.vllm: saves of this step not planned")
            meta.saves = []
        for req_id in getattr(scheduler_output, "finished_req_ids", ()) or ():
            self.requests.pop(req_id, None)
        return meta

    def _plan_saves(self, meta: MaruConnectorMetadata, scheduler_output: Any) -> None:
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            st = self._state(new.req_id, list(new.prompt_token_ids or []))
            st.block_ids = list(new.block_ids[0])
            self._plan(meta, new.req_id, st,
                       new.num_computed_tokens + scheduled.get(new.req_id, 0))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            st = self.requests.get(req_id)
            if st is None:
                continue
            new_ids = cached.new_block_ids[i]
            if new_ids is not None:
                if _resumed(cached, i, req_id):
                    st.block_ids = list(new_ids[0])  # a preempted request starts over
                else:
                    st.block_ids.extend(new_ids[0])
            self._plan(meta, req_id, st,
                       cached.num_computed_tokens[i] + scheduled.get(req_id, 0))

    def _plan(self, meta: MaruConnectorMetadata, req_id: str, st: _Request,
              computed_after: int) -> None:
        g = self.cfg.chunk_blocks
        if not self.cfg.save:
            return
        done = min(computed_after // self.cfg.chunk_tokens, len(st.paths),
                   len(st.block_ids) // g)
        if done > st.saved:
            meta.saves.append(SaveSpec(req_id, [
                ChunkSpec(st.paths[c], st.block_ids[c * g:(c + 1) * g],
                          st.paths[c - 1] if c else None)
                for c in range(st.saved, done)]))
            st.saved = done

    def request_finished(self, request: Any, block_ids: Sequence[int]) -> Tuple[bool, None]:
        """Gives the request's chunks its retention hint, if it carries one,
        and forgets it. Saves copy out of the blocks before the step ends,
        so the blocks may be freed at once: (False, None)."""
        st = self.requests.pop(request.request_id, None)
        hint = retain_hint(request)
        if hint is not None:
            self._hint(request, st, hint)
        return False, None

    def _hint(self, request: Any, st: Optional[_Request], hint: Hint) -> None:
        try:
            paths = st.paths if st is not None else self._paths(_tokens(request))
            self.hinted += self.store.hint(self.every_rank(paths), hint)
        except Exception as e:  # advisory: never raised into vLLM's scheduler
            logger.warning("maru.vllm: retention hint not given: %s", e)


def retain_hint(request: Any) -> Optional[Hint]:
    """The hint ``request`` asks for in ``kv_transfer_params["maru_retain"]``;
    None if it asks for none (absent or null), or for one that is not in
    :data:`RETAIN_HINTS` (logged: a request is never failed for it)."""
    params = getattr(request, "kv_transfer_params", None)
    value = params.get("maru_retain") if isinstance(params, dict) else None
    if value is None:  # absent, or JSON null
        return None
    hint = RETAIN_HINTS.get(value) if isinstance(value, str) else None
    if hint is None:
        logger.warning("maru.vllm: request %s: maru_retain %.40r is not one of %s; no hint",
                       getattr(request, "request_id", "?"), value, ", ".join(RETAIN_HINTS))
    return hint


def _resumed(cached: Any, i: int, req_id: str) -> bool:
    resumed = getattr(cached, "resumed_req_ids", None)  # newer vLLM: a set
    if resumed is not None:
        return req_id in resumed
    flags = getattr(cached, "resumed_from_preemption", None)  # older: a list
    return bool(flags[i]) if flags is not None else False
