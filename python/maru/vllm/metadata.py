"""What the scheduler side tells the worker side for one forward step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class ChunkSpec:
    """One chunk of a request and the vLLM blocks (block ids) it covers."""

    path: str  #: rank 0's path; the worker names its own rank's
    block_ids: List[int]
    parent: Optional[str] = None  #: the chunk before it in the chain (saves)


@dataclass
class LoadSpec:
    """Chunks to load into a request's blocks, in prefix order."""

    req_id: str
    chunks: List[ChunkSpec]
    is_async: bool = False  #: loaded between steps, reported by get_finished


@dataclass
class SaveSpec:
    """Chunks a request completes in this step, to store."""

    req_id: str
    chunks: List[ChunkSpec]


@dataclass
class MaruConnectorMetadata:
    """``KVConnectorMetadata`` of the Maru connector (vLLM only passes it on)."""

    loads: List[LoadSpec] = field(default_factory=list)
    saves: List[SaveSpec] = field(default_factory=list)
