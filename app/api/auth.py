"""API keys and per-key quotas, checked by the front (:class:`~app.api.front.Front`) for every route, hot routes
included.

Off unless ``IDMINT_API_KEYS_FILE`` names a key file; then every request to a route that needs a scope must carry
``Authorization: Bearer <key>`` for a key holding that scope, unless the scope is listed in
``IDMINT_PUBLIC_SCOPES``. The key file is TOML, one ``[[key]]`` table per key::

    [[key]]
    name = "batch-jobs"                # [a-z0-9][a-z0-9_.-]{0,63}; shown in logs and as a metric label
    sha256 = "5e88489...d1542d8"       # SHA-256 of the key text, lowercase hex: printf %s "$KEY" | sha256sum
    scopes = ["issue", "stream"]       # among issue, stream, decode, sequences, admin, metrics
    requests_per_second = 50           # optional quotas; absent or 0 = unlimited
    ids_per_second = 1000000
    concurrent_streams = 2

Each route declares its scope where it is declared (:func:`app.api.access.declare`; the OpenAPI document shows
it as ``x-idmint-scope``): ``issue`` /v1/ids/{scheme}; ``stream`` /v1/ids/{scheme}/stream; ``decode`` /v1/decode...,
/v1/bounds/{scheme}, the decode page (/ and /decode); ``sequences`` /v1/sequences...; ``admin`` creating a
sequence (POST /v1/sequences) and /v1/admin/...; ``metrics`` /metrics. Health, readiness, /v1/schemes, the
OpenAPI documents, static files and paths that match no route need no key.

Answers: 401 (no key, or a key that matches none; ``WWW-Authenticate: Bearer``), 403 (the key lacks the scope),
429 with ``Retry-After`` (over a quota). Each body is JSON ``{"detail": <reason>}``. A presented key is
hashed with SHA-256 and compared with every stored digest by :func:`hmac.compare_digest`, without stopping at a
match, so the time taken does not depend on which key (or how much of a digest) matched. An ``Authorization`` value
that named a key is remembered (at most :data:`REMEMBERED_PER_KEY` per key of the file, forgotten on reload) and
found again by a dict lookup: its cost depends only on the presented value's hash, which Python keys per process
(SipHash), so it tells a caller nothing about any key it does not hold; a value that names no key is never
remembered.

Quotas are token buckets (:class:`TokenBucket`) holding one second of the rate: ``requests_per_second`` counts
requests; ``ids_per_second`` counts the ``count`` of an issue request up front (a batch larger than one second's
worth passes when the bucket is full and the key then waits it off), and paces a stream as its chunks are sent; a
sequence ``range`` is charged too, but only up to one second's worth (more is a 422). With ``--workers N`` each
worker process holds 1/N of every rate and ``concurrent_streams // N`` streams (the quota is divided, not shared:
a key gets at most its quota from the server, and less when its traffic lands on fewer workers).
The bucket was measured side by side with the ``limits`` library (bench/bench_abuse.py) and kept: see there.

``SIGHUP`` re-reads the file (:meth:`ApiKeys.reload`): the new table replaces the old one in one assignment; a
file that does not load leaves the old keys in force and logs why. Quota state survives a reload for keys whose
name and rates are unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import logging
import math
import re
import signal
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.types import Message, Scope, Send

from app.api.access import Access
from app.api.streams import IDS_IN_MESSAGE
from app.errors import ConfigError, InvalidOptionError, TooManyRequestsError
from app.issuing.issuer import Charge, no_charge
from app.settings import SCOPES

log = logging.getLogger("idmint.auth")


PUBLIC = "public"
"""Metric label of requests served without a key (their scope is public)."""
UNKNOWN = "unknown"
"""Metric label of requests refused with 401 (no key, or one that matches no stored digest)."""
OUTCOMES = ("allowed", "unauthorized", "forbidden", "over_quota")
"""Bounded values of ``idmint_api_key_requests_total{outcome}``."""

NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
SHA256_HEX_RE = re.compile(r"[0-9a-f]{64}")
REMEMBERED_PER_KEY = 4
"""``Authorization`` values remembered per key of the file (a client may spell ``Bearer`` its own way)."""
CHARGE_KEY = "idmint.charge_ids"
"""ASGI scope key: the key's charge of a keyed request to a route that hands out IDs in one answer (not a stream:
its IDs are charged as sent, :meth:`ApiKeys.paced`); read by :func:`ids_charge`."""
UNSETTLED_KEY = "idmint.unsettled_key"
"""ASGI scope key: the key of a request whose count in ``idmint_api_key_requests_total`` waits on its IDs' charge
(allowed, or over_quota when the charge refuses it); :func:`settle` counts it allowed when no charge came."""
SCAN: Any = object()
"""The default of :meth:`ApiKeys.check`'s ``authorization``: look for it in the request's headers."""
KEY_NAME = "idmint.key_name"
"""ASGI scope key: the name of the API key a request was authorised with (absent: no key file, or public)."""


def key_name(scope: Scope) -> str | None:
    """The name of the API key that authorised the request (the audit log's "who"), None when none did."""
    name = scope.get(KEY_NAME)
    return name if isinstance(name, str) else None


def ids_charge(scope: Scope, within_quota: bool = False) -> Charge:
    """The :data:`~app.issuing.issuer.Charge` of the IDs a request hands out, to give the issuing core, which
    calls it with the count before it takes any (:meth:`Issuer.issue <app.issuing.issuer.Issuer.issue>`, the
    sequences' ``next``, ``range`` and ``reserve``): it charges the request's API key and raises
    TooManyRequestsError (429) over the key's IDs/s quota. :func:`~app.issuing.issuer.no_charge` for a public
    request, a stream (charged as sent) or without API keys. ``within_quota`` (sequence ``range``, up to 2**40 a
    call): a count over one second of the key's quota is refused with InvalidOptionError (422) rather than granted
    as a debt."""
    charge = scope.get(CHARGE_KEY)
    if charge is None:
        return no_charge
    if charge.__class__ is _Uncapped:  # a key without an IDs quota, its request already counted: count the IDs
        return charge.count_ids

    def charge_ids(count: int) -> None:
        key = scope.pop(UNSETTLED_KEY, None)
        charge(count, within_quota)  # a refusal is counted there, as over_quota
        if key is not None:
            key.allowed()

    return charge_ids


def settle(scope: Scope) -> None:
    """Count a keyed request whose IDs were never charged (the route refused it before, or HEAD) as allowed in
    ``idmint_api_key_requests_total``; a request is counted there once, by the key check, its charge or this."""
    key = scope.pop(UNSETTLED_KEY, None)
    if key is not None:
        key.allowed()


# -- the key file ---------------------------------------------------------------------------------------------------


class KeyEntry(BaseModel):
    """One ``[[key]]`` table of the key file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    sha256: str
    scopes: tuple[str, ...]
    requests_per_second: float = Field(0, ge=0)
    ids_per_second: float = Field(0, ge=0)
    concurrent_streams: int = Field(0, ge=0)

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not NAME_RE.fullmatch(value):
            raise ValueError(f"name must match {NAME_RE.pattern}, got {value!r}")
        return value

    @field_validator("sha256")
    @classmethod
    def _check_digest(cls, value: str) -> str:
        value = value.strip().lower()
        if not SHA256_HEX_RE.fullmatch(value):
            raise ValueError("sha256 must be 64 hex digits (the SHA-256 of the key text, not the key)")
        return value

    @field_validator("scopes")
    @classmethod
    def _check_scopes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [s for s in value if s not in SCOPES]
        if unknown:
            raise ValueError(f"scopes must be among {', '.join(SCOPES)}, got {', '.join(unknown)}")
        return value


class KeyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: list[KeyEntry] = Field(default_factory=list)


def load_key_file(path: Path, workers: int = 1) -> list[KeyEntry]:
    """The keys of ``path`` for a server of ``workers`` processes. Raises ConfigError naming the file and the rule
    broken (unreadable, not TOML, a bad entry, a repeated name or digest, a ``concurrent_streams`` that
    ``workers`` cannot share: 1..workers-1)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"API key file {path}: {exc}") from exc
    try:
        entries = KeyFile.model_validate(data).key
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            problems.append(f"{loc}: {err['msg'].removeprefix('Value error, ')}")
        raise ConfigError(f"API key file {path}: " + "; ".join(problems)) from exc
    for attr in ("name", "sha256"):
        seen: set[str] = set()
        for entry in entries:
            value = getattr(entry, attr)
            if value in seen:
                raise ConfigError(f"API key file {path}: {attr} must be unique, {value!r} appears twice")
            seen.add(value)
    for entry in entries:
        if 0 < entry.concurrent_streams < workers:
            raise ConfigError(
                f"API key file {path}: key {entry.name!r}: concurrent_streams must be 0 or at least the number of "
                f"worker processes ({workers}, IDMINT_WORKERS), got {entry.concurrent_streams}: each worker holds "
                "concurrent_streams // workers of them"
            )
    return entries


