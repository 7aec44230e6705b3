"""CxlMemoryAdapter: LMCache's memory allocator interface over a MaruHandler.

What LMCache's own maru backend (``lmcache/v1/storage_backend/maru_backend.py``
@ ``b4dd69b4d8c6967b3c737639f513c446a061b3bd``) calls on it, with the
keywords it uses (python/contracts/lmcache.json): the constructor
``CxlMemoryAdapter(handler=, shapes=, dtypes=, fmt=, chunk_size=)``,
``allocate``, ``batched_allocate``, ``free``, ``batched_free``, ``close``,
``encode_address`` / ``decode_address`` (static), ``create_store_handle``
and ``get_by_location(region_id=, page_index=, actual_size=,
single_token_size=)``.

The original's adapter (xcena-dev/maru ``maru_lmcache/adapter.py``) made
one memory object per page of the handler's reserved regions up front.
Here a region is one chunk (:mod:`maru.handler`), so objects are made when
asked for: ``allocate`` is a :meth:`maru.MaruHandler.alloc` (a new owned
region) and ``get_by_location`` a view of a region a retrieve made. Each
object's ``raw_data`` is a flat uint8 tensor over the chunk's bytes (no
copy) that holds the chunk's lease: as the original's, the objects have no
parent allocator (``parent_allocator=None``), so LMCache's reference
counts never free them; the chunk's lease (an unstored allocation's
reservation) goes when the object and every tensor made from it are gone.
Address of an object: ``(region_id << 32) | page_index``.
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Tuple

from maru.handler import AllocHandle, MaruHandler
from maru.lmcache import (AllOrNone, MaruMemoryObj, MemoryAllocatorInterface, MemoryFormat,
                          MemoryObjMetadata, shapes_and_dtypes, size_bytes, view_tensor)

logger = logging.getLogger(__name__)


class CxlMemoryAdapter(AllOrNone, MemoryAllocatorInterface):
    """LMCache memory allocator backed by a :class:`maru.MaruHandler`.

    ``shapes``/``dtypes``: the full chunk's tensors (LMCache's metadata);
    ``fmt``: their format (KV_2LTD, or KV_MLA_FMT for MLA), given to every
    object; ``chunk_size``: bytes of a full chunk (the handler's
    ``get_chunk_size()``). Objects of fewer bytes (the last, partial chunk
    of a sequence) get the token dimension of their own size.
    """

    def __init__(self, handler: MaruHandler, shapes: List[Any], dtypes: List[Any],
                 fmt: Any, chunk_size: int) -> None:
        self._handler = handler
        self._shapes, self._dtypes = shapes_and_dtypes(shapes, dtypes)
        self._fmt = fmt
        self._chunk_size = chunk_size
        self._regions_added = 0
        self._handler.set_on_region_added(self._on_region_added)

    # --- addresses ------------------------------------------------------

    @staticmethod
    def encode_address(region_id: int, page_index: int) -> int:
        """``(region_id << 32) | page_index``."""
        return (region_id << 32) | page_index

    @staticmethod
    def decode_address(address: int) -> Tuple[int, int]:
        """``(region_id, page_index)`` of an address."""
        return address >> 32, address & 0xFFFFFFFF

    def _on_region_added(self, region_id: int, page_count: int) -> None:
        self._regions_added += 1
        logger.debug("maru_lmcache: region %d added (%d page)", region_id, page_count)

    def ensure_region_pool(self, region_id: int) -> bool:
        """True if the handler still has the region (nothing to build here)."""
        return self._handler.get_region_page_count(region_id) is not None

    # --- objects --------------------------------------------------------

    def _shape_of(self, size: int, single_token_size: int) -> Optional[List[int]]:
        shape = list(self._shapes[0])
        if size == self._chunk_size:
            return shape
        token_dim = self._fmt.token_dim()
        if single_token_size <= 0 or size % single_token_size or token_dim >= len(shape):
            return None
        shape[token_dim] = size // single_token_size
        return shape

    def _single_token_size(self) -> int:
        tokens = self._shapes[0][self._fmt.token_dim()] if self._shapes[0] else 0
        return self._chunk_size // tokens if tokens else 0

    def _obj(self, view: memoryview, address: int, shape: List[Any]) -> MaruMemoryObj:
        import torch

        multi = len(self._shapes) > 1
        meta = MemoryObjMetadata(shape=torch.Size(shape), dtype=self._dtypes[0],
                                 address=address, phy_size=view.nbytes, ref_count=1,
                                 fmt=self._fmt, shapes=self._shapes if multi else None,
                                 dtypes=self._dtypes if multi else None)
        return MaruMemoryObj(view_tensor(view), meta, None)

    # --- MemoryAllocatorInterface ----------------------------------------

    def allocate(self, shapes: Any, dtypes: Any, fmt: Any = MemoryFormat.UNDEFINED,
                 allocator_type: Optional[str] = None) -> Optional[MaruMemoryObj]:
        """``handler.alloc(size=)`` of the tensors' bytes: an object over the
        new chunk with the adapter's format, or None when the handler
        refuses (more than ``chunk_size``, no room)."""
        shape_list, dtype_list = shapes_and_dtypes(shapes, dtypes)
        size = size_bytes(shape_list, dtype_list)
        if size == 0:
            return None
        shape = self._shape_of(size, self._single_token_size())
        if shape is None:
            logger.debug("maru_lmcache: %d bytes are not whole tokens of this model", size)
            return None
        try:
            handle = self._handler.alloc(size=size)
        except (ValueError, RuntimeError) as e:
            logger.debug("maru_lmcache: alloc of %d bytes failed: %s", size, e)
            return None
        obj = self._obj(handle.buf, self.encode_address(handle.region_id, handle.page_index),
                        shape)
        return obj

    def free(self, memory_obj: Any, allocator_type: Optional[str] = None) -> None:
        """Gives the object's region back to the handler (an unstored
        allocation's space goes back once no tensor of it is left; a stored
        key stays) and lets go of the chunk."""
        rid, pid = self.decode_address(memory_obj.metadata.address)
        try:
            self._handler.free(AllocHandle(buf=memoryview(b""), _region_id=rid,
                                           _page_index=pid, _size=0))
        except (ValueError, RuntimeError) as e:  # a read region, or already given back
            logger.debug("maru_lmcache: free region %d: %s", rid, e)
        if isinstance(memory_obj, MaruMemoryObj):
            memory_obj.drop_lease()

    def batched_free(self, memory_objs: List[Any], allocator_type: Optional[str] = None,
                     update_stats: bool = True) -> None:
        """:meth:`free` of each object."""
        for obj in memory_objs:
            self.free(obj, allocator_type)

    def close(self) -> None:
        """Unregisters from the handler."""
        self._handler.set_on_region_added(None)

    # --- store and retrieve ----------------------------------------------

    def create_store_handle(self, memory_obj: Any) -> AllocHandle:
        """The handle :meth:`maru.MaruHandler.store` takes for the object
        (its region and page, from its address; ``buf`` empty)."""
        rid, pid = self.decode_address(memory_obj.metadata.address)
        return AllocHandle(buf=memoryview(b""), _region_id=rid, _page_index=pid,
                           _size=memory_obj.metadata.phy_size)

    def get_by_location(self, region_id: int, page_index: int, actual_size: int,
                        single_token_size: int) -> Optional[MaruMemoryObj]:
        """An object over ``actual_size`` bytes of a region (one a retrieve
        made), its token dimension ``actual_size // single_token_size`` when
        the chunk is partial; None if the region is gone, the page is not
        0, or the size is not whole tokens."""
        if page_index != 0:
            logger.debug("maru_lmcache: region %d has one page, not %d", region_id, page_index)
            return None
        shape = self._shape_of(actual_size, single_token_size)
        if shape is None:
            logger.warning("maru_lmcache: region %d: %d bytes are not whole tokens of %d",
                           region_id, actual_size, single_token_size)
            return None
        view = self._handler.get_buffer_view(region_id, 0, actual_size)
        if view is None:
            return None
        return self._obj(view, self.encode_address(region_id, page_index), shape)
