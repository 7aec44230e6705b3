"""Completion of async batches: one watcher thread per process turns the
eventfds of :class:`maru._maru.BatchFuture` into resolved
:class:`concurrent.futures.Future` objects."""

from __future__ import annotations

import os
import selectors
import threading
from concurrent.futures import Future
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _maru

Convert = Callable[[List[int]], Any]


class Completions:
    """Watches the eventfds of pending batches; resolves their futures.

    The pending :class:`~maru._maru.BatchFuture` (which holds the batch's
    buffers and chunks) is referenced here until its batch is done, so the
    caller's buffers stay alive however the caller drops its references.
    """

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._lock = threading.Lock()
        self._to_add: List[Tuple[_maru.BatchFuture, Future, Convert]] = []
        self._pending: Dict[int, Tuple[_maru.BatchFuture, Future, Convert]] = {}
        self._thread = threading.Thread(target=self._run, name="maru-completions", daemon=True)
        self._thread.start()

    def watch(self, batch: _maru.BatchFuture, convert: Convert) -> Future:
        """A Future resolved with ``convert(batch.results())`` once ``batch`` is done."""
        future: Future = Future()
        future.set_running_or_notify_cancel()
        with self._lock:
            self._to_add.append((batch, future, convert))
        os.write(self._wake_w, b"x")
        return future

    def _run(self) -> None:
        while True:
            for key, _ in self._selector.select():
                if key.fd == self._wake_r:
                    try:
                        os.read(self._wake_r, 4096)
                    except BlockingIOError:
                        pass
                    self._adopt()
                else:
                    self._complete(key.fd)

    def _adopt(self) -> None:
        with self._lock:
            added, self._to_add = self._to_add, []
        for batch, future, convert in added:
            fd = batch.fd()
            self._pending[fd] = (batch, future, convert)
            self._selector.register(fd, selectors.EVENT_READ)

    def _complete(self, fd: int) -> None:
        self._selector.unregister(fd)
        batch, future, convert = self._pending.pop(fd)
        try:
            future.set_result(convert(batch.results()))
        except BaseException as e:  # a conversion error belongs to the caller
            future.set_exception(e)
        # The batch (and its eventfd, buffers and chunks) goes here, after
        # the fd left the selector.
        del batch


_completions: Optional[Completions] = None
_owner_pid = 0
_lock = threading.Lock()


def completions() -> Completions:
    """This process's watcher (a new one in a forked child)."""
    global _completions, _owner_pid
    with _lock:
        if _completions is None or _owner_pid != os.getpid():
            _completions = Completions()
            _owner_pid = os.getpid()
        return _completions
