"""The ceiling for bench_http.py: the fastest HTTP/1.1 server Python runs on this machine. A uvloop event loop and
an httptools parser, no ASGI, no framework: every complete request is answered with the same fixed response
(bare_app.py's Wiji-shaped JSON body, its headers and keep-alive) in one ``transport.write``.

Usage: python bench/raw_server.py PORT   (serves 127.0.0.1:PORT until SIGTERM or SIGINT)
"""

from __future__ import annotations

import asyncio
import signal
import sys

import httptools
import uvloop

BODY = b'{"scheme":"wiji","format":"base32","ids":["0691J1V9G0000G7Q3N6T1XAFNG"]}'
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)


class RawProtocol(asyncio.Protocol):
    """One connection: parse with httptools, answer each complete request with RESPONSE."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_message_complete(self) -> None:
        assert self.transport is not None
        self.transport.write(RESPONSE)
        if not self.parser.should_keep_alive():
            self.transport.close()


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
