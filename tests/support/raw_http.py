"""HTTP/1.1 over a plain socket, for tests that need the bytes a server writes (its headers in order, pipelined
answers, a connection it closes): :func:`connect`, :func:`read_response` and :func:`exchange`; and
:class:`RecordingTransport`, the socket's test double for a protocol driven in process.

It reads what RFC 9112 section 6 frames: interim 1xx answers (kept apart), a body by ``Content-Length``, by
chunked transfer coding, or up to the close; none for HEAD, 204 and 304. Nothing here is clever about errors: a
server that breaks framing fails the test that reads it.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from typing import Any

TIMEOUT_S = 60.0
"""A guard against a server that never answers (the test then fails), not a time budget."""


@dataclass
class RawResponse:
    """One answer: ``status``, ``head`` (the status line and header lines as sent, without the blank line),
    ``headers`` (lowercased names; the last of a repeated one), ``body`` (de-chunked), ``raw`` (every byte of it as
    sent), and the interim 1xx answers before it."""

    status: int
    head: bytes
    headers: dict[str, str]
    body: bytes
    raw: bytes
    interim: list[bytes] = field(default_factory=list)


def connect(port: int, timeout: float = TIMEOUT_S) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class Reader:
    """Answers read one after another from one connection (pipelining keeps them in order)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.closed = False

    def _fill(self) -> bool:
        try:
            data = self.sock.recv(1 << 20)
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return False
        self.buffer += data
        return True

    def _take_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            if not self._fill():
                raise ConnectionError(f"closed before {marker!r}; buffered {self.buffer[:200]!r}")
        part, _, self.buffer = self.buffer.partition(marker)
        return part + marker

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not self._fill():
                raise ConnectionError(f"closed {size - len(self.buffer)} bytes short")
        part, self.buffer = self.buffer[:size], self.buffer[size:]
        return part

    def response(self, method: str = "GET") -> RawResponse:
        interim: list[bytes] = []
        while True:
            head = self._take_until(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            if 100 <= status < 200:
                interim.append(head)
                continue
            break
        lines = head[:-4].split(b"\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        raw = head
        if method == "HEAD" or status in (204, 304):
            body = b""
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size_line = self._take_until(b"\r\n")
                raw += size_line
                size = int(size_line.split(b";")[0], 16)
                chunk = self._take(size + 2)
                raw += chunk
                if not size:
                    break
                body += chunk[:-2]
        elif "content-length" in headers:
            body = self._take(int(headers["content-length"]))
            raw += body
        else:
            while self._fill():
                pass
            body, self.buffer = self.buffer, b""
            raw += body
        return RawResponse(status, head[:-4], headers, body, raw, interim)

    def closed_by_server(self) -> bool:
        """True when the server closes the connection without writing another byte (reads up to the close)."""
        while self._fill():
            pass
        return not self.buffer


def exchange(port: int, request: bytes, methods: list[str] | None = None, count: int = 1) -> list[RawResponse]:
    """Send ``request`` (one or several pipelined requests) on a new connection and read ``count`` answers
    (``methods``: each one's request method, for HEAD)."""
    methods = methods or ["GET"] * count
    with connect(port) as sock:
        sock.sendall(request)
        reader = Reader(sock)
        return [reader.response(method) for method in methods]


class RecordingTransport(asyncio.Transport):
    """A transport that keeps what is written to it (a test double of the socket's): every write, or with
    ``keep=1`` only the last (a benchmark's thousands of answers)."""

    def __init__(self, keep: int | None = None) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closing = False
        self.keep = keep

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))
        if self.keep is not None and len(self.writes) > self.keep:
            del self.writes[: -self.keep]

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass
