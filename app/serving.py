"""The HTTP/1.1 connection layer of ``idmint serve``: uvicorn's httptools protocol with the bounds it lacks.

What uvicorn 0.3x-0.5x enforces by itself (read from its source): ``timeout_keep_alive`` closes a connection idle
*after a response*; ``h11_max_incomplete_event_size`` bounds the header buffer of the **h11** protocol only (and
answers 400, not 431). Neither protocol bounds the headers of the default, faster **httptools** protocol, neither
has a deadline for a request's headers, neither closes a fresh connection that never sends a byte, and a response
whose client reads nothing waits in ``send`` for ever. Switching to h11 would buy the size bound only, at a cost in
single-ID throughput, and still need the timers; so :class:`BoundedHttpToolsProtocol` keeps httptools and adds:

* **header size**: a request whose headers (request line and fields, counted as parsed) pass
  ``IDMINT_MAX_HEADER_BYTES`` is answered **431** and the connection closed, also while they are still arriving
  (then counted by the socket reads after the one they began in), so at most the limit plus one socket read is
  buffered for it;
* **header deadline**: a request's headers must be complete ``IDMINT_HEADER_TIMEOUT`` seconds after its first
  byte, else **408** and the connection is closed;
* **idle connections**: a fresh connection is idle like a keep-alive one and is closed after
  ``IDMINT_KEEP_ALIVE_TIMEOUT`` seconds without a byte (uvicorn's own ``timeout_keep_alive`` timer, armed at once);
* **send timeout**: while the client accepts no bytes (the transport's write buffer stays above its high-water
  mark, so ``send`` is paused) for ``IDMINT_STREAM_SEND_TIMEOUT`` seconds, the connection is aborted; the response
  (in practice a stream) then sees a disconnected client, ends, and gives its stream slot back.

``idmint serve`` passes it to uvicorn as ``http="app.serving:BoundedHttpToolsProtocol"`` (an import string, so each
worker process builds its own); its limits come from the same ``IDMINT_*`` environment, read once per process.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("idmint.http")

PROTOCOL_IMPORT = "app.serving:BoundedHttpToolsProtocol"


@dataclass(frozen=True)
class ConnectionLimits:
    """The per-connection bounds: ``max_header_bytes`` (bytes), ``header_timeout``, ``send_timeout`` (seconds)."""

    max_header_bytes: int
    header_timeout: float
    send_timeout: float


@functools.cache
def connection_limits() -> ConnectionLimits:
    """The limits of this process, from the ``IDMINT_*`` environment (validated by :func:`app.settings.load_settings`,
    which raises ConfigError)."""
    from app.settings import load_settings

    settings = load_settings()
    return ConnectionLimits(settings.max_header_bytes, settings.header_timeout, settings.stream_send_timeout)


def _response(status: int, reason: str, detail: str) -> bytes:
    body = ('{"detail": "' + detail + '"}').encode("ascii")
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    ).encode("ascii") + body


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's :class:`HttpToolsProtocol` with a header size limit (431), a header deadline (408), an idle timer
    from the first moment of a connection, and a send timeout (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = connection_limits()
        self.in_headers = False  # between a request's first byte and the end of its headers
        self.header_bytes = 0  # bytes of the socket reads after the one the headers began in
        self.read_bytes = 0  # size of the socket read being parsed
        self.refused = False  # answered 431/408: the parser's further callbacks are ignored
        self.header_timer: asyncio.TimerHandle | None = None
        self.send_timer: asyncio.TimerHandle | None = None

    # -- connection ---------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_idle_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        self._cancel_send_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # The hot path (a whole request in one read) pays for two attribute reads here and no timer: the header
        # deadline is armed only when a read ends with the headers unfinished.
        continued = self.in_headers
        self.read_bytes = len(data)
        super().data_received(data)
        if not self.in_headers:
            cycle = self.cycle
            if (cycle is None or cycle.response_complete) and not self.transport.is_closing():
                self._arm_idle_timer()  # bytes that start no request (blank lines) do not keep a connection open
            return
        if self.transport.is_closing():
            return
        if continued:
            self.header_bytes += len(data)
        if max(self._parsed_header_bytes(), self.header_bytes) > self.limits.max_header_bytes:
            self._refuse_too_large()
        elif self.header_timer is None:
            self.header_timer = self.loop.call_later(self.limits.header_timeout, self._header_timed_out)

    # -- parser callbacks ---------------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.refused:
            return
        super().on_message_begin()
        self.in_headers = True
        self.header_bytes = 0

    def on_headers_complete(self) -> None:
        if self.refused:
            return
        self.in_headers = False
        if self.header_timer is not None:
            self._cancel_header_timer()
        if (
            self.header_bytes + self.read_bytes > self.limits.max_header_bytes
            and self._parsed_header_bytes() > self.limits.max_header_bytes
        ):
            self._refuse_too_large()
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self.refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self.refused:
            super().on_message_complete()

    def _parsed_header_bytes(self) -> int:
        """The request line's target and the header fields parsed so far, with their separators."""
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def _refuse_too_large(self) -> None:
        self._refuse(
            431,
            "Request Header Fields Too Large",
            f"request headers must be at most {self.limits.max_header_bytes} bytes (IDMINT_MAX_HEADER_BYTES)",
        )

    # -- write flow control -------------------------------------------------------------------------------------
    def pause_writing(self) -> None:
        super().pause_writing()
        if self.send_timer is None:
            self.send_timer = self.loop.call_later(self.limits.send_timeout, self._send_timed_out)

    def resume_writing(self) -> None:
        self._cancel_send_timer()
        super().resume_writing()

    # -- timers -------------------------------------------------------------------------------------------------
    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm_idle_timer(self) -> None:
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def _cancel_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _cancel_send_timer(self) -> None:
        if self.send_timer is not None:
            self.send_timer.cancel()
            self.send_timer = None

    def _header_timed_out(self) -> None:
        self.header_timer = None
        if self.transport.is_closing() or not self.in_headers:
            return
        if not self._between_requests():  # a pipelined request waits for the response before it: so do we
            self.header_timer = self.loop.call_later(self.limits.header_timeout, self._header_timed_out)
            return
        self._refuse(
            408,
            "Request Timeout",
            f"request headers must arrive within {self.limits.header_timeout:g} s (IDMINT_HEADER_TIMEOUT)",
        )

    def _send_timed_out(self) -> None:
        self.send_timer = None
        if self.transport.is_closing():
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "client"
        path = self.cycle.scope.get("path", "") if self.cycle is not None else ""
        log.info(
            "%s accepted no bytes of %s for %g s (IDMINT_STREAM_SEND_TIMEOUT): connection closed",
            client,
            path or "a response",
            self.limits.send_timeout,
        )
        self.transport.abort()  # close() would wait to flush what the client does not read

    def _refuse(self, status: int, reason: str, detail: str) -> None:
        """Answer ``status`` and close, or just close when a response is under way (pipelining)."""
        self.refused = True
        self.in_headers = False
        self._cancel_header_timer()
        if self._between_requests():
            self.transport.write(_response(status, reason, detail))
            self.transport.close()
        else:
            self.transport.abort()
