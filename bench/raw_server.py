"""The ceiling for bench_http.py: the fastest HTTP/1.1 server Python runs on this machine. A uvloop event loop and
an httptools parser, no ASGI, no framework:

* any path but ``/stream``: the same fixed response (bare_app.py's Wiji-shaped JSON body, its headers and
  keep-alive) in one ``transport.write``;
* ``/stream?count=N&width=W``: N lines of W - 1 fixed characters and a newline, chunked as idmint streams them
  (frames of 65,536 lines, idmint's stream chunk), every frame built once per width and handed to the transport as
  it is, honouring the transport's flow control (pause_writing/resume_writing): the bytes-per-second ceiling of a
  stream through loopback to the same reader, with no ID generated, no framing work and no copy in Python.

Usage: python bench/raw_server.py PORT   (serves 127.0.0.1:PORT until SIGTERM or SIGINT)
"""

from __future__ import annotations

import asyncio
import functools
import signal
import sys
from urllib.parse import parse_qs, urlsplit

import httptools
import uvloop

BODY = b'{"scheme":"wiji","format":"base32","ids":["0691J1V9G0000G7Q3N6T1XAFNG"]}'
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)
STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=us-ascii\r\ntransfer-encoding: chunked\r\n\r\n"
CHUNK_LINES = 65_536
"""Lines per chunked frame: idmint's stream chunk (app.api.streams.STREAM_CHUNK)."""


@functools.cache
def frame(lines: int, width: int) -> bytes:
    """One chunked-encoding frame of ``lines`` lines of ``width`` bytes (``width - 1`` x's and a newline)."""
    body = (b"x" * (width - 1) + b"\n") * lines
    return b"%x\r\n%s\r\n" % (len(body), body)


class RawProtocol(asyncio.Protocol):
    """One connection: parse with httptools, answer each complete request with RESPONSE or a stream."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.writable = asyncio.Event()
        self.writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.writable.set()

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_message_complete(self) -> None:
        assert self.transport is not None
        target = urlsplit(self.url.decode("ascii"))
        if target.path == "/stream":
            query = parse_qs(target.query)
            count, width = int(query["count"][0]), int(query.get("width", ["27"])[0])
            asyncio.get_running_loop().create_task(self.stream(count, width))
            return
        self.transport.write(RESPONSE)
        if not self.parser.should_keep_alive():
            self.transport.close()

    async def stream(self, count: int, width: int) -> None:
        transport = self.transport
        assert transport is not None
        transport.write(STREAM_HEAD)
        while count > 0 and not transport.is_closing():
            lines = min(count, CHUNK_LINES)
            transport.write(frame(lines, width))
            count -= lines
            await self.writable.wait()
        transport.write(b"0\r\n\r\n")
        if not self.parser.should_keep_alive():
            transport.close()


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set_result, None)
    server = await loop.create_server(RawProtocol, "127.0.0.1", port, backlog=2048)
    async with server:
        await stop


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
