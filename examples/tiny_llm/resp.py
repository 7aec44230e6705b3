"""A tiny Redis client (RESP2 over a socket): enough for the transfer baseline.

Commands can be pipelined: send() queues any number, then read() takes their
replies in order. Bulk replies arrive in a bytearray filled by recv_into, so
a value is copied once, from the socket, as any network transfer copies it.
"""
from __future__ import annotations

import socket
from typing import List, Sequence, Union

Reply = Union[bytes, bytearray, int, None, list, "RedisError"]


class RedisError(Exception):
    pass


class Resp:
    def __init__(self, host: str, port: int, timeout: float = 30.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def send(self, *commands: Sequence) -> None:
        """Sends commands (each a sequence of str/bytes/bytes-like args) in one write."""
        out = []
        for cmd in commands:
            out.append(b"*%d\r\n" % len(cmd))
            for arg in cmd:
                data = arg.encode() if isinstance(arg, str) else arg
                out += [b"$%d\r\n" % memoryview(data).nbytes, data, b"\r\n"]
        self.sock.sendall(b"".join(out))

    def read(self) -> Reply:
        """The next reply; an error reply comes back as a RedisError value."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return bytes(rest)
        if kind == b"-":
            return RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._bulk(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RedisError(f"bad reply {line!r}")

    def call(self, *args) -> Reply:
        self.send(args)
        reply = self.read()
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def pipeline(self, commands: Sequence[Sequence]) -> List[Reply]:
        self.send(*commands)
        return [self.read() for _ in commands]

    def _fill(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("redis closed the connection")
        self.buf += data

    def _line(self) -> bytearray:
        while True:
            at = self.buf.find(b"\r\n")
            if at >= 0:
                line = self.buf[:at]
                del self.buf[:at + 2]
                return line
            self._fill()

    def _bulk(self, n: int) -> bytearray:
        out = bytearray(n)
        view = memoryview(out)
        have = min(n, len(self.buf))
        view[:have] = self.buf[:have]
        del self.buf[:have]
        while have < n:
            got = self.sock.recv_into(view[have:])
            if not got:
                raise ConnectionError("redis closed the connection")
            have += got
        while len(self.buf) < 2:
            self._fill()
        del self.buf[:2]  # the CRLF after the value
        return out

    def close(self) -> None:
        self.sock.close()
