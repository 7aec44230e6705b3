"""``MaruHostTensorAllocator``: a host KV buffer placed in the Maru pool.

The original Maru's allocator for SGLang's host KV cache (its
``maru_sglang/allocator.py``): ``allocate(dims, dtype)`` returns a CPU tensor
whose memory lies in the pool, reserved by one unnamed allocation
(``MaruHandler.alloc``, contiguous) that lasts as long as the allocator's
connection. It subclasses SGLang's ``HostTensorAllocator`` when SGLang is
importable (``sglang.srt.mem_cache.pool_host``, where SGLang keeps it now,
or ``memory_pool_host``, where the original looked), else a stand-in with
its ``dtype``/``dims`` attributes and ``allocate``.

Configured, as the original is, by the environment: ``MARU_SERVER_URL``
(default ``tcp://localhost:5555``), ``MARU_INSTANCE_ID``, ``MARU_TIMEOUT_MS``
and ``MARU_EAGER_MAP`` (accepted; see :class:`maru.MaruConfig`).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

from maru import MaruConfig, MaruHandler

logger = logging.getLogger(__name__)

try:
    from sglang.srt.mem_cache.pool_host import HostTensorAllocator
except ImportError:
    try:
        from sglang.srt.mem_cache.memory_pool_host import HostTensorAllocator
    except ImportError:

        class HostTensorAllocator:  # type: ignore[no-redef]
            """SGLang's host tensor allocator, for when SGLang is not importable."""

            def __init__(self) -> None:
                self.dtype: Any = None
                self.dims: Any = None

            def allocate(self, dims: tuple, dtype: Any, device: str = "cpu") -> Any:
                """A tensor of ``dims`` and ``dtype``."""
                import torch

                self.dtype, self.dims = dtype, dims
                return torch.empty(dims, dtype=dtype, device=device)


class MaruHostTensorAllocator(HostTensorAllocator):  # type: ignore[misc,valid-type]
    """Allocates SGLang's host KV tensor in the Maru pool (see the module notes)."""

    def __init__(self) -> None:
        super().__init__()
        self._handler: Optional[MaruHandler] = None
        self._held: list = []  # (handler, handle) of every allocation
        self._base_ptr = 0

    @property
    def handler(self) -> Optional[MaruHandler]:
        """The connected :class:`maru.MaruHandler` (after :meth:`allocate`)."""
        return self._handler

    @property
    def base_ptr(self) -> int:
        """The address of the tensor's memory in this process's pool mapping."""
        return self._base_ptr

    def allocate(self, dims: tuple, dtype: Any, device: str = "cpu") -> Any:
        """A CPU tensor of ``dims`` and ``dtype`` in the pool. ``device`` is
        ignored (the pool is host memory). Raises what the connection or the
        allocation raises (OSError; :class:`maru.AllocError` with no room)."""
        import torch

        count = 1
        for d in dims:
            count *= int(d)
        item = torch.empty((), dtype=dtype).element_size()
        total = count * item
        if total <= 0:
            raise ValueError(f"maru_sglang: nothing to allocate for dims {dims!r}")
        self.dims, self.dtype = dims, dtype
        handler = MaruHandler(MaruConfig(
            server_url=os.environ.get("MARU_SERVER_URL", "tcp://localhost:5555"),
            instance_id=os.environ.get("MARU_INSTANCE_ID") or None,
            pool_size=total, chunk_size_bytes=total, auto_connect=False,
            timeout_ms=int(os.environ.get("MARU_TIMEOUT_MS", "5000")),
            eager_map=os.environ.get("MARU_EAGER_MAP", "1") != "0", contiguous=True))
        handler.connect()
        try:
            handle = handler.alloc(total)
        except BaseException:
            handler.close()
            raise
        tensor = torch.frombuffer(handle.buf, dtype=torch.uint8, count=total)
        self._held.append((handler, handle))
        self._handler = handler
        self._base_ptr = tensor.data_ptr()
        logger.info("maru_sglang: host tensor of %d MiB in the pool (dims=%s, dtype=%s)",
                    total >> 20, dims, dtype)
        return tensor.view(dtype).view(dims)

    def close(self) -> None:
        """Disconnects; the memory goes back once no tensor over it is left."""
        held, self._held, self._handler = self._held, [], None
        for handler, _ in held:
            handler.close()
