"""Loading chunks into the paged cache, layer by layer.

A :class:`LoadJob` loads the chunks of one step (or of one asynchronous
request): it opens them, then for each layer waits until every chunk has
that layer (another instance may still be writing it), copies the layer into
the blocks with one batched call, and marks the layer done, so that the
model computes layer i while layer i+1 is copied. A chunk that is missing,
evicted, aborted by its writer or late cuts its request there: its blocks
and all after it are reported failed (vLLM recomputes them), and none of
its layers not yet final is ever read.
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional, Sequence, Set, Tuple

from .metadata import LoadSpec
from .paged import LayerBuffers, PagedLayout, layer_ops
from .store import ChunkStore


class _Request:
    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.chunks: List[Any] = []  # read handles of the chunks opened
        self.sealed = 0  # chunks [0, sealed) were sealed when opened: no waits
        self.cut = len(spec.chunks)  # chunks [0, cut) are good so far


class LoadJob:
    """The loads of one step; :meth:`run` in a thread, :meth:`wait_layer` from the model."""

    def __init__(self, store: ChunkStore, layout: PagedLayout, buffers: Sequence[LayerBuffers],
                 specs: Sequence[LoadSpec], rank_path: Any, timeout_s: float) -> None:
        self.store, self.layout, self.buffers = store, layout, list(buffers)
        self.requests = [_Request(s) for s in specs]
        self.rank_path, self.timeout_s = rank_path, timeout_s
        self.layers = [threading.Event() for _ in range(layout.num_layers)]
        self.done = threading.Event()
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        """Opens, waits and copies every layer in turn, then releases the chunks."""
        try:
            self._open()
            for layer in range(self.layout.num_layers):
                self._load_layer(layer)
                self.layers[layer].set()
        except BaseException as e:  # noqa: B902 - reported as failed blocks
            self.error = e
            for r in self.requests:
                r.cut = 0
        finally:
            for ev in self.layers:
                ev.set()
            self.store.release([c for r in self.requests for c in r.chunks])
            self.done.set()

    def _open(self) -> None:
        for r in self.requests:
            r.chunks, r.sealed = self.store.open_load(
                [self.rank_path(c.path) for c in r.spec.chunks])
            r.cut = len(r.chunks)

    def _load_layer(self, layer: int) -> None:
        for r in self.requests:
            for j in range(r.sealed, r.cut):
                try:
                    self.store.wait_layer(r.chunks[j], layer, self.timeout_s)
                except (OSError, TimeoutError):
                    r.cut = j  # never read a layer that is not final
                    break
        live = [(r, j) for r in self.requests for j in range(r.cut)]
        owner = [(r, j) for r, j in live
                 for _ in range(self.layout.halves * len(r.spec.chunks[j].block_ids))]
        ops = layer_ops(self.layout, self.buffers[layer], layer,
                        [(r.chunks[j], r.spec.chunks[j].block_ids, r.spec.chunks[j].skip)
                         for r, j in live])
        for i, err in enumerate(self.store.read(ops)):
            if err is not None:
                r, j = owner[i]
                r.cut = min(r.cut, j)

    def wait_layer(self, layer: int) -> None:
        """Blocks until ``layer`` is copied (or the job has given up on it)."""
        self.layers[layer].wait()

    def failed_blocks(self) -> Set[int]:
        """Block ids of the chunks that were not loaded (once :attr:`done`)."""
        out: Set[int] = set()
        for r in self.requests:
            for c in r.spec.chunks[r.cut:]:
                out.update(c.block_ids)
        return out

    def failed_requests(self) -> Set[str]:
        """Requests with a chunk not loaded (so far: final once :attr:`done`)."""
        return {r.spec.req_id for r in self.requests if r.cut < len(r.spec.chunks)}

    def req_ids(self) -> List[str]:
        return [r.spec.req_id for r in self.requests]

    def loaded(self) -> Tuple[int, int]:
        """(chunks, bytes) loaded (once :attr:`done`)."""
        blocks = sum(len(c.block_ids) for r in self.requests for c in r.spec.chunks[:r.cut])
        chunks = sum(r.cut for r in self.requests)
        return chunks, blocks * self.layout.halves * self.layout.block_bytes * \
            self.layout.num_layers