# -- quotas ---------------------------------------------------------------------------------------------------------


class TokenBucket:
    """A token bucket of ``rate`` tokens per second holding at most one second's worth (``rate`` tokens).

    :meth:`take` admits a cost when the bucket holds ``min(cost, capacity)`` tokens and then removes the whole cost,
    so the balance may go negative (a debt the key waits off); it returns 0.0 when admitted, else the seconds until
    it would be. :meth:`charge` removes a cost unconditionally and returns the seconds of debt to wait off.
    """

    __slots__ = ("rate", "capacity", "tokens", "stamp")

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = float(rate)
        self.capacity = max(self.rate, 1.0)
        self.tokens = self.capacity
        self.stamp = clock()

    def _refill(self, now: float) -> float:
        tokens = self.tokens + (now - self.stamp) * self.rate
        if tokens > self.capacity:
            tokens = self.capacity
        self.stamp = now
        self.tokens = tokens
        return tokens

    def take(self, cost: float, now: float) -> float:
        need = cost if cost < self.capacity else self.capacity
        tokens = self._refill(now)
        if tokens >= need:
            self.tokens = tokens - cost
            return 0.0
        return (need - tokens) / self.rate

    def charge(self, cost: float, now: float) -> float:
        self.tokens = self._refill(now) - cost
        return -self.tokens / self.rate if self.tokens < 0 else 0.0


