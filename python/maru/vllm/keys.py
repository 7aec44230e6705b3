"""Chunk names of the vLLM connector: a hash chain over blocks of tokens.

A chunk holds ``chunk_tokens`` consecutive prompt tokens (``chunk_blocks``
vLLM blocks). Its key names the whole prefix up to its end, as vLLM names
its own blocks: ``key_i = blake2b-128(key_{i-1} || tokens of chunk i)``
with ``key_{-1}`` the tag of the model and cache layout, so that equal keys
mean equal KV and two models (or two tensor-parallel layouts) never share.

The connector hashes the tokens itself instead of using vLLM's
``request.block_hashes``: vLLM seeds those with a per-process random value
unless ``PYTHONHASHSEED`` is set, so two instances would not agree.
"""

from __future__ import annotations

import hashlib
import struct
from typing import List, Sequence

from ..keys import check_namespace


def model_tag(model: str, dtype: str, block_size: int, chunk_blocks: int, tp_size: int,
              pp_size: int = 1, cache_dtype: str = "auto", mla: bool = False) -> bytes:
    """The chain's seed: what must be equal for two instances to share KV.
    (The pipeline size, a cache dtype other than the model's and MLA are
    named only when set, so other chunks keep their names.)"""
    tag = f"maru-vllm-v1|{model}|{dtype}|bs{block_size}|g{chunk_blocks}|tp{tp_size}"
    if pp_size != 1:
        tag += f"|pp{pp_size}"
    if cache_dtype not in ("auto", dtype):
        tag += f"|kv{cache_dtype}"
    if mla:
        tag += "|mla"
    return tag.encode()


def chain_keys(tag: bytes, tokens: Sequence[int], chunk_tokens: int) -> List[str]:
    """Hex keys of the complete chunks of ``tokens``, each chained to the one before."""
    keys: List[str] = []
    prev = tag
    for start in range(0, len(tokens) - chunk_tokens + 1, chunk_tokens):
        block = tokens[start:start + chunk_tokens]
        h = hashlib.blake2b(prev, digest_size=16)
        h.update(struct.pack(f"<{len(block)}q", *block))
        keys.append(h.hexdigest())
        prev = h.digest()
    return keys


def base_paths(namespace: str, keys: Sequence[str]) -> List[str]:
    """``/<namespace>/<key>``: a chunk's name before a rank names its part of it."""
    base = check_namespace(namespace)
    return [f"{base}/{k}" for k in keys]


def rank_path(base: str, tp_rank: int = 0, pp_rank: int = 0) -> str:
    """The pool path of the KV that tensor-parallel rank ``tp_rank`` of
    pipeline stage ``pp_rank`` holds of chunk ``base``:
    ``<base>.r<tp>`` (stage 0), ``<base>.r<tp>.p<pp>``."""
    return f"{base}.r{tp_rank}" + (f".p{pp_rank}" if pp_rank else "")


def chunk_paths(namespace: str, keys: Sequence[str], tp_rank: int = 0,
                pp_rank: int = 0) -> List[str]:
    """The pool paths of ``keys`` for one rank (:func:`rank_path`)."""
    return [rank_path(b, tp_rank, pp_rank) for b in base_paths(namespace, keys)]
