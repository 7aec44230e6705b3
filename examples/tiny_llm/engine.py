"""One inference instance: reuse stored prompt blocks, compute the rest, store it.

serve() is what an engine's KV connector does around a request: look up how
many leading blocks of the prompt are stored, map them as tensors, prefill
only the remaining tokens, store the prompt's new complete blocks, then
decode greedily.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import torch

from blocks import Layout, chain_keys
from kvstore import KVStore
from model import TinyLM


@dataclass
class Result:
    tokens: List[int]            # greedily decoded tokens
    prefill_logits: torch.Tensor  # logits of the last prompt token
    decode_logits: torch.Tensor   # [n, vocab]: logits after each decoded token
    hit_blocks: int               # leading blocks reused from the store
    stored_blocks: int            # blocks this request stored
    ttft_s: float                 # request start to first token chosen
    fetch_s: float                # of which finding and mapping stored KV
    store_s: float = 0.0          # storing the new blocks, after the first token
    prefix_views: List[torch.Tensor] = field(default_factory=list)


class Instance:
    def __init__(self, model: TinyLM, store: Optional[KVStore], block_tokens: int = 32,
                 layout: str = "block"):
        self.model, self.store = model, store
        self.layout = Layout(model.cfg, block_tokens, layout)

    def block_keys(self, prompt: Sequence[int]) -> List[str]:
        return chain_keys(self.model.cfg.tag(), prompt, self.layout.block_tokens)

    def serve(self, prompt: Sequence[int], n_decode: int, store: bool = True,
              reuse: bool = True, keep_views: bool = False) -> Result:
        """Runs one request. store: store the prompt's new blocks; reuse: look
        for stored blocks (False: recompute everything); keep_views: return
        the mapped prefix tensors too (layer 0's K), to check where they lie."""
        with contextlib.ExitStack() as leases:
            t0 = time.perf_counter()
            cache = self.model.new_cache(len(prompt) + n_decode)
            keys = self.block_keys(prompt)
            hits = self._attach_prefix(keys, len(prompt), cache, leases) if reuse else 0
            fetched = time.perf_counter()
            logits = self.model.forward(prompt[len(cache):], cache)
            first = int(torch.argmax(logits))
            ttft = time.perf_counter() - t0
            stored = self._store_new(keys, hits, cache) if store and self.store else 0
            store_s = time.perf_counter() - t0 - ttft
            tokens, decode = self.model.greedy(logits, cache, n_decode)
            assert not tokens or tokens[0] == first
            views = [kv[0] for kv in cache.prefix[0]] if keep_views else []
            return Result(tokens, logits, decode, hits, stored, ttft, fetched - t0, store_s,
                          views)

    def _attach_prefix(self, keys: List[str], prompt_len: int, cache, leases) -> int:
        """Maps the stored leading blocks into `cache`; returns how many."""
        if self.store is None or not keys:
            return 0
        lay = self.layout
        per = lay.chunks_per_block
        chunk_keys = lay.chunk_keys(keys)
        counted = self.store.count_prefix(chunk_keys) // per
        # Leave at least one prompt token to compute: its logits start decoding.
        # (A fully cached prompt recomputes its last block.)
        if counted * lay.block_tokens >= prompt_len:
            counted -= 1
        if counted == 0:
            return 0
        views = self.store.get_prefix(chunk_keys[:counted * per], lay.dtype, lay.shape)
        for v in views:
            leases.callback(v.close)
        blocks = len(views) // per  # fewer if evicted since counted
        for b in range(blocks):
            lay.attach(cache, [v.tensor for v in views[b * per:(b + 1) * per]])
        return blocks

    def _store_new(self, keys: List[str], hits: int, cache) -> int:
        """Stores blocks hits.. of the prompt, each chunk extending the one before."""
        lay = self.layout
        if hits >= len(keys):
            return 0
        chunk_keys = lay.chunk_keys(keys)
        per = lay.chunks_per_block
        items = []
        for b in range(hits, len(keys)):
            for j, tensor in enumerate(lay.pack(cache, b)):
                at = b * per + j
                items.append((chunk_keys[at], tensor, chunk_keys[at - 1] if at else None))
        return self.store.put_many(items) // per
