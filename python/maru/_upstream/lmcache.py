"""LMCache's interface classes, for when LMCache is not importable.

Written after LMCache's own source (LMCache/LMCache), read at:

- ``lmcache/v1/memory_management.py`` @ ``c132a592ae0a2eef62db997a0c8b2029d3f8c015``:
  :class:`MemoryFormat` (members and values), :class:`MemoryObjMetadata`,
  :class:`MemoryObj`, :class:`TensorMemoryObj`, :class:`MemoryAllocatorInterface`;
- ``lmcache/v1/storage_backend/abstract_backend.py``, the version that
  LMCache's maru backend (``maru_backend.py`` @
  ``b4dd69b4d8c6967b3c737639f513c446a061b3bd``) subclasses (the code index
  does not give its commit; python/contracts/lmcache.json records it):
  :class:`StorageBackendInterface`, :class:`AllocatorBackendInterface`,
  :class:`StoragePluginInterface`.

Same class names, methods, signatures, defaults and abstract methods as
there, so that a backend written against these runs against LMCache's
classes unchanged (``maru.lmcache`` and ``maru_lmcache`` subclass LMCache's
own classes when ``lmcache`` is importable, these otherwise). Only what
backends and the GPU connector use of the memory objects is implemented;
LMCache's statistics monitors and pin monitor are left out. torch is
imported when a method needs it, not with the module.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import logging
import threading
from concurrent.futures import Future
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

logger = logging.getLogger(__name__)

#: The commits the classes below follow.
MEMORY_MANAGEMENT_COMMIT = "c132a592ae0a2eef62db997a0c8b2029d3f8c015"
MARU_BACKEND_COMMIT = "b4dd69b4d8c6967b3c737639f513c446a061b3bd"

#: LMCache's ``torch_device_type`` on a CUDA build (the default device of a backend).
TORCH_DEVICE_TYPE = "cuda"


def _itemsize(dtype: Any) -> int:
    size = getattr(dtype, "itemsize", None)  # torch >= 2.1
    if isinstance(size, int):
        return size
    import torch

    return torch.empty((), dtype=dtype).element_size()


def get_size_bytes(shapes: Sequence[Any], dtypes: Sequence[Any]) -> int:
    """Bytes of tensors of these shapes and dtypes, as LMCache's
    ``lmcache.integration.vllm.utils.get_size_bytes``."""
    total = 0
    for shape, dtype in zip(shapes, dtypes):
        count = 1
        for dim in shape:
            count *= int(dim)
        total += count * _itemsize(dtype)
    return total


class MemoryFormat(enum.Enum):
    """LMCache's memory formats (the layout of a memory object's tensor)."""

    UNDEFINED = 0
    KV_2LTD = 1  #: [2, num_layers, num_tokens, hidden_dim]
    KV_T2D = 2  #: [num_tokens, 2, hidden_dim]
    KV_2TD = 3  #: [2, num_tokens, hidden_dim]
    BINARY = 4  #: compressed binary array
    BINARY_BUFFER = 5
    KV_MLA_FMT = 6  #: [1, num_layers, num_tokens, aligned_head_size]
    EC_TD = 7  #: encoder cache, [num_tokens, hidden_dim]
    HS_TD = 8  #: hidden states, [num_tokens, hidden_dim]

    def token_dim(self) -> int:
        """The dimension that counts tokens."""
        return {MemoryFormat.KV_2LTD: 2, MemoryFormat.KV_T2D: 1,
                MemoryFormat.KV_MLA_FMT: 2}.get(self, 0)


@dataclasses.dataclass
class MemoryObjMetadata:
    """What LMCache records of a memory object (its dataclass, field for field)."""

    shape: Any  #: the logical shape (torch.Size)
    dtype: Any  #: the logical dtype
    address: int  #: the allocator's address of the bytes
    phy_size: int  #: bytes allocated
    ref_count: int
    pin_count: int = 0
    fmt: MemoryFormat = MemoryFormat.UNDEFINED
    cached_positions: Any = None
    shapes: Optional[List[Any]] = None
    dtypes: Optional[List[Any]] = None

    def get_size(self) -> int:
        """Bytes of the logical tensor(s)."""
        if self.shapes is not None and self.dtypes is not None:
            return get_size_bytes(self.shapes, self.dtypes)
        return get_size_bytes([self.shape], [self.dtype])


class MemoryObj(metaclass=abc.ABCMeta):
    """LMCache's memory object interface."""

    raw_data: Any

    def __init__(self, metadata: MemoryObjMetadata) -> None:
        self.meta = metadata

    @abc.abstractmethod
    def invalidate(self) -> None:
        """Marks the object invalid."""

    @abc.abstractmethod
    def is_valid(self) -> bool:
        """False once invalidated."""

    @abc.abstractmethod
    def get_size(self) -> int:
        """Logical bytes."""

    @abc.abstractmethod
    def get_shape(self) -> Any:
        """The logical shape."""

    def get_dtype(self) -> Any:
        """The logical dtype (None here)."""
        return None

    @abc.abstractmethod
    def get_shapes(self) -> List[Any]:
        """The shapes of the groups."""

    @abc.abstractmethod
    def get_dtypes(self) -> List[Any]:
        """The dtypes of the groups."""

    @abc.abstractmethod
    def get_memory_format(self) -> MemoryFormat:
        """The format."""

    @abc.abstractmethod
    def get_physical_size(self) -> int:
        """Bytes allocated."""

    def set_used_size(self, n: int) -> None:  # noqa: B027 (optional hook)
        """Narrows the logical size; nothing here."""

    @abc.abstractmethod
    def pin(self) -> bool:
        """One more pin."""

    @abc.abstractmethod
    def ref_count_up(self) -> None:
        """One more reference."""

    @abc.abstractmethod
    def unpin(self) -> bool:
        """One pin fewer."""

    @abc.abstractmethod
    def ref_count_down(self) -> None:
        """One reference fewer."""

    @abc.abstractmethod
    def get_ref_count(self) -> int:
        """References."""

    @abc.abstractmethod
    def get_num_tokens(self) -> int:
        """Tokens (the format's token dimension of the shape)."""

    @property
    def shm_offset(self) -> int:
        """The object's address."""
        return self.meta.address

    @property
    def shm_byte_length(self) -> int:
        """The object's logical bytes."""
        return self.get_size()

    @property
    @abc.abstractmethod
    def metadata(self) -> MemoryObjMetadata:
        """The metadata."""

    @property
    @abc.abstractmethod
    def tensor(self) -> Any:
        """The logical tensor."""

    @property
    @abc.abstractmethod
    def byte_array(self) -> Any:
        """The bytes."""

    @property
    @abc.abstractmethod
    def data_ptr(self) -> int:
        """Address of the bytes."""

    @property
    @abc.abstractmethod
    def is_pinned(self) -> bool:
        """True while pinned."""

    @property
    @abc.abstractmethod
    def can_evict(self) -> bool:
        """True when evictable."""

    @property
    @abc.abstractmethod
    def raw_tensor(self) -> Any:
        """The raw (flat) tensor."""

    @abc.abstractmethod
    def get_tensor(self, index: int) -> Any:
        """Group ``index`` as a tensor."""

    @abc.abstractmethod
    def parent(self) -> Optional["MemoryAllocatorInterface"]:
        """The allocator that allocated the object."""


