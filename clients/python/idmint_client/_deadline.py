"""Deadlines for whole calls: httpx's timeouts bound each network operation (one connect, one read), so a server
dripping a byte a second never trips a 2 s read timeout. Here a call's timeout is a :class:`Deadline`, a float of
seconds (what httpx and httpcore pass around) that also knows the monotonic instant it ends; the network backend of
the default transports (:func:`deadline_transport`, :func:`async_deadline_transport`) gives every connect, read and
write only the time left, and raises httpcore's timeout (httpx's ``ConnectTimeout``, ``ReadTimeout``,
``WriteTimeout``) once it has passed.

httpx takes no network backend, so the transports are httpx's own with the backend of their connection pool
wrapped (``transport._pool._network_backend``: the one place that touches a private attribute; without it, the
deadline is still checked between received chunks).
"""

from __future__ import annotations

import ssl
import time
import typing
from collections.abc import Iterable

import httpcore
import httpx

_monotonic = time.monotonic


class Deadline(float):
    """A timeout in seconds (its float value: the seconds given) ending at :attr:`at` (monotonic seconds).

    :meth:`extend` moves the end (a stream's deadline runs from its last progress). :meth:`share` makes one
    attempt's deadline: until its answer begins (:meth:`began`), a share of the time left; then the call's own."""

    at: float
    follows: Deadline | None
    reason: str | None

    def __new__(cls, seconds: float, reason: str | None = None) -> Deadline:
        self = super().__new__(cls, seconds)
        self.at = _monotonic() + seconds
        self.follows = None
        self.reason = reason
        return self

    def left(self) -> float:
        """Seconds until the deadline (negative once passed)."""
        if self.follows is not None:
            return self.follows.left()
        return self.at - _monotonic()

    def extend(self, seconds: float) -> None:
        self.at = _monotonic() + seconds

    def passed(self) -> str:
        """Why a network operation under this deadline was cut (it has passed)."""
        if self.follows is not None:
            return self.follows.passed()
        return self.reason or f"the call's timeout of {float(self):g} s passed"

    def share(self, attempts: int) -> Deadline:
        """The deadline of one attempt among ``attempts`` still to make: its answer must begin (status and
        headers) within the time left over ``attempts`` (all of it for the last), so a replica that accepts and
        never answers costs a share of the call, not all of it."""
        part = max(self.left(), 0.0) / max(attempts, 1)
        return Deadline(part, f"no answer began within {part:.2g} s, this replica's share of the call's time")

    def began(self, call: Deadline) -> None:
        """The answer began: from now on this deadline is the call's (``call``)."""
        self.follows = call


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    if not isinstance(timeout, Deadline):
        return timeout
    left = timeout.left()
    if left <= 0:
        raise error(timeout.passed())
    return left


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._backend.connect_tcp(host, port, left, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[typing.Any] | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._backend.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _AsyncStream(httpcore.AsyncNetworkStream):
    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _AsyncStream(await self._stream.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


class _AsyncBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _AsyncStream(await self._backend.connect_tcp(host, port, left, local_address, socket_options))

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[typing.Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _AsyncStream(await self._backend.connect_unix_socket(path, left, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def deadline_transport() -> httpx.HTTPTransport:
    """httpx's default transport, its network I/O bounded by the :class:`Deadline` of each request."""
    transport = httpx.HTTPTransport()
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is not None:
        pool._network_backend = _Backend(backend)  # type: ignore[union-attr]
    return transport


def async_deadline_transport() -> httpx.AsyncHTTPTransport:
    """httpx's default async transport, its network I/O bounded by the :class:`Deadline` of each request."""
    transport = httpx.AsyncHTTPTransport()
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is not None:
        pool._network_backend = _AsyncBackend(backend)  # type: ignore[union-attr]
    return transport


def timeout_of(deadline: Deadline) -> httpx.Timeout:
    """The httpx timeout of a request under ``deadline`` (every phase: connect, read, write, pool)."""
    return httpx.Timeout(deadline)
