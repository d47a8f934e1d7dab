"""Streams that hostile clients cannot turn against the node (the ``/v1/ids/{scheme}/stream`` route's machinery).

* **Checked before the first byte.** Besides the parameters (parsed like every issue request), the first chunk is
  generated before the response starts, so whatever the generator refuses (an ``after`` too far ahead, a node that
  stopped being ready) is a 422 or 503, never a truncated 200. A stream whose expected duration at its scheme's cap
  (``count`` / :meth:`~app.issuing.issuer.Issuer.capacity_per_second`) exceeds ``IDMINT_MAX_STREAM_SECONDS`` is
  refused with the figures.
* **Bounded in number.** At most ``IDMINT_MAX_CONCURRENT_STREAMS`` run at once per node (:class:`StreamSlots`);
  beyond, 429 with a Retry-After of the soonest expected end of a running stream. A stream whose client accepts
  no bytes for ``IDMINT_STREAM_SEND_TIMEOUT`` has its connection closed (:mod:`app.serving`), so it ends and
  frees its slot like an aborted one.
* **Ended by a client that goes.** Between chunks the stream yields to the event loop and asks whether the client
  disconnected: a stream of a scheme that never waits would otherwise never suspend (uvicorn's ``send`` returns at
  once after a disconnect) and would generate its whole count for nobody while starving every other request. An
  aborted stream stops within one chunk.
* **Behind single requests.** Chunks are issued with ``stream=True``, which yields a capacity-capped generator to
  single and batch requests waiting for the same tick (:class:`app.issuing.issuer.PriorityGate`), and takes what
  accrued once per slice of the generator's lookback (:data:`app.issuing.issuer.STREAM_SLICE_S`) rather than once per
  tick.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from app.errors import IdmintError, InvalidOptionError, TooManyRequestsError, UpgradeRequiredError
from app.issuing.issuer import Charge, Issued, Issuer

log = logging.getLogger("idmint.api")

STREAM_CHUNK = 65_536
"""IDs per generated chunk of a stream (one shared timestamp prefix; ~1.7 MB of text for 26-char forms)."""
CHUNK_SECONDS_AT_CAP = 0.1
"""For a capacity-capped scheme a chunk holds at most this many seconds of the cap (eight-byte: 6,400 IDs per
generator ID), so its client gets a steady flow and an abort is seen within a tenth of a second of generation."""
FIRST_CHUNK = 4096
"""IDs generated before the response starts (validates the request against the generator itself)."""
MEDIA_TYPE = "text/plain; charset=us-ascii"
SEND_PIECE_BYTES = 262_144
"""A chunk's text (each of its batches' text) goes to the server in pieces of at most this many bytes, each a
``memoryview`` of the text (slicing ``bytes`` copied every streamed byte once more: 1 to 4 ns of server CPU per
ID). Handing uvicorn a whole 1.7-2.4 MB chunk made it join a second copy of that size (chunked framing) beside the
chunk and the chunk's random draw; glibc then gave the freed heap top back to the kernel after every chunk and
faulted it in again on the next (minor faults on every chunk). Pieces keep the transient copies small and
cache-resident. Figures: docs/serving.md, "Figures behind choices in the code"."""


STALLED_S = 0.25
"""A stream that has handed nothing to the server for this long is taken as stalled (its client reads nothing);
a running one hands a piece every few ms, or every tenth of a second at a slow scheme's cap."""


class StreamSlot:
    """One running stream's progress: ``count`` IDs asked for, ``sent`` so far, since ``started``, the last piece
    handed to the server at ``progressed`` (monotonic s)."""

    __slots__ = ("count", "sent", "started", "progressed")

    def __init__(self, count: int, started: float) -> None:
        self.count = count
        self.sent = 0
        self.started = started
        self.progressed = started

    def seconds_left(self, now: float, send_timeout: float) -> float:
        """Expected seconds to its end: at the rate it has run so far, or, stalled, when the send timeout drops its
        client (infinite before its first chunk)."""
        if now - self.progressed > STALLED_S:
            return max(self.progressed + send_timeout - now, 0.0)
        if not self.sent:
            return math.inf
        return (self.count - self.sent) * max(now - self.started, 0.0) / self.sent


