"""Small shared test helpers: settings in a temp state dir, an app with its lifespan running, free ports."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from app import __version__
from app.lease.embedded import EmbeddedBackend
from app.main import create_app
from app.metrics import Metrics
from app.node import Node
from app.pool import IdentityPool
from app.schemes import get_scheme, schemes
from app.settings import Settings

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


def new_node(state_dir: Path, clock: FakeClock | None = None, **overrides: Any) -> Node:
    """A :class:`Node` (not started) on the real embedded backend in ``state_dir``, ``clock`` injected (None: the
    node's own, the real clock)."""
    settings = make_settings(state_dir, **overrides)
    return Node(settings, EmbeddedBackend(state_dir), Metrics(list(SCHEMES), __version__), clock=clock)


@contextlib.asynccontextmanager
async def started(node: Node) -> AsyncIterator[Node]:
    """``node`` started (first claims made); stopped on exit (final marks, claims released), whatever happened."""
    try:
        await node.start()
        yield node
    finally:
        await node.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_process(
    state_dir: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 20.0
) -> Iterator[str]:
    """A ready ``idmint serve`` using ``state_dir`` itself as its state dir; yields its base URL; stops it by PID."""
    replica = Replica(state_dir, {"IDMINT_STATE_DIR": str(state_dir), **(env or {})}, *args)
    try:
        replica.wait("/readyz", timeout=timeout)
        yield replica.url
    finally:
        replica.stop()


class Replica:
    """A real ``idmint serve`` subprocess on a free loopback port; started without waiting, stopped by PID.

    Its state dir is ``state_dir/state-<port>`` (its own) unless ``env`` sets IDMINT_STATE_DIR; its log is
    ``state_dir/replica-<port>.log``."""

    def __init__(self, state_dir: Path, env: dict[str, str], *args: str, port: int | None = None) -> None:
        self.port = free_port() if port is None else port
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = state_dir / f"replica-{self.port}.log"
        state_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 -- closed in stop()
        full_env = {**os.environ, "IDMINT_STATE_DIR": str(state_dir / f"state-{self.port}"), **env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port), *args],
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", params=params, timeout=30.0)

    def wait(self, path: str = "/healthz", status: int = 200, timeout: float = 30.0) -> httpx.Response:
        """Poll ``path`` until it answers ``status``; fail with the server's log otherwise."""
        deadline = time.monotonic() + timeout
        last: httpx.Response | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"replica exited with {self.proc.returncode}:\n{self.log()}")
            try:
                last = httpx.get(f"{self.url}{path}", timeout=2.0)
                if last.status_code == status:
                    return last
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        body = last.text if last is not None else "(no answer)"
        raise AssertionError(f"{self.url}{path} did not answer {status} in {timeout} s; last: {body}\n{self.log()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def kill(self) -> None:
        """SIGKILL: no clean release, no final mark; the lease must expire on its own."""
        self.proc.kill()
        self.proc.wait()
        self._log.close()


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
