"""The storage interface the model needs, and its in-memory implementation.

An engine asks three things of a KV store:
  count_prefix(keys) -> int   how many leading keys are stored (no lease)
  put(key, tensor, parent) -> bool
                              store a chunk once (first writer wins); parent
                              is the key it extends (eviction takes tails first)
  get_prefix(keys, dtype, shape) -> [View]
                              map the leading stored chunks as tensors; each
                              View holds its chunk (lease) until closed
`MemoryKVStore` keeps chunks in this process; `maru_store.MaruKVStore` keeps
them in a Maru pool that every process maps.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch


class View:
    """A tensor over a stored chunk, valid until close()."""

    def __init__(self, tensor: torch.Tensor, closer=None):
        self.tensor = tensor
        self._closer = closer

    def close(self) -> None:
        if self._closer is not None:
            closer, self._closer = self._closer, None
            closer()

    def __enter__(self) -> "View":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class KVStore:
    """Interface (and shared defaults) of a block KV store."""

    def count_prefix(self, keys: Sequence[str]) -> int:
        raise NotImplementedError

    def put(self, key: str, tensor: torch.Tensor, parent: Optional[str] = None) -> bool:
        """Stores `tensor` under `key`; False if the key exists or there is no room."""
        raise NotImplementedError

    def get(self, key: str, dtype: torch.dtype, shape) -> Optional[View]:
        raise NotImplementedError

    def put_many(self, items: Sequence) -> int:
        """Stores (key, tensor, parent) triples; returns how many were stored."""
        return sum(1 for key, t, parent in items if self.put(key, t, parent))

    def get_prefix(self, keys: Sequence[str], dtype: torch.dtype, shape) -> List[View]:
        """Views of the longest stored prefix of `keys` (it may be shorter than
        count_prefix said: chunks can be evicted in between)."""
        views = []
        for key in keys:
            view = self.get(key, dtype, shape)
            if view is None:
                break
            views.append(view)
        return views

    def close(self) -> None:
        pass


class MemoryKVStore(KVStore):
    """Chunks in this process's memory: the baseline reuse path (no sharing)."""

    def __init__(self):
        self.chunks: Dict[str, torch.Tensor] = {}

    def count_prefix(self, keys: Sequence[str]) -> int:
        n = 0
        while n < len(keys) and keys[n] in self.chunks:
            n += 1
        return n

    def put(self, key: str, tensor: torch.Tensor, parent: Optional[str] = None) -> bool:
        if key in self.chunks:
            return False
        self.chunks[key] = tensor.detach().clone().contiguous()
        return True

    def get(self, key: str, dtype: torch.dtype, shape) -> Optional[View]:
        t = self.chunks.get(key)
        if t is None:
            return None
        return View(t.view(dtype).view(shape))
