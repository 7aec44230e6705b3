"""vLLM's paged KV cache, seen as the byte ranges a chunk is copied from and to.

Layouts of one layer's cache, as vLLM's attention backends shape them
(``get_kv_cache_shape``; the tensor keeps this logical shape whatever the
physical order, vLLM permutes it for HND):

- FlashAttention: ``(2, num_blocks, block_size, num_kv_heads, head_size)``,
  NHD (C-contiguous) or HND (physically ``(2, num_blocks, heads, block_size,
  head_size)``: a permuted view);
- FlashInfer: ``(num_blocks, 2, block_size, num_kv_heads, head_size)``, NHD
  or HND likewise;
- MLA: ``(num_blocks, block_size, head_size)``: one latent vector per token,
  no K/V split.

A chunk of ``G`` vLLM blocks is stored in one part per layer. The part is
canonical: ``[K of its G blocks][V of its G blocks]``, each block's K (or V)
its tokens in order, each token's heads in order (NHD), so the same KV gives
the same bytes from a FlashAttention or a FlashInfer cache, NHD or HND. An
MLA part is its G blocks' latents. Where a block's K is one contiguous run
of the cache (NHD caches of host memory), it is copied by the library's
batch calls; otherwise (HND, split kernel blocks, device memory) through
torch views of the chunk and the cache.

A registered tensor may hold kernel blocks smaller than vLLM's block
(``block_size`` a multiple of the tensor's block dimension): a vLLM block is
then consecutive kernel blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import torch

FLASH_ATTN, FLASHINFER, MLA = "flash_attn", "flashinfer", "mla"


@dataclass(frozen=True)
class PagedLayout:
    """How one layer's cache holds a vLLM block, and the chunk layout that gives."""

    num_layers: int
    kind: str  #: FLASH_ATTN, FLASHINFER or MLA
    block_bytes: int  #: K (or V, or an MLA block) of one block of one layer
    chunk_blocks: int
    ratio: int = 1  #: kernel blocks per vLLM block
    hnd: bool = False  #: heads before tokens in memory (read from the strides)
    contiguous: bool = True  #: each block's K (V) is one run of host memory

    @property
    def halves(self) -> int:
        """2 (K and V) or 1 (MLA)."""
        return 1 if self.kind == MLA else 2

    @property
    def part_bytes(self) -> int:
        """One layer of one chunk."""
        return self.halves * self.chunk_blocks * self.block_bytes

    @property
    def chunk_bytes(self) -> int:
        return self.num_layers * self.part_bytes

    def offset(self, layer: int, index: int, half: int) -> int:
        """Chunk offset of half ``half`` (0: K, 1: V) of block ``index`` in ``layer``."""
        return layer * self.part_bytes + (half * self.chunk_blocks + index) * self.block_bytes

    @classmethod
    def of(cls, kv_caches: Sequence[torch.Tensor], block_size: int, chunk_blocks: int,
           backend: Optional[str] = None) -> "PagedLayout":
        """Reads the layout from the tensors' shapes and strides; ``backend``
        (vLLM's attention backend name) checks it, and settles a shape that
        fits two layouts (a cache of two blocks). Raises ValueError for a
        tensor of none of them, or layers that differ."""
        first = kv_caches[0]
        for kv in kv_caches:
            if kv.shape != first.shape or kv.stride() != first.stride() \
                    or kv.dtype != first.dtype or kv.device != first.device:
                raise ValueError("maru: the vLLM connector needs every layer's cache alike; got "
                                 f"{tuple(first.shape)} {first.dtype} and {tuple(kv.shape)} "
                                 f"{kv.dtype}")
        kind = _kind(first, backend)
        kb = first.shape[1] if kind == MLA else first.shape[2]
        if kb <= 0 or block_size % kb:
            raise ValueError(f"maru: cache block dimension {kb} does not divide the block size "
                             f"{block_size} (shape {tuple(first.shape)})")
        ratio = block_size // kb
        per_kernel_block = first[0].numel() if kind == MLA else first[0, 0].numel()
        block_bytes = ratio * per_kernel_block * first.element_size()
        hnd = kind != MLA and first.stride(2) < first.stride(3)  # tokens inside heads
        contiguous = first.is_contiguous() and not first.is_cuda \
            and (ratio == 1 or kind != FLASHINFER)
        return cls(len(kv_caches), kind, block_bytes, chunk_blocks, ratio, hnd, contiguous)


