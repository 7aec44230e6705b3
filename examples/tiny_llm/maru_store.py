"""KVStore over a Maru pool, with the `maru` package (libmaru_direct).

Chunks are files /<directory>/<key> of the pool. A stored block is written
once into pool memory (create, copy, seal: first writer wins) and then read
by every process in place: get_prefix() returns tensors whose storage is the
chunk in the shared mapping. Batches go to the server in one round trip
each: count_prefix, create_batch, seal_batch, lookup_prefix.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from kvstore import KVStore, View


class MaruKVStore(KVStore):
    def __init__(self, server: Optional[str], directory: str = "/tiny_llm",
                 instance: Optional[str] = None):
        import maru  # the package is built by meson (PYTHONPATH=build/python)

        self.client = maru.Client(server, instance=instance)
        self.dir = "/" + directory.strip("/")

    def path(self, key: str) -> str:
        return f"{self.dir}/{key}"

    def count_prefix(self, keys: Sequence[str]) -> int:
        return self.client.count_prefix([self.path(k) for k in keys]) if keys else 0

    def put(self, key: str, tensor: torch.Tensor, parent: Optional[str] = None) -> bool:
        return self.put_many([(key, tensor, parent)]) == 1

    def put_many(self, items: Sequence) -> int:
        """Creates all chunks in one round trip, copies, seals all in one.
        A chunk that exists already (another instance stored it first) or
        finds no room is skipped; its block is simply not stored twice."""
        if not items:
            return 0
        made = self.client.create_batch(
            [self.path(k) for k, _, _ in items],
            [t.numel() * t.element_size() for _, t, _ in items],
            parents=[self.path(p) if p else None for _, _, p in items])
        filled = []
        for chunk, (_, tensor, _) in zip(made, items):
            if isinstance(chunk, OSError):
                continue
            chunk.torch(tensor.dtype, tensor.shape).copy_(tensor)
            filled.append(chunk)
        errors = self.client.seal_batch(filled) if filled else []
        for chunk in filled:
            chunk.release()
        return sum(1 for e in errors if e is None)

    def get(self, key: str, dtype: torch.dtype, shape) -> Optional[View]:
        views = self.get_prefix([key], dtype, shape)
        return views[0] if views else None

    def get_prefix(self, keys: Sequence[str], dtype: torch.dtype, shape) -> List[View]:
        chunks = self.client.lookup_prefix([self.path(k) for k in keys]) if keys else []
        views = []
        for chunk in chunks:
            view = View(chunk.torch(dtype, shape), chunk.release)
            view.chunk = chunk  # where the bytes lie: chunk.data_ptr, chunk.size
            views.append(view)
        return views

    def close(self) -> None:
        self.client.close()
