"""Failover bookkeeping shared by both clients (no I/O): which replica to ask next, who is kept out, and why.

Rules: replicas are tried round-robin; a 503 (or 429) moves on to the next replica and keeps the
refusing one out for its ``Retry-After`` (for that scheme only: a replica refuses scheme by scheme); a connection
error or a failed answer (5xx, broken or truncated body) moves on and keeps that replica out for
``FAILED_BACKOFF_S``. That backoff is our own guess, so when every other replica is out too, such a replica is
still tried (last) rather than failing the call; a server's ``Retry-After`` is always honoured. Only when no
replica is left does the call raise :class:`~idmint_client.NoReplicaAvailableError`, naming each replica's reason.
4xx answers other than 429 are the request's fault: :func:`check` raises them at once, never retried elsewhere.
"""

from __future__ import annotations

import copy
import itertools
import re
import time
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from idmint_client._exceptions import (
    ForbiddenError,
    RequestRejectedError,
    UnauthorizedError,
    UnknownSchemeError,
    ValidationError,
)

FAILED_BACKOFF_S = 1.0
"""Seconds a replica that could not be reached (or answered 5xx) is kept out, unless nothing else is left."""

DEFAULT_RETRY_AFTER_S = 1.0
"""Seconds a 503/429 keeps its replica out when its ``Retry-After`` is absent, negative or not a number."""
MAX_RETRY_AFTER_S = 300.0
"""The longest a ``Retry-After`` keeps a replica out (a larger value, or a later date, is capped to this)."""

ALL_SCOPES = ""
"""The scope of a replica-wide mark (connection errors); scheme-specific refusals use the scheme name."""

COUNT_RANGE_RE = re.compile(r"count must be (?:an integer )?in 1\.\.(\d+)")
"""The server's 422 detail for a count out of range; its upper bound is the server's max count."""


def normalise_urls(replicas: str | Sequence[str]) -> tuple[str, ...]:
    """Base URLs from a comma-separated string or a sequence; trailing slashes dropped. ValueError when empty."""
    items = replicas.split(",") if isinstance(replicas, str) else list(replicas)
    urls = tuple(u.strip().rstrip("/") for u in items if u and u.strip())
    if not urls:
        raise ValueError("replicas must name at least one base URL, e.g. 'http://127.0.0.1:8000'")
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"replica URL must start with http:// or https://, got {url!r}")
    return urls


class Refused(Exception):
    """Internal: this replica refused (503/429); ``retry_after`` in seconds."""

    def __init__(self, reason: str, retry_after: float) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class Failed(Exception):
    """Internal: this replica failed (unreachable, 5xx, broken answer); move on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def detail_of(response: httpx.Response) -> str:
    """The server's ``detail`` text (idmint answers errors as ``{"detail": ...}``), else the body's start."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:200].strip() or response.reason_phrase
    if isinstance(data, dict) and "detail" in data:
        return str(data["detail"])
    return str(data)[:200]


def retry_after_s(response: httpx.Response) -> float:
    """``Retry-After`` in seconds: delta-seconds (digits only) or an HTTP date, capped at MAX_RETRY_AFTER_S;
    DEFAULT_RETRY_AFTER_S when absent, negative or anything else (``-5``, ``1.5``, ``soon``)."""
    value = response.headers.get("retry-after")
    if value is None:
        return DEFAULT_RETRY_AFTER_S
    value = value.strip()
    if value.isascii() and value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        return min(max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0), MAX_RETRY_AFTER_S)
    except (TypeError, ValueError, OverflowError):
        return DEFAULT_RETRY_AFTER_S


