"""maru_lmcache: the original Maru's LMCache module, on this project's pool.

LMCache's own maru backend (``lmcache/v1/storage_backend/maru_backend.py``,
which LMCache builds when its config sets ``maru_path``) imports
``from maru_lmcache import CxlMemoryAdapter``; this is that class, on
:class:`maru.MaruHandler` (see :mod:`maru_lmcache.adapter` and
docs/integrations.md).
"""

from .adapter import CxlMemoryAdapter

#: The original's former name of the class, which it still answers to.
CxlMemoryAllocator = CxlMemoryAdapter

__all__ = ["CxlMemoryAdapter"]
