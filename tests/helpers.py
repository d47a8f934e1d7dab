"""Small shared test helpers: settings in a temp state dir, an app with its lifespan running, the one FakeClock.

Real server processes: tests/support/server.py."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from app import __version__
from app.issuing.node import Node
from app.main import create_app
from app.metrics import Metrics
from app.schemes import get_scheme, schemes
from app.schemes.pool import IdentityPool
from app.settings import Settings
from app.storage.base import Capabilities, Storage
from app.storage.embedded import open_embedded
from app.storage.lease import LeaseBackend
from app.storage.ledger import MemoryLedgerStore
from app.storage.sequences import MemorySequenceStore

SCHEMES = tuple(schemes())
HEX_DIGITS = {name: scheme.packed_bytes * 2 for name, scheme in schemes().items()}
CLAIMING = tuple(name for name, scheme in schemes().items() if scheme.identity_pool(Settings()) is not None)
"""The schemes whose node claims an identity (muid, eight-byte, hlc-ulid, siq, snowflake)."""
TIMESTAMP_FIELD = {
    "muid": "timestamp_us",
    "eight-byte": "timestamp_ms",
    "hlc-ulid": "timestamp_ms",
    "siq": "seconds",
    "wiji": "timestamp_us",
    "uuidv7": "timestamp_ms",
    "ulid": "timestamp_ms",
    "typeid": "timestamp_ms",
    "ksuid": "timestamp_s",
    "snowflake": "timestamp_ms",
}
"""The decoded field that holds each scheme's timestamp."""


def pool_spec(scheme: str, *, settings: dict[str, Any] | None = None, **fields: Any) -> IdentityPool:
    """The pool a node would claim ``scheme``'s identity from under ``settings`` (the scheme's identity pool),
    with ``fields`` replaced (``minimum``, ``maximum``, ``static``, ``draw``...)."""
    pool = get_scheme(scheme).identity_pool(Settings(**(settings or {})))
    assert pool is not None, f"{scheme} claims no identity"
    return dataclasses.replace(pool, **fields)


def make_settings(state_dir: Path, **overrides: Any) -> Settings:
    return Settings(state_dir=state_dir, **overrides)


@contextlib.contextmanager
def running_app(state_dir: Path, clock: FakeClock | None = None, **overrides: Any) -> Iterator[TestClient]:
    """The real ASGI app, lifespan started (claims made), driven over HTTP semantics by TestClient; ``clock``
    injected (the node's, and the API keys' quota clock; None: the real clocks)."""
    with TestClient(create_app(make_settings(state_dir, **overrides), clock=clock)) as client:
        yield client


def routed_client(client: TestClient) -> TestClient:
    """A TestClient of the FastAPI app behind ``client``'s front (requests through FastAPI, not the hot path), run
    on ``client``'s event loop. The node's locks and futures belong to that loop; an unentered TestClient runs each
    request on a loop of its own, where a request that waited for the high-water mark's lock while the node's
    background task held it was woken on a loop asleep in select, never to run again (rehearsal s5: a GET of two
    HLC-ULIDs hung until the suite was stopped)."""
    routed = TestClient(client.app.app)  # type: ignore[attr-defined]
    routed.portal = client.portal
    return routed


