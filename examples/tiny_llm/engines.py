"""The engines' sides of the connectors, as SGLang and LMCache drive them.

Neither engine can be installed here, so this file plays their parts on the
tiny model, with the data structures and call sequences the connectors see
inside them (see docs/integrations.md):

- SGLang HiCache: a host KV pool (`HostKVPool`, SGLang's
  MHATokenToKVPoolHost: `kv_buffer` in the layer_first or page_first
  layout, `get_page_buffer_meta`), the backup path (`hicache_save`:
  device KV -> host pool -> `batch_exists`, `batch_set_v1`) and the
  prefetch path (`hicache_load`: `batch_exists`, `batch_get_v1` into the
  host pool -> the model's cache).
- LMCache: chunks of `chunk_size` tokens in the KV_2LTD format
  ([2, layers, tokens, heads*head_dim]), keys with `to_string()`, the store
  path (`lmcache_save`: `batched_contains`, `batched_allocate`, write,
  `batched_submit_put_task`) and the retrieve path (`lmcache_load`:
  `batched_contains(pin=True)`, `batched_get_blocking`, views into the
  pool attached to the cache, `batched_unpin`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch

from blocks import chain_keys
from model import Config, KVCache, TinyLM

LAYOUTS = ("layer_first", "page_first")


class HostKVPool:
    """SGLang's MHA host KV pool: what HiCache storage backends use of it."""

    def __init__(self, cfg: Config, size: int, page_size: int, layout: str):
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r}: one of {LAYOUTS}")
        self.layer_num, self.head_num, self.head_dim = cfg.n_layers, cfg.n_heads, cfg.head_dim
        self.size, self.page_size, self.layout = size, page_size, layout
        self.dtype = torch.float32
        dims = ((2, self.layer_num, size, self.head_num, self.head_dim) if layout == "layer_first"
                else (2, size, self.layer_num, self.head_num, self.head_dim))
        self.kv_buffer = torch.zeros(dims, dtype=self.dtype)
        self.free_slots = torch.arange(size, dtype=torch.int64)

    def alloc(self, n: int) -> torch.Tensor:
        assert n <= len(self.free_slots), "host pool full"
        got, self.free_slots = self.free_slots[:n], self.free_slots[n:]
        return got

    def _token_bytes(self) -> int:
        return self.head_num * self.head_dim * self.kv_buffer.element_size()

    def get_page_buffer_meta(self, indices: torch.Tensor) -> Tuple[List[int], List[int]]:
        """Per page, the (address, length) pieces of its K and V, as SGLang's
        MHATokenToKVPoolHost lists them: layer_first, each layer's K then V
        (strided over the buffer); page_first, all layers' K then V."""
        assert len(indices) % self.page_size == 0
        base, tok = self.kv_buffer.data_ptr(), self._token_bytes()
        v_offset = self.layer_num * self.size * tok
        ptrs: List[int] = []
        if self.layout == "layer_first":
            for i in range(0, len(indices), self.page_size):
                for layer in range(self.layer_num):
                    k = base + (layer * self.size + int(indices[i])) * tok
                    ptrs += [k, k + v_offset]
            return ptrs, [self.page_size * tok] * len(ptrs)
        for i in range(0, len(indices), self.page_size):
            k = base + int(indices[i]) * self.layer_num * tok
            ptrs += [k, k + v_offset]
        return ptrs, [self.page_size * self.layer_num * tok] * len(ptrs)

    def _kv(self, which: int, layer: int, slots: torch.Tensor) -> torch.Tensor:
        if self.layout == "layer_first":
            return self.kv_buffer[which, layer, slots]
        return self.kv_buffer[which, slots, layer]

    def backup(self, cache: KVCache, start: int, slots: torch.Tensor) -> None:
        """Device -> host: the cache's own KV of tokens [start, start+len(slots))."""
        for layer in range(self.layer_num):
            k, v = cache.own_range(start, start + len(slots), layer)
            for which, t in ((0, k), (1, v)):
                if self.layout == "layer_first":
                    self.kv_buffer[which, layer, slots] = t.permute(1, 0, 2)
                else:
                    self.kv_buffer[which, slots, layer] = t.permute(1, 0, 2)

    def load(self, cache: KVCache, slots: torch.Tensor) -> None:
        """Host -> device: page by page, as segments of the cache (copies)."""
        for p in range(0, len(slots), self.page_size):
            page = slots[p:p + self.page_size]
            cache.add_prefix([tuple(self._kv(w, layer, page).permute(1, 0, 2).contiguous()
                                    for w in (0, 1)) for layer in range(self.layer_num)])


