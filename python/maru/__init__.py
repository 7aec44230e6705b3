"""maru: Python API of Maru, the shared-memory KV-cache store.

Two layers over the C library libmaru_direct (through the pybind11 module
``maru._maru``), with nothing reimplemented in Python:

- :class:`Client` and :class:`Chunk`: one method per call of maru_direct.h,
  chunks as context managers with zero-copy numpy/torch views;
- :class:`MaruHandler` and :class:`MaruConfig`: the original Maru's API,
  region/page calls included, so code written for it (LMCache's own maru
  backend, with :mod:`maru_lmcache` beside this package) runs unchanged.

See docs/python.md.
"""

from ._maru import BATCH_MAX, ForkError, Prefix, strerror
from .chunk import Chunk
from .client import Client, Hint, PoolInfo, Region, errno_error
from .handler import AllocError, AllocHandle, MaruConfig, MaruHandler, MemoryInfo
from .keys import key_to_path

__version__ = "0.1.0"

__all__ = [
    "AllocError",
    "AllocHandle",
    "BATCH_MAX",
    "Chunk",
    "Client",
    "ForkError",
    "Hint",
    "MaruConfig",
    "MaruHandler",
    "MemoryInfo",
    "PoolInfo",
    "Prefix",
    "Region",
    "errno_error",
    "key_to_path",
    "strerror",
]
