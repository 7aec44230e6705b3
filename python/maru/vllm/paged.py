"""vLLM's paged KV cache, seen as the byte ranges a chunk is copied from and to.

A layer's cache is vLLM's (FlashAttention, NHD) tensor
``[2, num_blocks, block_size, num_kv_heads, head_size]``: ``[0, b]`` is the
K of block b and ``[1, b]`` its V, each one contiguous run of
``block_bytes``. A chunk of ``G`` blocks is stored in one part per layer;
part ``l`` is ``[K of its G blocks][V of its G blocks]``, so K and V halves
come from and go to separate places of the cache, one copy per block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple

import torch


@dataclass(frozen=True)
class PagedLayout:
    """Sizes of one layer's paged cache, and the chunk layout they give."""

    num_layers: int
    block_bytes: int  #: K (or V) of one block of one layer
    chunk_blocks: int

    @property
    def part_bytes(self) -> int:
        """One layer of one chunk: K and V of its blocks."""
        return 2 * self.chunk_blocks * self.block_bytes

    @property
    def chunk_bytes(self) -> int:
        return self.num_layers * self.part_bytes

    def offsets(self, layer: int, index: int) -> Tuple[int, int]:
        """Chunk offsets of the K and the V of block ``index`` of the chunk, in ``layer``."""
        base = layer * self.part_bytes + index * self.block_bytes
        return base, base + self.chunk_blocks * self.block_bytes

    @classmethod
    def of(cls, kv_caches: Sequence[torch.Tensor], chunk_blocks: int) -> "PagedLayout":
        """Checks that every layer has the NHD paged shape, the same one."""
        first = kv_caches[0]
        for kv in kv_caches:
            if kv.dim() != 5 or kv.shape[0] != 2 or kv.shape != first.shape \
                    or kv.dtype != first.dtype or not kv.is_contiguous():
                raise ValueError("maru: the vLLM connector needs contiguous per-layer caches "
                                 "[2, num_blocks, block_size, heads, head_size], all alike; "
                                 f"got {tuple(kv.shape)} {kv.dtype}")
        block_bytes = first[0, 0].numel() * first.element_size()
        return cls(len(kv_caches), block_bytes, chunk_blocks)


def block_buffers(kv_layer: torch.Tensor, block_id: int) -> Tuple[Any, Any]:
    """The K and V of one block as byte buffers over the cache (no copy).

    CPU tensors become numpy arrays, which every copy call of the package
    takes; bfloat16 and the like are viewed as bytes first.
    """
    k = kv_layer[0, block_id].reshape(-1).view(torch.uint8)
    v = kv_layer[1, block_id].reshape(-1).view(torch.uint8)
    if k.is_cuda:
        return k, v
    return k.numpy(), v.numpy()


def layer_ops(layout: PagedLayout, kv_layer: torch.Tensor, layer: int,
              chunks: Sequence[Tuple[Any, Sequence[int]]]) -> List[Tuple[Any, Any, int]]:
    """The copy list of one layer: per chunk, per block, its K and its V."""
    ops: List[Tuple[Any, Any, int]] = []
    for chunk, block_ids in chunks:
        for i, block_id in enumerate(block_ids):
            k, v = block_buffers(kv_layer, block_id)
            k_off, v_off = layout.offsets(layer, i)
            ops.append((chunk, k, k_off))
            ops.append((chunk, v, v_off))
    return ops
