"""fork() after connect, and the GIL while a call waits for the server."""

import ctypes
import gc
import os
import platform
import signal
import sys
import threading

import pytest

import maru
from maru_node import wait_for


def _in_child(body) -> int:
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = body()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_fork_after_connect_raises_fork_error(client, ns):
    client.put(f"/{ns}/f", b"parent")
    chunk = client.open(f"/{ns}/f")

    def child() -> int:
        for call in (client.pool_info, lambda: client.open(f"/{ns}/f"), chunk.memoryview):
            try:
                call()
                return 1
            except maru.ForkError as e:
                if "fork" not in str(e):
                    return 2
        return 0

    assert _in_child(child) == 0
    # The parent's connection and chunk are untouched.
    assert bytes(chunk.memoryview()) == b"parent"
    assert client.pool_info().total > 0
    chunk.release()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="fork(2) by number: x86_64's")
def test_a_raw_fork_child_leaves_the_parents_leases(make_server, ns):
    """A fork by the system call, which runs no atfork handler (unlike
    os.fork), is still seen: the child neither calls the library nor
    releases the parent's leases when its chunks die."""
    unit = 64 << 10
    server = make_server(unit=unit)

    with maru.Client(server.url) as c:
        c.put(f"/{ns}/r", b"parent")
        chunk = c.lookup_prefix([f"/{ns}/r"])[0]
        # PyDLL: the GIL stays held across the fork, so the child has it.
        libc = ctypes.PyDLL(None, use_errno=True)
        pid = libc.syscall(57)  # SYS_fork
        if pid == 0:
            code = 1
            try:
                try:
                    c.pool_info()
                except maru.ForkError:
                    chunk.release()
                    gc.collect()
                    code = 0
            finally:
                os._exit(code)
        assert pid > 0, os.strerror(ctypes.get_errno())
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        c.unlink(f"/{ns}/r")
        assert server.deferred_bytes() == unit  # the parent's lease holds
        assert bytes(chunk.memoryview()) == b"parent"
        chunk.release()
        assert wait_for(lambda: server.deferred_bytes() == 0)


def test_fork_error_is_a_runtime_error():
    assert issubclass(maru.ForkError, RuntimeError)


def test_gil_released_while_waiting_for_the_server(server, client):
    client.pool_info()
    result = {}
    done = threading.Event()

    def call() -> None:
        try:
            result["info"] = client.pool_info()
        except BaseException as e:  # reported below
            result["error"] = e
        done.set()

    os.kill(server.pid, signal.SIGSTOP)  # every request now waits
    try:
        t = threading.Thread(target=call)
        t.start()

        def blocked_in_call() -> bool:
            frame = sys._current_frames().get(t.ident)
            return frame is not None and frame.f_code is maru.Client.pool_info.__code__

        # This thread runs while the other one is inside pool_info, which
        # cannot return before the server is continued below: the call
        # released the GIL. Holding it, this thread would stall until the
        # call failed with a timeout.
        assert wait_for(blocked_in_call)
        counted = sum(1 for _ in range(10000))
        assert counted == 10000 and not done.is_set()
    finally:
        os.kill(server.pid, signal.SIGCONT)
    t.join(timeout=120)
    assert "error" not in result, result
    assert result["info"].total > 0