@contextlib.asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """Run the ASGI lifespan protocol (httpx.ASGITransport does not): startup before, shutdown after."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    task = asyncio.create_task(
        app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, inbox.get, outbox.put)
    )
    message = await outbox.get()
    assert message["type"] == "lifespan.startup.complete", message
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        message = await outbox.get()
        assert message["type"] == "lifespan.shutdown.complete", message
        await task


class LoopTurns:
    """The event loop's turns counted by another task while an ``async with`` block runs (:attr:`count`): a test of
    work sliced across turns records ``turns.count`` in each slice and asserts the slices saw different counts
    (other work ran between them). Counts on the loop itself, never on time, so a busy machine changes nothing."""

    def __init__(self) -> None:
        self.count = 0
        self._running = True
        self._task: asyncio.Task[None] | None = None

    async def _turn(self) -> None:
        while self._running:
            self.count += 1
            await asyncio.sleep(0)

    async def __aenter__(self) -> LoopTurns:
        self._task = asyncio.create_task(self._turn())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._running = False
        assert self._task is not None
        await self._task


def new_node(state_dir: Path, clock: FakeClock | None = None, **overrides: Any) -> Node:
    """A :class:`Node` (not started) on the real embedded backend in ``state_dir``, ``clock`` injected (None: the
    node's own, the real clock)."""
    settings = make_settings(state_dir, **overrides)
    storage = open_embedded(settings, clock or time.time_ns)
    return Node(settings, storage, Metrics(list(SCHEMES), __version__), clock=clock)


def storage_of(backend: LeaseBackend, capabilities: Capabilities) -> Storage:
    """A :class:`Storage` around one lease backend (with ``capabilities``), the memory fakes for the ledger's and
    the sequences' stores beside it: for tests of the node above a backend they build themselves."""
    return Storage("test", capabilities, backend, MemoryLedgerStore(), MemorySequenceStore())


@contextlib.asynccontextmanager
async def started(node: Node) -> AsyncIterator[Node]:
    """``node`` started (first claims made); stopped on exit (final marks, claims released), whatever happened."""
    try:
        await node.start()
        yield node
    finally:
        await node.stop()


class FakeClock:
    """The tests' one clock: inject it wherever the code under test takes a clock (generators, nodes, lease
    sessions and backends, sequence buffers, token buckets), so no test needs a time-freezing library.

    ``clock()`` returns ns since the Unix epoch (like ``time.time_ns``); :meth:`seconds` returns the same reading
    in seconds (float, like ``time.monotonic``: pass ``clock.seconds`` where seconds are taken). It starts at
    ``ms`` milliseconds (or use :meth:`from_ns`, :meth:`from_us`, :meth:`from_s`); ``step`` ns are added after every
    reading (0: frozen); :attr:`readings` counts the readings. Set :attr:`ns` (or call :meth:`set_ms` /
    :meth:`set_s`) to jump it, backwards included (a clock rollback).

    ``running=True``: every reading also adds the real time elapsed since the clock was made
    (``time.monotonic_ns``), for code that sleeps in real time between readings (a node's background tasks);
    jumps (``clock.ns -= ...``) still shift it. :meth:`running_from_now` makes one that reads the wall-clock time
    plus ``offset_s``.
    """

    NS_IN_US = 1_000
    NS_IN_MS = 1_000_000
    NS_IN_S = 1_000_000_000

    def __init__(self, ms: int = 1_645_557_742_000, step: int = 0, *, running: bool = False) -> None:
        self.ns = ms * self.NS_IN_MS
        self.step = step
        self.readings = 0
        self._made_at: int | None = time.monotonic_ns() if running else None

    @classmethod
    def from_ns(cls, ns: int, step: int = 0, *, running: bool = False) -> FakeClock:
        clock = cls(0, step, running=running)
        clock.ns = ns
        return clock

    @classmethod
    def from_us(cls, us: int, step: int = 0) -> FakeClock:
        return cls.from_ns(us * cls.NS_IN_US, step)

    @classmethod
    def from_s(cls, s: float, step: int = 0) -> FakeClock:
        clock = cls(0, step)
        clock.set_s(s)
        return clock

    @classmethod
    def running_from_now(cls, offset_s: float = 0.0) -> FakeClock:
        return cls.from_ns(time.time_ns() + round(offset_s * cls.NS_IN_S), running=True)

    def __call__(self) -> int:
        now = self.ns
        self.ns += self.step
        self.readings += 1
        if self._made_at is not None:
            now += time.monotonic_ns() - self._made_at
        return now

    def seconds(self) -> float:
        """A reading in seconds (``ns / 1e9``): the clock for code that takes monotonic seconds."""
        return self() / self.NS_IN_S

    def set_ms(self, ms: int) -> None:
        self.ns = ms * self.NS_IN_MS

    def set_s(self, s: float) -> None:
        self.ns = round(s * self.NS_IN_S)

    def advance_s(self, s: float) -> None:
        """Move the clock ``s`` seconds on (back when negative)."""
        self.ns += round(s * self.NS_IN_S)


def assert_not_scratch(text: Any) -> None:
    """``text`` (what a batch hands a stream) shares no memory with this thread's reused scratch arrays
    (:func:`app.schemes._text.scratch`), which the next encode on this thread overwrites while the transport may still
    hold the text."""
    import numpy as np

    from app.schemes import _text

    view = np.frombuffer(text, dtype=np.uint8)
    for key, array in _text._scratch.arrays.items():
        assert not np.shares_memory(view, array), f"encode_lines handed out scratch array {key!r}"


def assert_json_members(batch: Any, scheme: Any, fmt: str, written_above: int) -> None:
    """``batch.json_members(fmt)`` is None for ``written_above`` IDs or fewer (the caller frames the lines), else
    exactly the IDs' JSON array members as ``json.dumps`` writes them (no brackets), in issue order. A stream's
    ``batch.encode_lines(fmt)`` is the same IDs as lines, byte for byte."""
    import json

    lines = batch.encode_lines(fmt)
    assert bytes(lines) == "".join(scheme.format(value, fmt) + "\n" for value in batch.values()).encode()
    assert_not_scratch(lines)
    members = batch.json_members(fmt)
    if batch.count <= written_above:
        assert members is None
        return
    assert members is not None
    expected = json.dumps([scheme.format(value, fmt) for value in batch.values()], separators=(",", ":"))
    assert bytes(members) == expected[1:-1].encode()