class StreamSlots:
    """The node's cap on concurrent streams. :meth:`take` raises TooManyRequestsError when all are in use, with a
    Retry-After of the soonest expected end of a running stream (at its rate so far, or for a stalled one, when
    ``send_timeout`` drops it), within 1..``max_seconds``."""

    def __init__(
        self,
        limit: int,
        max_seconds: float = 300.0,
        send_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.max_seconds = max_seconds
        self.send_timeout = send_timeout
        self.clock = clock
        self.running: set[StreamSlot] = set()

    @property
    def active(self) -> int:
        return len(self.running)

    def retry_after(self) -> int:
        """Seconds until a slot is expected to free (>= 1, at most ``max_seconds`` rounded up)."""
        now = self.clock()
        soonest = min((slot.seconds_left(now, self.send_timeout) for slot in self.running), default=0.0)
        return max(1, math.ceil(min(soonest, self.max_seconds)))

    def take(self, count: int = 0) -> StreamSlot:
        if self.active >= self.limit:
            raise TooManyRequestsError(
                f"this node already serves {self.active} streams (IDMINT_MAX_CONCURRENT_STREAMS"
                f" = {self.limit}); retry shortly or ask for a batch",
                self.retry_after(),
            )
        slot = StreamSlot(count, self.clock())
        self.running.add(slot)
        return slot

    def give_back(self, slot: StreamSlot) -> None:
        self.running.discard(slot)


def check_duration(issuer: Issuer, count: int, max_seconds: float) -> None:
    """Refuse (InvalidOptionError) a stream that would take longer than ``max_seconds`` at the scheme's cap."""
    cap = issuer.capacity_per_second()
    if cap and count / cap > max_seconds:
        raise InvalidOptionError(
            f"a stream of {count:,} {issuer.name} IDs would take {count / cap:.0f} s at this node's cap of "
            f"{cap:,.0f} IDs/s, over IDMINT_MAX_STREAM_SECONDS ({max_seconds:g} s); ask for at most "
            f"{int(cap * max_seconds):,} per stream"
        )


async def lines(
    issuer: Issuer, count: int, fmt: str, options: dict[str, Any], first: Issued | None = None, *, charge: Charge
) -> AsyncIterator[bytes]:
    """``count`` IDs as newline-terminated text in form ``fmt`` (the first ``first.count`` already issued), in
    chunks of at most STREAM_CHUNK IDs (and CHUNK_SECONDS_AT_CAP of a capped scheme), each charged to ``charge``,
    so memory does not grow with ``count``. Raises what :meth:`Issuer.issue` raises."""
    async for issued in _chunks(issuer, count, options, first, charge=charge):
        yield issued.encode(fmt)


async def _chunks(
    issuer: Issuer, count: int, options: dict[str, Any], first: Issued | None = None, *, charge: Charge
) -> AsyncIterator[Issued]:
    """The issued chunks behind :func:`lines` (their ``count`` is known, so nobody has to count newlines)."""
    remaining = count
    if first is not None:
        remaining -= first.count
        yield first
    cap = issuer.capacity_per_second()
    chunk = STREAM_CHUNK if not cap else max(1, min(STREAM_CHUNK, int(cap * CHUNK_SECONDS_AT_CAP)))
    while remaining:
        issued = await issuer.issue(min(remaining, chunk), options, charge=charge, stream=True)
        remaining -= issued.count
        yield issued


IDS_IN_MESSAGE = "idmint.ids"
"""Key of a stream's ``http.response.body`` messages: how many IDs the message starts (the first piece of each
chunk carries the whole chunk's count, the others 0), so a layer that meters IDs per API key can charge a chunk
before any of it is sent, without counting newlines (``bytes.count`` cost 0.1 ms per 256 KiB piece, half a wiji
stream's own cost). ASGI servers ignore the key."""


REQUEST_CYCLE = "idmint.cycle"
"""Scope key under which :mod:`app.serving`'s protocol puts a weak reference to the request's uvicorn request
cycle (the cycle holds the scope), whose ``disconnected`` turns True the moment its connection is lost: between
chunks a stream reads it instead of Starlette's ``Request.is_disconnected`` (an anyio cancel scope and a cancelled
``receive`` per call: 29 to 41 us alone on a loaded machine, 8% of a wiji stream's server samples in py-spy).
Absent under another server (the stream then asks Starlette)."""


class IdStream(StreamingResponse):
    """A stream of IDs that holds one of the node's stream slots until it ends, however it ends. ``pieces`` yields
    (bytes to send, IDs of the chunk they start); each body message carries the latter under :data:`IDS_IN_MESSAGE`."""

    def __init__(
        self, pieces: AsyncIterator[tuple[bytes | memoryview, int]], slots: StreamSlots, slot: StreamSlot, count: int
    ) -> None:
        super().__init__((), media_type=MEDIA_TYPE, headers={"x-idmint-count": str(count)})
        self.pieces = pieces
        self.slots = slots
        self.slot = slot

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        slot, clock = self.slot, self.slots.clock
        async for piece, ids in self.pieces:
            slot.sent += ids
            await send({"type": "http.response.body", "body": piece, "more_body": True, IDS_IN_MESSAGE: ids})
            slot.progressed = clock()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slots.give_back(self.slot)


async def open_stream(
    request: Request,
    issuer: Issuer,
    count: int,
    fmt: str,
    options: dict[str, Any],
    slots: StreamSlots,
    max_seconds: float,
    charge: Charge,
    wrap: Callable[[Issued], Issued] | None = None,
) -> IdStream:
    """Validate a stream completely, take a slot, issue its first chunk, and return the response. Every chunk is
    issued with ``charge`` (a keyed stream's is :func:`~app.issuing.issuer.no_charge`: its IDs are charged as they
    are sent, :meth:`ApiKeys.paced <app.api.auth.ApiKeys.paced>`). ``wrap`` (public IDs) rewrites each chunk before
    it is encoded.

    Raises UpgradeRequiredError (426) over HTTP/1.0, InvalidOptionError (422), TooManyRequestsError (429) or
    NotReadyError (503) before any byte is sent.
    """
    if request.scope.get("http_version") == "1.0":
        raise UpgradeRequiredError(
            "a stream needs HTTP/1.1: its chunked transfer coding is how a client tells a complete stream from a cut "
            "one, and HTTP/1.0 has none (ask again over HTTP/1.1, or ask /v1/ids/{scheme}?count=N for batches)"
        )
    check_duration(issuer, count, max_seconds)
    slot = slots.take(count)
    try:
        first = await issuer.issue(min(count, FIRST_CHUNK), options, charge=charge, stream=True)
    except BaseException:
        slots.give_back(slot)
        raise
    return IdStream(_body(request, issuer, count, fmt, options, first, charge, wrap), slots, slot, count)


async def _body(
    request: Request,
    issuer: Issuer,
    count: int,
    fmt: str,
    options: dict[str, Any],
    first: Issued,
    charge: Charge,
    wrap: Callable[[Issued], Issued] | None = None,
) -> AsyncIterator[tuple[bytes | memoryview, int]]:
    sent = 0
    cycle_ref = request.scope.get(REQUEST_CYCLE)
    cycle = cycle_ref() if cycle_ref is not None else None  # alive while its connection serves this stream
    try:
        async for chunk in _chunks(issuer, count, options, first, charge=charge):
            issued = chunk if wrap is None else wrap(chunk)
            # Every batch of the chunk is encoded before its first piece goes out (an encoder that raised would
            # otherwise leave an API key charged for IDs never sent), and the texts are not joined: issued.encode()
            # copied each chunk once more (a SIQ chunk is 6 or 7 batches).
            texts = [batch.encode_lines(fmt) for batch in issued.batches]
            ids = issued.count  # the chunk's first piece carries the chunk's count, the others 0
            for text in texts:
                if len(text) <= SEND_PIECE_BYTES:
                    yield memoryview(text) if isinstance(text, bytearray) else text, ids
                    ids = 0
                    continue
                whole = memoryview(text)  # pieces are views of the chunk's text: a bytes slice would copy it
                for start in range(0, len(text), SEND_PIECE_BYTES):
                    yield whole[start : start + SEND_PIECE_BYTES], ids
                    ids = 0
            sent += issued.count  # not text.count(b"\n"): that byte scan cost ~3 ms per 1.7 MB chunk
            await asyncio.sleep(0)  # let the disconnect listener, and every other request, run
            if sent < count and (cycle.disconnected if cycle is not None else await request.is_disconnected()):
                log.debug("%s: stream aborted by its client after %d of %d IDs", issuer.name, sent, count)
                return
    except IdmintError as exc:
        # Headers are gone: end the response early (no final chunk) so the client sees a truncated body.
        log.warning("%s: stream stopped after %d of %d IDs: %s", issuer.name, sent, count, exc)
        raise