def _kind(kv: torch.Tensor, backend: Optional[str]) -> str:
    name = (backend or "").upper()
    if kv.dim() == 3:
        return MLA
    if kv.dim() != 5 or 2 not in (kv.shape[0], kv.shape[1]):
        raise ValueError("maru: not a vLLM paged KV cache: expected (2, blocks, block_size, "
                         "heads, head_size) (FlashAttention), (blocks, 2, block_size, heads, "
                         f"head_size) (FlashInfer) or (blocks, block_size, dim) (MLA); got "
                         f"{tuple(kv.shape)}")
    fa, fi = kv.shape[0] == 2, kv.shape[1] == 2
    if fa and fi:  # two blocks of a FlashAttention cache or a FlashInfer one
        if "FLASHINFER" in name:
            return FLASHINFER
        if "FLASH_ATTN" in name:
            return FLASH_ATTN
        raise ValueError(f"maru: a cache of shape {tuple(kv.shape)} fits FlashAttention and "
                         "FlashInfer alike; name the backend (maru_attention_backend)")
    if "FLASHINFER" in name and not fi or "FLASH_ATTN" in name and not fa:
        raise ValueError(f"maru: a cache of shape {tuple(kv.shape)} is not {backend}'s layout")
    return FLASH_ATTN if fa else FLASHINFER


def half_view(layout: PagedLayout, kv: torch.Tensor, block_id: int, half: int) -> torch.Tensor:
    """Half ``half`` of vLLM block ``block_id`` as a view of the cache: its
    kernel blocks, tokens, heads, head dims (no copy)."""
    lo, hi = block_id * layout.ratio, (block_id + 1) * layout.ratio
    if layout.kind == MLA:
        return kv[lo:hi]
    if layout.kind == FLASH_ATTN:
        return kv[half, lo:hi]
    return kv[lo:hi, half]


class LayerBuffers:
    """Byte buffers of one layer's blocks: slices of one flat numpy view of
    the cache where a block's K (V) is one run, torch views otherwise."""

    def __init__(self, layout: PagedLayout, kv: torch.Tensor) -> None:
        self.layout, self.kv = layout, kv
        self.flat = kv.reshape(-1).view(torch.uint8).numpy() if layout.contiguous else None
        elt = kv.element_size()
        if layout.kind == MLA:
            self.strides = (kv.stride(0) * layout.ratio * elt, 0)
        elif layout.kind == FLASH_ATTN:
            self.strides = (kv.stride(1) * layout.ratio * elt, kv.stride(0) * elt)
        else:
            self.strides = (kv.stride(0) * layout.ratio * elt, kv.stride(1) * elt)

    def half(self, block_id: int, half: int) -> Any:
        """The buffer of half ``half`` of block ``block_id``."""
        if self.flat is not None:
            at = block_id * self.strides[0] + half * self.strides[1]
            return self.flat[at:at + self.layout.block_bytes]
        return half_view(self.layout, self.kv, block_id, half)


def layer_ops(layout: PagedLayout, buffers: LayerBuffers, layer: int,
              chunks: Sequence[Tuple[Any, Sequence[int], int]]) -> List[Tuple[Any, Any, int]]:
    """The copy list of one layer: per chunk, per block, its K and its V (or
    its MLA block). ``chunks`` holds (chunk, block ids, index in the chunk
    of the first of them)."""
    ops: List[Tuple[Any, Any, int]] = []
    for chunk, block_ids, skip in chunks:
        for i, block_id in enumerate(block_ids):
            for half in range(layout.halves):
                ops.append((chunk, buffers.half(block_id, half),
                            layout.offset(layer, skip + i, half)))
    return ops
