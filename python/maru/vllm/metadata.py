"""What the scheduler side tells the worker side for one forward step.

vLLM carries it in ``SchedulerOutput.kv_connector_metadata``, pickled to the
worker processes: plain data only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from .base import KVConnectorMetadata


@dataclass
class ChunkSpec:
    """One chunk of a request and the vLLM blocks (block ids) it covers."""

    path: str  #: the chunk's base path; each rank names its own part (keys.rank_path)
    block_ids: List[int]
    parent: Optional[str] = None  #: the chunk before it in the chain (saves)
    skip: int = 0  #: blocks of the chunk before ``block_ids`` (held by vLLM's prefix cache)


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
class MaruConnectorMetadata(KVConnectorMetadata):
    """The ``KVConnectorMetadata`` of the Maru connector."""

    loads: List[LoadSpec] = field(default_factory=list)
    saves: List[SaveSpec] = field(default_factory=list)
    preempted: List[str] = field(default_factory=list)  #: SchedulerOutput.preempted_req_ids