class TensorMemoryObj(MemoryObj):
    """A flat tensor (``raw_data``) with its metadata, as LMCache's.

    Reference counting as there: created with the count in the metadata
    (1), ``ref_count_down`` to 0 with no pin hands the object to
    ``parent_allocator.free``; ``unpin`` with neither pins nor references
    left does too; no parent (None) frees nothing.
    """

    def __init__(self, raw_data: Any, metadata: MemoryObjMetadata,
                 parent_allocator: Optional["MemoryAllocatorInterface"]) -> None:
        assert metadata.dtype is not None, "dtype must be specified for TensorMemoryObj"
        super().__init__(metadata)
        self.raw_data = raw_data
        self.valid = True
        self.lock = threading.Lock()
        self.parent_allocator = parent_allocator
        self._used_size_override: Optional[int] = None
        self.group_prefix_sum = [0]
        if self.meta.shapes is not None and self.meta.dtypes is not None:
            for shape, dtype in zip(self.meta.shapes, self.meta.dtypes):
                self.group_prefix_sum.append(self.group_prefix_sum[-1]
                                             + get_size_bytes([shape], [dtype]))
        else:
            self.group_prefix_sum.append(self.meta.get_size())

    def __del__(self) -> None:
        if getattr(self, "parent_allocator", None) is not None and self.is_valid():
            if self.meta.ref_count > 0 or self.meta.pin_count > 0:
                logger.warning("MemoryObj at %s garbage collected with ref_count=%d, "
                               "pin_count=%d", self.meta.address, self.meta.ref_count,
                               self.meta.pin_count)
            self.parent_allocator.free(self)

    def invalidate(self) -> None:
        self.valid = False

    def is_valid(self) -> bool:
        return self.valid

    def get_size(self) -> int:
        if self._used_size_override is not None:
            return self._used_size_override
        return self.group_prefix_sum[-1]

    def set_used_size(self, n: int) -> None:
        if n < 0 or n > self.meta.phy_size:
            raise ValueError(f"set_used_size: n={n} out of range [0, {self.meta.phy_size}]")
        with self.lock:
            self._used_size_override = n

    def get_shape(self) -> Any:
        return self.meta.shape

    def get_dtype(self) -> Any:
        assert self.meta.dtype is not None
        return self.meta.dtype

    def get_shapes(self) -> List[Any]:
        assert self.meta.shapes is not None
        return self.meta.shapes

    def get_dtypes(self) -> List[Any]:
        assert self.meta.dtypes is not None
        return self.meta.dtypes

    def get_memory_format(self) -> MemoryFormat:
        with self.lock:
            return self.meta.fmt

    def get_physical_size(self) -> int:
        return self.meta.phy_size

    def ref_count_up(self) -> None:
        with self.lock:
            self.meta.ref_count += 1

    def ref_count_down(self) -> None:
        with self.lock:
            self.meta.ref_count -= 1
            if self.meta.ref_count < 0:
                logger.warning("Ref count of MemoryObj %s is negative: %d (double free); "
                               "set back to 0", self.meta.address, self.meta.ref_count)
                self.meta.ref_count = 0
            free = (self.meta.ref_count == 0 and self.parent_allocator is not None
                    and self.meta.pin_count == 0)
        if free:
            self.parent_allocator.free(self)  # type: ignore[union-attr]

    def get_ref_count(self) -> int:
        with self.lock:
            return self.meta.ref_count

    def get_num_tokens(self) -> int:
        with self.lock:
            return int(self.meta.shape[self.meta.fmt.token_dim()])

    def pin(self) -> bool:
        with self.lock:
            self.meta.pin_count += 1
        return True

    def unpin(self) -> bool:
        with self.lock:
            self.meta.pin_count -= 1
            free = self.meta.pin_count <= 0 and self.meta.ref_count <= 0
            if self.meta.pin_count < 0:
                logger.warning("Pin count of MemoryObj %s is negative: %d (double unpin); "
                               "set back to 0", self.meta.address, self.meta.pin_count)
                self.meta.pin_count = 0
        if free:
            if self.parent_allocator is None:
                logger.error("Parent allocator is None when trying to free MemoryObj.")
            else:
                self.parent_allocator.free(self)
        return True

    @property
    def metadata(self) -> MemoryObjMetadata:
        with self.lock:
            return self.meta

    @property
    def tensor(self) -> Any:
        if not self.valid:
            logger.warning("Trying to access an invalidated MemoryObj")
            return None
        if self._used_size_override is not None:
            import torch

            return self.raw_data[:self._used_size_override].view(torch.uint8)
        return self.raw_data[:self.get_size()].view(self.meta.dtype).view(self.meta.shape)

    @property
    def byte_array(self) -> memoryview:
        import torch

        flat = self.raw_data.view(-1).view(torch.uint8)[:self.get_size()]
        return memoryview(flat.numpy()).cast("B")

    @property
    def data_ptr(self) -> int:
        return self.raw_data.data_ptr()

    @property
    def is_pinned(self) -> bool:
        return self.metadata.pin_count > 0

    @property
    def can_evict(self) -> bool:
        return not self.is_pinned and self.get_ref_count() == 1

    @property
    def raw_tensor(self) -> Any:
        if not self.valid:
            logger.warning("Trying to access an invalidated MemoryObj")
            return None
        return self.raw_data

    def get_tensor(self, index: int) -> Any:
        if not self.valid:
            logger.warning("Trying to access an invalidated MemoryObj")
            return None
        assert self.meta.shapes is not None and self.meta.dtypes is not None
        begin, end = self.group_prefix_sum[index], self.group_prefix_sum[index + 1]
        return self.raw_data[begin:end].view(self.meta.dtypes[index]).view(
            self.meta.shapes[index])

    def parent(self) -> Optional["MemoryAllocatorInterface"]:
        return self.parent_allocator


