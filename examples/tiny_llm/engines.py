"""LMCache's side of the maru.lmcache connector, as LMCache drives a backend.

LMCache cannot be installed here, so this file plays its part on the tiny
model, with the data structures and call sequence the connector sees inside
it (see docs/integrations.md): chunks of `chunk_size` tokens in the KV_2LTD
format ([2, layers, tokens, heads*head_dim]), keys with `to_string()`, the
store path (`lmcache_save`: `batched_contains`, `batched_allocate`, write,
`batched_submit_put_task`) and the retrieve path (`lmcache_load`:
`batched_contains(pin=True)`, `batched_get_blocking`, views into the pool
attached to the cache, `batched_unpin`). SGLang's side is sglang_engine.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch

from blocks import chain_keys
from model import Config, KVCache, TinyLM


@dataclass
class Served:
    hits: int
    prefill_logits: torch.Tensor
    decode_logits: torch.Tensor
    tokens: List[int]


def _finish(model: TinyLM, cache: KVCache, prompt, hits: int, n_decode: int) -> Served:
    logits = model.forward(prompt[len(cache):], cache)
    tokens, decode = model.greedy(logits, cache, n_decode)
    return Served(hits, logits, decode, tokens)



class CacheEngineKey:
    """LMCache's key: fmt@model@world_size@worker_id@chunk_hash."""

    def __init__(self, model: str, world_size: int, worker_id: int, chunk_hash: str):
        self.model, self.world_size, self.worker_id, self.chunk_hash = (
            model, world_size, worker_id, chunk_hash)

    def to_string(self) -> str:
        return f"vllm@{self.model}@{self.world_size}@{self.worker_id}@{self.chunk_hash}"

    def with_new_worker_id(self, worker_id: int) -> "CacheEngineKey":
        return CacheEngineKey(self.model, self.world_size, worker_id, self.chunk_hash)

    def __eq__(self, other) -> bool:
        return isinstance(other, CacheEngineKey) and self.to_string() == other.to_string()

    def __hash__(self) -> int:
        return hash(self.to_string())


def lmcache_metadata(cfg: Config, chunk_size: int) -> dict:
    """LMCacheMetadata's fields: one KV_2LTD tensor per chunk."""
    return dict(shapes=[torch.Size([2, cfg.n_layers, chunk_size, cfg.d_model])],
                dtypes=[torch.float32], chunk_size=chunk_size, use_mla=False,
                world_size=1, worker_id=0)


def lmcache_keys(model: TinyLM, prompt: Sequence[int], chunk: int) -> List[CacheEngineKey]:
    """Keys of the prompt's chunks, the last one partial if the prompt ends mid-chunk."""
    hashes = chain_keys(model.cfg.tag(), prompt, chunk)
    if len(prompt) % chunk:
        tail = chain_keys(hashes[-1] if hashes else model.cfg.tag(),
                          prompt[len(hashes) * chunk:], len(prompt) % chunk)
        hashes += tail
    return [CacheEngineKey(model.cfg.tag(), 1, 0, h) for h in hashes]


def pack_2ltd(cache: KVCache, start: int, end: int, out: torch.Tensor) -> None:
    """Writes the cache's KV of tokens [start, end) into a KV_2LTD tensor."""
    for layer in range(out.shape[1]):
        k, v = cache.own_range(start, end, layer)
        out[0, layer] = k.permute(1, 0, 2).reshape(end - start, -1)
        out[1, layer] = v.permute(1, 0, 2).reshape(end - start, -1)


def attach_2ltd(cache: KVCache, t: torch.Tensor, heads: int) -> None:
    """A KV_2LTD chunk as one cache segment: views, no copy."""
    tokens = t.shape[2]
    cache.add_prefix([tuple(t[w, layer].view(tokens, heads, -1).permute(1, 0, 2)
                            for w in (0, 1)) for layer in range(t.shape[1])])


def lmcache_save(model: TinyLM, backend, prompt: Sequence[int], chunk: int) -> int:
    """LMCache store: skip the stored prefix, allocate in the backend, write
    the KV there, submit the puts, wait. Returns the chunks stored."""
    cache = model.new_cache(len(prompt))
    model.forward(prompt, cache)
    keys = lmcache_keys(model, prompt, chunk)
    have = backend.batched_contains(keys)
    stored = 0
    for i in range(have, len(keys)):
        start, end = i * chunk, min((i + 1) * chunk, len(prompt))
        shape = torch.Size([2, model.cfg.n_layers, end - start, model.cfg.d_model])
        objs = backend.batched_allocate(shape, torch.float32, 1)
        if objs is None:
            break  # the pool is full of what cannot be evicted
        pack_2ltd(cache, start, end, objs[0].tensor)
        futures = backend.batched_submit_put_task([keys[i]], objs)
        stored += len(futures[0].result()) if futures else 0
        for obj in objs:
            obj.ref_count_down()  # the storage manager's reference
    return stored


def lmcache_load(model: TinyLM, backend, prompt: Sequence[int], chunk: int,
                 n_decode: int, keep_views: bool = False) -> Served:
    """LMCache retrieve: pin the stored prefix, get it (views into the pool),
    use it in place, unpin."""
    keys = lmcache_keys(model, prompt, chunk)[:(len(prompt) - 1) // chunk]
    n = backend.batched_contains(keys, pin=True)
    objs = backend.batched_get_blocking(keys[:n])
    hits = next((i for i, o in enumerate(objs) if o is None), len(objs))
    cache = model.new_cache(len(prompt) + n_decode)
    for obj in objs[:hits]:
        attach_2ltd(cache, obj.tensor, model.cfg.n_heads)
    served = _finish(model, cache, prompt, hits, n_decode)
    backend.batched_unpin(keys[:n])
    if keep_views:
        served.objs = objs[:hits]
    else:
        for obj in objs[:hits]:
            obj.ref_count_down()
    return served


def lmcache_twin(model: TinyLM, prompt: Sequence[int], chunk: int, hits: int,
                 n_decode: int, source: Optional[Sequence[int]] = None) -> Served:
    """The same request reusing `hits` chunks of KV this process computed and
    keeps in its own memory, in the same format and views: no store.
    `source`: the prompt whose prefill made them (default `prompt`)."""
    source = prompt if source is None else source
    full = model.new_cache(len(source))
    model.forward(source, full)
    cache = model.new_cache(len(prompt) + n_decode)
    for i in range(hits):
        t = torch.empty(2, model.cfg.n_layers, chunk, model.cfg.d_model)
        pack_2ltd(full, i * chunk, (i + 1) * chunk, t)
        attach_2ltd(cache, t, model.cfg.n_heads)
    return _finish(model, cache, prompt, hits, n_decode)
