"""``MaruStorage``: the original Maru's SGLang HiCache backend, by its name.

SGLang loads it as the original's docs and examples say::

    --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "maru",
        "module_path": "maru_sglang.maru_storage", "class_name": "MaruStorage",
        "interface_v1": 1, "maru_server_url": "tcp://localhost:5555",
        "maru_pool_size": "4G"}'

It is :class:`maru.sglang.MaruHiCacheStorage` (same pages, same paths:
instances configured either way share KV) with the original's keys read by
:class:`maru_sglang.config.MaruSGLangConfig`: ``maru_server_url`` is the
server (a ``tcp://`` or ``unix://`` address of ``maru-server --listen``),
``maru_instance_id`` the client's name; the other keys are checked as the
original checks them and ignored (see that module). Our own
``maru_namespace`` may be added (default ``sglang``).

Unlike the original, every host layout works (layer_first, page_first,
page_first_direct, page_head), MLA pages are written once and read by every
rank, pages carry the pipeline and context-parallel ranks, and a page of
another size is a miss rather than a partial copy.
"""

from __future__ import annotations

from typing import Any, Dict

from maru.sglang import MaruHiCacheStorage

from .config import MaruSGLangConfig


class MaruStorage(MaruHiCacheStorage):
    """SGLang HiCache L3 storage on Maru, configured by the original's keys.

    ``maru_config``: the :class:`MaruSGLangConfig` read from the extra config.
    """

    def __init__(self, storage_config: Any, kwargs: Any = None) -> None:
        super().__init__(storage_config, kwargs)

    def _options(self, extra: Dict[str, Any]) -> Dict[str, Any]:
        self.maru_config = MaruSGLangConfig.from_extra_config(extra)
        namespace = extra.get("maru_namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise TypeError("maru_sglang: maru_namespace must be a string")
        for key, value in (("maru_server_url", self.maru_config.server_url),
                           ("maru_instance_id", self.maru_config.instance_id)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"maru_sglang: {key} must be a string")
        return {"server": self.maru_config.server_url, "namespace": namespace or "sglang",
                "instance": self.maru_config.instance_id}