class MemoryAllocatorInterface(metaclass=abc.ABCMeta):
    """LMCache's memory allocator interface."""

    @abc.abstractmethod
    def allocate(self, shapes: Any, dtypes: Any, fmt: MemoryFormat = MemoryFormat.UNDEFINED,
                 allocator_type: Optional[str] = None) -> Optional[MemoryObj]:
        """A memory object for a tensor of ``shapes``/``dtypes``, or None."""

    @abc.abstractmethod
    def batched_allocate(self, shapes: Any, dtypes: Any, batch_size: int,
                         fmt: MemoryFormat = MemoryFormat.UNDEFINED,
                         allocator_type: Optional[str] = None) -> Optional[List[MemoryObj]]:
        """``batch_size`` memory objects, or None."""

    @abc.abstractmethod
    def free(self, memory_obj: MemoryObj, allocator_type: Optional[str] = None) -> None:
        """Frees one object (called by ``ref_count_down`` at zero)."""

    @abc.abstractmethod
    def batched_free(self, memory_objs: List[MemoryObj], allocator_type: Optional[str] = None,
                     update_stats: bool = True) -> None:
        """Frees objects."""

    def close(self) -> None:
        """Closes the allocator."""
        return

    def memcheck(self) -> bool:
        """True when consistent."""
        return True

    def _adapt_shapes_and_dtypes(self, shapes: Any, dtypes: Any) -> Tuple[List[Any], List[Any]]:
        import torch

        if isinstance(shapes, torch.Size):
            shapes = [shapes]
        if isinstance(dtypes, torch.dtype):
            dtypes = [dtypes]
        assert len(shapes) == len(dtypes), (
            f"shapes and dtypes must have the same length, got {len(shapes)} and "
            f"{len(dtypes)}, shapes: {shapes}, dtypes: {dtypes}")
        return shapes, dtypes