@dataclass
class KeyState:
    """A loaded key: its entry, digest bytes, and live quota state."""

    entry: KeyEntry
    digest: bytes
    requests: TokenBucket | None = None
    ids: TokenBucket | None = None
    streams: int = 0
    scopes: frozenset[str] = field(default_factory=frozenset)
    charge: Callable[[int, bool], None] | None = None
    """The charge of a parsed count to this key (set by :class:`ApiKeys`: :data:`CHARGE_KEY`'s callable)."""
    allowed: Callable[[], None] = lambda: None
    """Counts one request allowed for this key (``idmint_api_key_requests_total``; set by :class:`ApiKeys`)."""
    count_ids: Callable[[int], None] = lambda count: None
    """Counts IDs charged to this key (``idmint_api_key_ids_total``; set by :class:`ApiKeys`)."""
    uncapped: Any = None
    """The charge of a request counted allowed up front (:class:`_Uncapped`; set by :class:`ApiKeys`)."""
    workers: int = 1
    """Worker processes sharing the key's quotas: this one holds 1/workers of each rate and
    ``concurrent_streams // workers`` streams."""
    name: str = ""
    """The key's name (its entry's)."""
    free_scopes: frozenset[str] = field(default_factory=frozenset)
    """The scopes whose requests nothing in the key check can refuse: the key's scopes when it has no request quota,
    else none (a stream is still held against the stream cap)."""

    @property
    def stream_limit(self) -> int:
        """Streams this worker may run for the key at once (0 = unlimited)."""
        return self.entry.concurrent_streams // self.workers

    def share(self, quota: str) -> str:
        """``quota`` with this worker's share named, when there are several workers."""
        return (
            quota
            if self.workers == 1
            else f"{quota}, of which each of the {self.workers} workers holds 1/{self.workers}"
        )

    @classmethod
    def build(
        cls, entry: KeyEntry, previous: KeyState | None, workers: int = 1, clock: Callable[[], float] = time.monotonic
    ) -> KeyState:
        state = cls(entry, bytes.fromhex(entry.sha256), scopes=frozenset(entry.scopes), workers=workers)
        state.name = entry.name
        same_rates = previous is not None and (previous.entry.requests_per_second, previous.entry.ids_per_second) == (
            entry.requests_per_second,
            entry.ids_per_second,
        )
        if same_rates and previous is not None:
            state.requests, state.ids, state.streams = previous.requests, previous.ids, previous.streams
        else:
            requests, ids = entry.requests_per_second, entry.ids_per_second
            state.requests = TokenBucket(requests / workers, clock) if requests else None
            state.ids = TokenBucket(ids / workers, clock) if ids else None
            if previous is not None:
                state.streams = previous.streams
        state.free_scopes = state.scopes if state.requests is None else frozenset()
        return state