def sglang_config(cfg: Config, tp_rank: int = 0, tp_size: int = 1, namespace: str = "sglang",
                  server: Optional[str] = None, layout: str = "page_first") -> dict:
    """HiCacheStorageConfig's fields, as SGLang fills them for one TP worker."""
    return dict(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
                attn_cp_size=1, is_mla_model=False, enable_storage_metrics=False,
                is_page_first_layout=layout == "page_first", model_name=cfg.tag(),
                extra_config={"maru_server": server, "maru_namespace": namespace})


def page_keys(model: TinyLM, prompt: Sequence[int], page: int) -> List[str]:
    """SGLang's page hashes: each chained to the one before."""
    return chain_keys(model.cfg.tag(), prompt, page)


def hicache_save(model: TinyLM, storage, pool: HostKVPool, prompt: Sequence[int]) -> int:
    """Prefill, back the prompt's pages up to the host pool, then to storage
    (only the pages storage lacks). Returns the pages stored."""
    cache = model.new_cache(len(prompt))
    model.forward(prompt, cache)
    keys = page_keys(model, prompt, pool.page_size)
    have = storage.batch_exists(keys)
    slots = pool.alloc(len(keys) * pool.page_size)
    pool.backup(cache, 0, slots)
    done = storage.batch_set_v1(keys[have:], slots[have * pool.page_size:])
    return sum(done)


@dataclass
class Served:
    hits: int
    prefill_logits: torch.Tensor
    decode_logits: torch.Tensor
    tokens: List[int]


def hicache_load(model: TinyLM, storage, pool: HostKVPool, prompt: Sequence[int],
                 n_decode: int) -> Served:
    """HiCache prefetch: count the stored leading pages, load them into the
    host pool, then host -> cache; compute the rest and decode."""
    page = pool.page_size
    keys = page_keys(model, prompt, page)[:(len(prompt) - 1) // page]  # one token computed
    n = storage.batch_exists(keys)
    slots = pool.alloc(n * page)
    ok = storage.batch_get_v1(keys[:n], slots) if n else []
    hits = ok.index(False) if False in ok else len(ok)
    cache = model.new_cache(len(prompt) + n_decode)
    pool.load(cache, slots[:hits * page])
    return _finish(model, cache, prompt, hits, n_decode)


def _finish(model: TinyLM, cache: KVCache, prompt, hits: int, n_decode: int) -> Served:
    logits = model.forward(prompt[len(cache):], cache)
    tokens, decode = model.greedy(logits, cache, n_decode)
    return Served(hits, logits, decode, tokens)


# --- LMCache ------------------------------------------------------------------


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


def hicache_twin(model: TinyLM, prompt: Sequence[int], page: int, hits: int, layout: str,
                 n_decode: int, source: Optional[Sequence[int]] = None) -> Served:
    """The same request reusing `hits` pages this process computed, through
    its own host pool: no store. `source`: the prompt whose prefill made
    those pages (default `prompt`; products of other shapes round apart)."""
    source = prompt if source is None else source
    full = model.new_cache(len(source))
    model.forward(source, full)
    pool = HostKVPool(model.cfg, max(page, hits * page), page, layout)
    slots = pool.alloc(hits * page)
    pool.backup(full, 0, slots)
    cache = model.new_cache(len(prompt) + n_decode)
    pool.load(cache, slots)
    return _finish(model, cache, prompt, hits, n_decode)