class StorageBackendInterface(metaclass=abc.ABCMeta):
    """LMCache's storage backend interface."""

    def __init__(self, dst_device: str = TORCH_DEVICE_TYPE) -> None:
        import torch

        torch.device(dst_device)  # RuntimeError for a bad device, as LMCache
        self.dst_device = dst_device

    @abc.abstractmethod
    def contains(self, key: Any, pin: bool = False) -> bool:
        """True if ``key`` is stored; ``pin``: and pin it."""

    @abc.abstractmethod
    def exists_in_put_tasks(self, key: Any) -> bool:
        """True while a put of ``key`` is pending."""

    @abc.abstractmethod
    def batched_submit_put_task(self, keys: Sequence[Any], objs: List[MemoryObj],
                                transfer_spec: Any = None,
                                on_complete_callback: Optional[Callable[[Any], None]] = None
                                ) -> Union[List[Future], None]:
        """Stores ``objs`` under ``keys`` (asynchronously)."""

    async def async_batched_submit_put_task(
            self, keys: Sequence[Any], objs: List[MemoryObj], transfer_spec: Any = None,
            on_complete_callback: Optional[Callable[[Any], None]] = None) -> None:
        """The async form of :meth:`batched_submit_put_task` (not implemented)."""
        raise NotImplementedError

    @abc.abstractmethod
    def get_blocking(self, key: Any) -> Optional[MemoryObj]:
        """The stored object of ``key``, or None."""

    def get_non_blocking(self, key: Any, location: Optional[str] = None) -> Optional[Future]:
        """Not implemented by default."""
        raise NotImplementedError

    async def batched_async_contains(self, lookup_id: str, keys: List[Any],
                                     pin: bool = False) -> int:
        """Not implemented by default."""
        raise NotImplementedError

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[Any],
                                       transfer_spec: Any = None) -> List[MemoryObj]:
        """Not implemented by default."""
        raise NotImplementedError

    def batched_get_blocking(self, keys: List[Any]) -> List[Optional[MemoryObj]]:
        """:meth:`get_blocking` of each key."""
        return [self.get_blocking(key) for key in keys]

    @abc.abstractmethod
    def pin(self, key: Any) -> bool:
        """Pins ``key``."""

    @abc.abstractmethod
    def unpin(self, key: Any) -> bool:
        """Unpins ``key``."""

    @abc.abstractmethod
    def remove(self, key: Any, force: bool = True) -> bool:
        """Removes ``key``."""

    def batched_remove(self, keys: List[Any], force: bool = True) -> int:
        """:meth:`remove` of each key; how many were removed."""
        return sum(int(self.remove(key, force=force)) for key in keys)

    @abc.abstractmethod
    def get_allocator_backend(self) -> "AllocatorBackendInterface":
        """The backend that allocates this backend's memory objects."""

    @abc.abstractmethod
    def close(self) -> None:
        """Closes the backend."""

    def batched_contains(self, keys: List[Any], pin: bool = False) -> int:
        """How many of ``keys``, from the first, are stored (:meth:`contains` each)."""
        hits = 0
        for key in keys:
            if not self.contains(key, pin):
                break
            hits += 1
        return hits

    def touch_cache(self) -> None:
        """Not implemented by default."""
        raise NotImplementedError

    def cancel_request(self, req_id: str) -> None:
        """Nothing by default."""
        return


