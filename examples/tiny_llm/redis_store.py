"""KVStore over Redis: the transfer-based path, for comparison.

Blocks travel: put sends the bytes to the server (SET NX, pipelined), and a
reader receives a copy of each block into its own buffer (one MGET) before
the model can use it. Only the leading stored blocks are used.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from kvstore import KVStore, View
from resp import RedisError, Resp


class RedisKVStore(KVStore):
    def __init__(self, port: int, prefix: str = "tiny_llm"):
        self.r = Resp("127.0.0.1", port)
        self.prefix = prefix

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}"

    def count_prefix(self, keys: Sequence[str]) -> int:
        replies = self.r.pipeline([("EXISTS", self._key(k)) for k in keys])
        n = 0
        while n < len(replies) and replies[n] == 1:
            n += 1
        return n

    def put(self, key: str, tensor: torch.Tensor, parent: Optional[str] = None) -> bool:
        return self.put_many([(key, tensor, parent)]) == 1

    def put_many(self, items: Sequence) -> int:
        cmds = [("SET", self._key(k), memoryview(t.contiguous().numpy()).cast("B"), "NX")
                for k, t, _ in items]
        replies = self.r.pipeline(cmds) if cmds else []
        return sum(1 for rep in replies if rep == b"OK")

    def get(self, key: str, dtype: torch.dtype, shape) -> Optional[View]:
        views = self.get_prefix([key], dtype, shape)
        return views[0] if views else None

    def get_prefix(self, keys: Sequence[str], dtype: torch.dtype, shape) -> List[View]:
        values = self.r.call("MGET", *[self._key(k) for k in keys]) if keys else []
        views = []
        for value in values:
            if value is None or isinstance(value, RedisError):
                break
            views.append(View(torch.frombuffer(value, dtype=dtype).view(shape)))
        return views

    def close(self) -> None:
        self.r.close()