class _Uncapped:
    """The :data:`CHARGE_KEY` of a request whose key has no IDs quota and was counted allowed by the key check:
    called as a key's ``charge``, or read by :func:`ids_charge`, which hands out ``count_ids`` itself (nothing to
    refuse, nothing left to settle)."""

    __slots__ = ("charge", "count_ids")

    def __init__(self, charge: Callable[[int, bool], None], count_ids: Callable[[int], None]) -> None:
        self.charge = charge
        self.count_ids = count_ids

    def __call__(self, count: int, within_quota: bool) -> None:
        self.charge(count, within_quota)


class Refusal(Exception):
    """A request refused by the key check: status, outcome label, reason, Retry-After seconds."""

    def __init__(
        self, status: int, outcome: str, reason: str, retry_after: float | None = None, key: str = UNKNOWN
    ) -> None:
        super().__init__(reason)
        self.key = key
        self.status = status
        self.outcome = outcome
        self.reason = reason
        self.retry_after = None if retry_after is None else max(1, math.ceil(retry_after))


def only_authorization(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The value of the request's one ``Authorization`` field (lowercase names), None without one. Raises Refusal
    (401) for two or more: Authorization is a single field, not a list (RFC 9110 sections 5.3 and 11.6.2), and a
    proxy in front of this node may read another of them than this node would."""
    found = None
    fields = 0
    for name, value in headers:
        if name == b"authorization":
            found = value
            fields += 1
    if fields > 1:
        raise Refusal(
            401,
            "unauthorized",
            f"a request must carry at most one Authorization header, got {fields} (RFC 9110 section 5.3: it is not "
            "a list)",
        )
    return found


# -- the middleware -------------------------------------------------------------------------------------------------


class ApiKeys:
    """The API keys of a key file: authenticate, authorise by scope, and apply per-key quotas
    (:meth:`check`, :meth:`streaming`, :meth:`paced`, called by :class:`~app.api.front.Front`).

    ``metrics`` is the app's :class:`~app.metrics.Metrics`; ``clock`` gives seconds (the quotas' clock). Raises
    ConfigError for a key file that does not load.
    """

    def __init__(
        self,
        path: Path,
        public_scopes: list[str],
        metrics: Any,
        workers: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        self.workers = workers
        self.path = Path(path)
        self.public = frozenset(public_scopes)
        self.metrics = metrics
        self.keys: tuple[KeyState, ...] = ()
        self.known: dict[bytes, KeyState] = {}
        """``Authorization`` values that named a key (at most REMEMBERED_PER_KEY per key): see the module
        docstring."""
        self.public_allowed: Callable[[], None] = lambda: None
        self._install(load_key_file(self.path, workers))
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- loading -----------------------------------------------------------------------------------------
    def _install(self, entries: list[KeyEntry]) -> None:
        previous = {k.entry.name: k for k in self.keys}
        keys = tuple(KeyState.build(e, previous.get(e.name), self.workers, self.clock) for e in entries)
        metrics = self.metrics
        metrics.api_keys([k.entry.name for k in keys] + [PUBLIC, UNKNOWN], OUTCOMES)
        for key in keys:
            key.charge = functools.partial(self._charge_parsed, key)
            key.allowed = metrics.api_key_counter(key.entry.name, "allowed")
            key.count_ids = metrics.api_key_ids_counter(key.entry.name)
            key.uncapped = _Uncapped(key.charge, key.count_ids)
        self.public_allowed = metrics.api_key_counter(PUBLIC, "allowed")
        # One assignment each: a request sees the old table or the new one, never a mix; the remembered keys of
        # the old table are dropped with it.
        self.keys, self.known = keys, {}

    def reload(self) -> bool:
        """Re-read the key file; on any error keep the keys in force and log why. Returns True when replaced."""
        try:
            entries = load_key_file(self.path, self.workers)
        except ConfigError as exc:
            log.error("API keys not reloaded, the %d keys in force stay: %s", len(self.keys), exc)
            return False
        self._install(entries)
        log.info("API keys reloaded from %s: %d keys", self.path, len(entries))
        return True

    def start(self) -> None:
        """Re-read the key file on SIGHUP (main thread only: a server in another thread gets no signals)."""
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGHUP, self.reload)
        except (ValueError, RuntimeError, NotImplementedError) as exc:
            log.debug("no SIGHUP handler for API key reloads: %s", exc)
            return
        self._loop = loop
        log.info(
            "API keys on: %d keys from %s (SIGHUP re-reads it); public scopes: %s",
            len(self.keys),
            self.path,
            ", ".join(sorted(self.public)) or "none",
        )

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.remove_signal_handler(signal.SIGHUP)
            self._loop = None

    # -- checking ----------------------------------------------------------------------------------------
    def identify(self, token: bytes) -> KeyState | None:
        """The key whose stored digest equals SHA-256(token). Every digest is compared (constant time each,
        no early exit), so timing does not tell which one matched."""
        digest = hashlib.sha256(token).digest()
        found = None
        for key in self.keys:
            if hmac.compare_digest(digest, key.digest):
                found = key
        return found

    def authorise(self, scope_name: str, headers: list[tuple[bytes, bytes]]) -> KeyState | None:
        """The key to charge (None for a public request). Raises Refusal (401/403)."""
        auth = only_authorization(headers)
        if auth is None:
            if scope_name in self.public:
                return None
            raise Refusal(
                401,
                "unauthorized",
                f"this route needs an API key with scope {scope_name!r}: send Authorization: Bearer <key>",
            )
        key = self.known.get(auth)
        if key is None:
            kind, _, token = auth.strip().partition(b" ")
            token = token.strip()
            if kind.lower() != b"bearer" or not token:
                raise Refusal(401, "unauthorized", "Authorization must be 'Bearer <key>'")
            key = self.identify(token)
            if key is None:
                raise Refusal(401, "unauthorized", "unknown API key")
            if len(self.known) < REMEMBERED_PER_KEY * len(self.keys):
                self.known[bytes(auth)] = key
        if scope_name not in key.scopes and scope_name not in self.public:
            raise Refusal(
                403,
                "forbidden",
                f"API key {key.entry.name!r} lacks scope {scope_name!r} "
                f"(it has: {', '.join(key.entry.scopes) or 'none'})",
                key=key.entry.name,
            )
        return key

    def admit(self, key: KeyState, scope: Scope, access: Access) -> None:
        """Apply the request quota and the stream cap up front (the clock is read only for a key with a quota).
        Raises Refusal (429).

        IDs are charged only once the route has parsed a valid count (:func:`ids_charge`): a request the route
        refuses (``count=²``, a count over the maximum) costs no IDs, so one bad call cannot put the key in debt.
        A stream needs an IDs bucket that is not in debt up front and is paced as it is sent."""
        name = key.entry.name
        is_stream, counted = access.stream, access.hands_out_ids
        if is_stream and key.entry.concurrent_streams and key.streams >= key.stream_limit:
            raise Refusal(
                429,
                "over_quota",
                f"API key {name!r} already runs {key.streams} streams "
                + (
                    f"(its limit is {key.entry.concurrent_streams})"
                    if key.workers == 1
                    else f"in this worker (its limit is {key.entry.concurrent_streams}, {key.stream_limit} in each "
                    f"of the {key.workers} workers)"
                ),
                1,
                name,
            )
        if is_stream and counted and key.ids is not None:
            wait = key.ids.take(1, self.clock())
            if wait:
                raise Refusal(
                    429,
                    "over_quota",
                    f"API key {name!r} is over its quota of " + key.share(f"{key.entry.ids_per_second:g} IDs/s"),
                    wait,
                    name,
                )
        if key.requests is not None:
            wait = key.requests.take(1, self.clock())
            if wait:
                raise Refusal(
                    429,
                    "over_quota",
                    f"API key {name!r} is over its quota of "
                    + key.share(f"{key.entry.requests_per_second:g} requests/s"),
                    wait,
                    name,
                )
        if counted and not is_stream:
            scope[CHARGE_KEY] = key.charge

    def _charge_parsed(self, key: KeyState, count: int, within_quota: bool) -> None:
        name = key.entry.name
        if key.ids is not None and within_quota and count > key.ids.capacity:
            self.metrics.api_key_request(name, "over_quota")
            raise InvalidOptionError(
                f"count must be at most {key.ids.capacity:.0f} for API key {name!r} (one second of its quota of "
                + key.share(f"{key.entry.ids_per_second:g} IDs/s")
                + f"), got {count}"
            )
        if key.ids is not None:
            wait = key.ids.take(count, self.clock())
            if wait:
                self.metrics.api_key_request(name, "over_quota")
                raise TooManyRequestsError(
                    f"API key {name!r} is over its quota of " + key.share(f"{key.entry.ids_per_second:g} IDs/s"),
                    math.ceil(wait),
                )
        key.count_ids(count)

    # -- the front's calls ------------------------------------------------------------------------------
    def check(self, access: Access, scope: Scope, authorization: Any = SCAN) -> KeyState | None:
        """Authorise a request for a route of ``access`` (its scope is not None) and apply the key's request and
        stream quotas: the key to charge, or None for a public request. ``authorization``: the request's one
        ``Authorization`` value when the caller has already found it and no second (None: it has none), else it is
        looked for in ``scope["headers"]`` (:func:`only_authorization`: two or more are refused). Counted in
        ``idmint_api_key_requests_total`` once: here (also a request whose IDs are charged to a key without an IDs
        quota: no charge can refuse it), or for a request whose IDs are charged to a key with one, by that charge
        (:func:`ids_charge`) or :func:`settle`. Raises Refusal (401, 403, 429)."""
        assert access.scope is not None
        if authorization is SCAN:
            try:
                authorization = only_authorization(scope["headers"])
            except Refusal as refusal:
                self.metrics.api_key_request(refusal.key, refusal.outcome)
                raise
        if authorization is not None:
            key = self.known.get(authorization)
            if key is not None and access.scope in key.free_scopes and not access.stream:
                # A remembered key that holds the scope, without a request quota: nothing here can refuse it.
                scope[KEY_NAME] = key.name
                if access.hands_out_ids:
                    if key.ids is None:  # no charge can refuse it: counted allowed now, its IDs when charged
                        scope[CHARGE_KEY] = key.uncapped
                        key.allowed()
                    else:
                        scope[CHARGE_KEY] = key.charge
                        scope[UNSETTLED_KEY] = key
                else:
                    key.allowed()
                return key
        try:
            key = self.authorise(access.scope, scope["headers"])
            if key is not None:
                self.admit(key, scope, access)
                scope[KEY_NAME] = key.entry.name
        except Refusal as refusal:
            self.metrics.api_key_request(refusal.key, refusal.outcome)
            raise
        if key is None:
            self.public_allowed()
        elif CHARGE_KEY in scope:
            scope[UNSETTLED_KEY] = key  # counted by its charge, or by settle()
        else:
            key.allowed()
        return key

    @contextlib.contextmanager
    def streaming(self, key: KeyState) -> Iterator[None]:
        """Hold one of ``key``'s streams while the block runs."""
        key.streams += 1
        try:
            yield
        finally:
            key.streams -= 1

    def paced(self, key: KeyState, send: Send) -> Send:
        """``send`` that counts each streamed chunk's IDs for the key (as the stream tells them on the chunk's first
        piece, :data:`IDS_IN_MESSAGE`; else by its lines) and, with an IDs/s quota, charges them and waits off any
        debt before the chunk is sent."""
        bucket = key.ids
        metrics, name = self.metrics, key.entry.name

        async def paced_send(message: Message) -> None:
            if message["type"] == "http.response.body":
                lines = message.get(IDS_IN_MESSAGE)
                if lines is None:  # not from an IdStream (or a layer dropped the key): count what is sent
                    lines = bytes(message.get("body", b"")).count(b"\n")
                if lines:
                    metrics.api_key_ids(name, lines)
                    wait = bucket.charge(lines, self.clock()) if bucket is not None else 0.0
                    if wait:
                        await asyncio.sleep(wait)
            await send(message)

        return paced_send