class AllocatorBackendInterface(StorageBackendInterface):
    """A storage backend that allocates memory objects itself."""

    @abc.abstractmethod
    def initialize_allocator(self, config: Any, metadata: Any) -> MemoryAllocatorInterface:
        """Creates the backend's allocator."""

    @abc.abstractmethod
    def get_memory_allocator(self) -> MemoryAllocatorInterface:
        """The allocator."""

    @abc.abstractmethod
    def allocate(self, shapes: Any, dtypes: Any, fmt: MemoryFormat = MemoryFormat.KV_2LTD,
                 eviction: bool = True, busy_loop: bool = True) -> Optional[MemoryObj]:
        """A memory object, or None."""

    @abc.abstractmethod
    def batched_allocate(self, shapes: Any, dtypes: Any, batch_size: int,
                         fmt: MemoryFormat = MemoryFormat.KV_2LTD, eviction: bool = True,
                         busy_loop: bool = True) -> Optional[List[MemoryObj]]:
        """``batch_size`` memory objects, or None."""

    def calculate_chunk_budget(self) -> int:
        """Not implemented by default."""
        raise NotImplementedError


class StoragePluginInterface(StorageBackendInterface):
    """A storage backend LMCache loads from its config (``storage_plugins``)."""

    def __init__(self, dst_device: str = TORCH_DEVICE_TYPE, config: Any = None,
                 metadata: Any = None, local_cpu_backend: Any = None,
                 loop: Any = None) -> None:
        super().__init__(dst_device=dst_device)
        self.config = config
        self.metadata = metadata
        self.local_cpu_backend = local_cpu_backend
        self.loop = loop


ConfigurableStorageBackendInterface = StoragePluginInterface
