"""maru_sglang: the original Maru's SGLang HiCache module, over this project.

Code and configs written for the original run unchanged: SGLang's dynamic
backend loads ``maru_sglang.maru_storage.MaruStorage`` with the original's
``maru_*`` extra-config keys (:class:`MaruSGLangConfig`), and
``maru_sglang.allocator.MaruHostTensorAllocator`` places a host KV buffer in
the pool. ``MaruStorage`` is :class:`maru.sglang.MaruHiCacheStorage` (one
implementation) with the original's keys mapped onto ours.
"""

from .config import MaruSGLangConfig, parse_size
from .maru_storage import MaruStorage

__all__ = ["MaruStorage", "MaruSGLangConfig", "parse_size"]