def check(response: httpx.Response, missing: type[RequestRejectedError] = UnknownSchemeError) -> None:
    """Classify an answer whose body has been read: return on 2xx; raise Refused (503/429), Failed (other 5xx, or
    any other status: a redirect is never followed, so no API key and no request goes to a host the client was not
    given), or a RequestRejectedError subclass (4xx: the request's fault; ``missing`` for 404: UnknownSchemeError, or
    UnknownSequenceError for sequence calls)."""
    status = response.status_code
    if status < 300:
        return
    url = str(response.request.url)
    if status in (503, 429):
        wait = retry_after_s(response)
        raise Refused(f"{status} {detail_of(response)} (Retry-After {wait:g} s)", wait)
    if status == 422:
        raise ValidationError(status, detail_of(response), url)
    if status == 404:
        raise missing(status, detail_of(response), url)
    if status == 401:
        raise UnauthorizedError(status, detail_of(response), url)
    if status == 403:
        raise ForbiddenError(status, detail_of(response), url)
    if 400 <= status < 500:
        raise RequestRejectedError(status, detail_of(response), url)
    raise Failed(f"{status} {detail_of(response)}")


def transport_reason(exc: httpx.HTTPError) -> str:
    """A short reason for an httpx transport error (``ConnectError: [Errno 111] Connection refused``)."""
    text = str(exc) or exc.__class__.__name__
    return f"{exc.__class__.__name__}: {text}"


def count_range(exc: ValidationError) -> int | None:
    """The server's max count when a 422 is about the count range, else None."""
    match = COUNT_RANGE_RE.search(exc.detail)
    return int(match.group(1)) if match else None


class ReplicaSet:
    """The replicas of one client: round-robin order and who is kept out until when (monotonic seconds).

    Safe to share between threads: ``itertools.count`` hands out start positions atomically, and the marks are
    single dict stores (a race only changes which replica is asked first, never correctness).
    """

    def __init__(self, urls: tuple[str, ...], clock: Any = time.monotonic) -> None:
        self.urls = urls
        self._clock = clock
        self._turn = itertools.count()
        self._out: dict[tuple[str, str], tuple[float, str, bool]] = {}
        """(url, scope) -> (until, reason, honoured): honoured marks come from the server's Retry-After."""

    def plan(self, scope: str, advance: bool = True) -> tuple[list[str], dict[str, str]]:
        """(replicas to try in order, {url: reason} of the ones skipped because a server asked us to wait).

        ``advance=False`` starts where the next call will (the catalogue fetched on the way leaves the round-robin
        turn to the call it serves)."""
        now = self._clock()
        start = (next(self._turn) if advance else self._peek()) % len(self.urls)
        ordered = self.urls[start:] + self.urls[:start]
        ready: list[str] = []
        guessed: list[str] = []
        skipped: dict[str, str] = {}
        for url in ordered:
            marks = [m for m in (self._out.get((url, ALL_SCOPES)), self._out.get((url, scope))) if m and m[0] > now]
            if not marks:
                ready.append(url)
            elif any(honoured for _, _, honoured in marks):
                until, reason, _ = max(m for m in marks if m[2])
                skipped[url] = f"{reason}; kept out for {until - now:.1f} s more"
            else:
                guessed.append(url)
        return ready + guessed, skipped

    def _peek(self) -> int:
        """The next turn, without taking it (from a copy of the counter)."""
        return next(copy.copy(self._turn))

    def refused(self, url: str, scope: str, exc: Refused) -> None:
        """A 503/429 for ``scope``: keep ``url`` out of that scope for the server's Retry-After."""
        self._out[(url, scope)] = (self._clock() + exc.retry_after, exc.reason, True)

    def failed(self, url: str, reason: str) -> None:
        """Unreachable or broken: keep ``url`` out of every scope for FAILED_BACKOFF_S (tried last if needed)."""
        self._out[(url, ALL_SCOPES)] = (self._clock() + FAILED_BACKOFF_S, reason, False)

    def succeeded(self, url: str, scope: str) -> None:
        """``url`` answered: forget its marks for ``scope`` and replica-wide ones."""
        if self._out:
            self._out.pop((url, ALL_SCOPES), None)
            self._out.pop((url, scope), None)
