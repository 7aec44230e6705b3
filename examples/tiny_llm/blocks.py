"""Prompt blocks: hash-chain keys and the two chunk layouts.

A block is `block_tokens` consecutive prompt tokens. Its key names the whole
prefix up to and including it, as vLLM and SGLang name blocks:
key_i = H(key_{i-1}, tokens of block i), with key_{-1} the model's tag, so
equal keys mean equal KV. Only complete blocks get keys.

Layouts of a block's KV in the store:
  "block": one chunk per block, [layers, 2, heads, block_tokens, head_dim]
  "layer": one chunk per layer per block, [2, heads, block_tokens, head_dim]
           under key + ".l<layer>"
"""
from __future__ import annotations

import hashlib
import struct
from typing import List, Sequence

import torch

from model import Config, KVCache

LAYOUTS = ("block", "layer")


def chain_keys(tag: str, tokens: Sequence[int], block_tokens: int) -> List[str]:
    """Hex keys of the complete blocks of `tokens`, each chained to the one before."""
    keys, prev = [], tag.encode()
    for start in range(0, len(tokens) - block_tokens + 1, block_tokens):
        block = tokens[start:start + block_tokens]
        h = hashlib.blake2b(prev, digest_size=16)
        h.update(struct.pack(f"<{len(block)}i", *block))
        keys.append(h.hexdigest())
        prev = h.digest()
    return keys


class Layout:
    """How one block's KV is split into chunks, and how chunks become a cache."""

    def __init__(self, cfg: Config, block_tokens: int, kind: str = "block"):
        if kind not in LAYOUTS:
            raise ValueError(f"layout {kind!r}: one of {LAYOUTS}")
        self.cfg, self.block_tokens, self.kind = cfg, block_tokens, kind
        per = (2, cfg.n_heads, block_tokens, cfg.head_dim)
        self.shape = (cfg.n_layers,) + per if kind == "block" else per
        self.dtype = torch.float32

    @property
    def chunks_per_block(self) -> int:
        return 1 if self.kind == "block" else self.cfg.n_layers

    @property
    def chunk_bytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.finfo(self.dtype).bits // 8

    def chunk_keys(self, block_keys: Sequence[str]) -> List[str]:
        """The store keys of the blocks, in order (all of a block's before the next)."""
        if self.kind == "block":
            return list(block_keys)
        return [f"{k}.l{layer}" for k in block_keys for layer in range(self.cfg.n_layers)]

    def pack(self, cache: KVCache, block: int) -> List[torch.Tensor]:
        """The chunk tensors of block `block` of what `cache` computed itself."""
        start = block * self.block_tokens
        per_layer = [torch.stack(cache.own_range(start, start + self.block_tokens, layer))
                     for layer in range(self.cfg.n_layers)]
        return [torch.stack(per_layer)] if self.kind == "block" else per_layer

    def attach(self, cache: KVCache, chunks: Sequence[torch.Tensor]) -> None:
        """Adds one block's chunk views to `cache` as a borrowed segment (no copy)."""
        if self.kind == "block":
            (t,) = chunks
            cache.add_prefix([(t[layer, 0], t[layer, 1]) for layer in range(self.cfg.n_layers)])
        else:
            cache.add_prefix([(t[0], t[1]) for t in chunks])
