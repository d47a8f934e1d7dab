"""A small async etcd v3 client over etcd's JSON gateway (``/v3/...`` on the client port), on httpx.

The gateway (grpc-gateway, every etcd 3.x) speaks proto3 JSON: keys and values are base64, 64-bit integers are
strings, false and zero fields are omitted (a transaction without ``succeeded`` failed; a keepalive answer without
``TTL`` means the lease is gone; a watch event without ``type`` is a PUT). Unary calls answer ``{"error", "code",
"message"}`` on failure, ``code`` being the gRPC status code; streams (keepalive, watch) wrap every message in
``{"result": ...}`` or ``{"error": {"grpc_code", ...}}``. A watch is one long-lived streamed POST (one connection
each); a keepalive is one request. Shapes follow etcd's ``rpc.proto`` (``etcdserverpb``).

Several endpoints: each client shuffles them (so replicas spread over members) and keeps using the one that last
answered; a request that fails in transport, times out, or gets a "try elsewhere" code moves to the next at once.
Auth: with a user, the client authenticates on first use and again whenever etcd answers UNAUTHENTICATED
(expired or forgotten token), then repeats the request once. Errors leave as :class:`EtcdCallError` and become the
project's errors in exactly one place, :func:`map_error` (by code, never by message text).
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import ssl
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from app.errors import BackendUnavailableError, ConfigError, LeaseLostError, NotReadyError

# gRPC status code -> (what etcd did, error class, try the next endpoint). The one table of etcd errors.
ERRORS: dict[int | None, tuple[str, type[NotReadyError], bool]] = {
    None: ("is unreachable", BackendUnavailableError, True),  # transport: refused, reset, timed out, not JSON
    1: ("cancelled the request", BackendUnavailableError, True),  # CANCELLED
    2: ("failed", BackendUnavailableError, True),  # UNKNOWN
    3: ("refused the request", BackendUnavailableError, False),  # INVALID_ARGUMENT
    4: ("did not answer in time", BackendUnavailableError, True),  # DEADLINE_EXCEEDED
    5: ("has no such lease: it expired or was revoked", LeaseLostError, False),  # NOT_FOUND (lease not found)
    7: ("refused: permission denied", BackendUnavailableError, False),  # PERMISSION_DENIED
    8: ("is overloaded", BackendUnavailableError, True),  # RESOURCE_EXHAUSTED
    9: ("refused the request in its state", BackendUnavailableError, False),  # FAILED_PRECONDITION
    10: ("aborted the request", BackendUnavailableError, True),  # ABORTED
    11: ("has compacted the revision asked for", BackendUnavailableError, False),  # OUT_OF_RANGE
    13: ("failed internally", BackendUnavailableError, True),  # INTERNAL
    14: ("is unavailable", BackendUnavailableError, True),  # UNAVAILABLE
    16: ("rejected our credentials", BackendUnavailableError, False),  # UNAUTHENTICATED
}
UNAUTHENTICATED = 16
AUTHENTICATE_REFUSED = frozenset({3, 9})
"""Codes of ``/v3/auth/authenticate`` meaning wrong user or password (INVALID_ARGUMENT) or auth disabled."""


class EtcdCallError(Exception):
    """One failed gateway call: ``code`` (gRPC status, None for transport), ``detail``, ``endpoint`` (redacted)."""

    def __init__(self, code: int | None, detail: str, endpoint: str) -> None:
        super().__init__(f"{endpoint}: {detail} (code {code})")
        self.code = code
        self.detail = detail
        self.endpoint = endpoint


def map_error(exc: EtcdCallError, doing: str) -> NotReadyError:
    """The project's error for ``exc`` (see :data:`ERRORS`); ``doing`` says what we were doing."""
    what, kind, _ = ERRORS.get(exc.code, ERRORS[2])
    if kind is LeaseLostError:
        return LeaseLostError(f"etcd lease expired or was revoked (while {doing})")
    return kind(f"etcd at {exc.endpoint} {what} (while {doing}): {exc.detail}")


def redact(url: str) -> str:
    """``url`` without user info (``http://user:secret@host`` -> ``http://host``), query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` covering every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


@dataclass(frozen=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int

    @classmethod
    def parse(cls, kv: dict[str, Any]) -> KeyValue:
        return cls(
            base64.b64decode(kv.get("key", "")),
            base64.b64decode(kv.get("value", "")),
            int(kv.get("create_revision", 0)),
            int(kv.get("mod_revision", 0)),
            int(kv.get("lease", 0)),
        )


@dataclass(frozen=True)
class Event:
    type: str  # "PUT" or "DELETE"
    kv: KeyValue


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    revision: int
    ranges: list[list[KeyValue] | None]
    """Per operation of the branch taken: the keys read (range operations), None for puts and deletes."""


# Transaction pieces (etcdserverpb.Compare / RequestOp as JSON).
def compare(key: bytes, target: str, value: int, result: str = "EQUAL") -> dict[str, Any]:
    """``target``: "CREATE" (create_revision), "MOD" (mod_revision), "VERSION" or "LEASE"."""
    field = {"CREATE": "create_revision", "MOD": "mod_revision", "VERSION": "version", "LEASE": "lease"}[target]
    return {"target": target, "key": b64(key), field: str(value), "result": result}


def put(key: bytes, value: bytes, lease: int = 0) -> dict[str, Any]:
    return {"request_put": {"key": b64(key), "value": b64(value), "lease": str(lease)}}


def get(key: bytes, range_end: bytes | None = None) -> dict[str, Any]:
    body = {"key": b64(key)}
    if range_end is not None:
        body["range_end"] = b64(range_end)
    return {"request_range": body}


def delete(key: bytes) -> dict[str, Any]:
    return {"request_delete_range": {"key": b64(key)}}


def ssl_context(ca_cert: Path | None, cert: Path | None, key: Path | None) -> ssl.SSLContext:
    """TLS for https endpoints: ``ca_cert`` (else the system's CAs) and an optional client certificate.

    Raises ConfigError naming a file that cannot be read.
    """
    try:
        context = ssl.create_default_context(cafile=str(ca_cert) if ca_cert else None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"etcd_ca_cert {ca_cert} cannot be read: {exc}") from exc
    if cert is not None and key is not None:
        try:
            context.load_cert_chain(str(cert), str(key))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"etcd_cert_cert {cert} / etcd_cert_key {key} cannot be read: {exc}") from exc
    return context


STORES_LANE = "stores"
"""The connections of the stores (sequences, the ledger): their calls may wait on a slow etcd, many at once."""
LEASE_LANE = "lease"
"""The connections of the lease (keepalives, claims, marks, watches, registrations, fleet records, revokes)."""
LANE_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=32)
"""Each lane's own bounds: a lane whose connections are all busy (100 sequence calls waiting on a slow member)
makes only its own next call wait for one, never another lane's."""


class _Link:
    """What every view of one client shares: the endpoints in their shuffled order and which one answers now, the
    auth token, and the connections, one pool (:data:`LANE_LIMITS`) per lane."""

    def __init__(
        self, endpoints: list[str], connect_timeout: float, tls: ssl.SSLContext | None, user: str | None,
        password: str | None,
    ) -> None:  # fmt: skip
        self.endpoints = endpoints
        self.current = 0
        self.connect_timeout = connect_timeout
        self.tls = tls
        self.user, self.password = user, password
        self.token: str | None = None
        self.auth_lock = asyncio.Lock()
        self.http: dict[str, httpx.AsyncClient] = {}
        """Each lane's connections (:data:`STORES_LANE`, :data:`LEASE_LANE`), opened at its first call."""
        self.closed = False


class EtcdClient:
    """etcd v3 over its JSON gateway. Methods raise :class:`EtcdCallError`; create and close on one event loop.

    ``endpoints``: base URLs (no user info; shuffled by ``rng``); ``timeout``: seconds per attempt on one
    endpoint; ``budget``: seconds after which a call stops trying further endpoints (every endpoint is tried
    once anyway); ``connect_timeout``: seconds to open a connection; ``tls``: context for https endpoints.

    One client per process: each user takes a view with its own limits (:meth:`limited`), sharing the endpoint
    that answers and the auth token, and the connections of its ``lane`` (:data:`STORES_LANE` by default; the lease's
    views use :data:`LEASE_LANE`, so that no store call waiting for a connection delays a keepalive); :meth:`close`
    on any view closes them all.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float,
        budget: float,
        connect_timeout: float,
        tls: ssl.SSLContext | None = None,
        user: str | None = None,
        password: str | None = None,
        rng: random.Random | None = None,
        link: _Link | None = None,
        lane: str = STORES_LANE,
    ) -> None:
        if link is None:
            shuffled = [url.rstrip("/") for url in endpoints]
            (rng or random.Random()).shuffle(shuffled)
            link = _Link(shuffled, connect_timeout, tls, user, password)
        self._link = link
        self.lane = lane
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, link.connect_timeout))
        self._budget = budget

    def limited(self, *, timeout: float, budget: float, lane: str | None = None) -> EtcdClient:
        """A view of this client whose calls give one endpoint ``timeout`` seconds and stop trying further
        endpoints after ``budget`` seconds, on the connections of ``lane`` (default: this view's); everything else
        is shared (see the class)."""
        link = self._link
        return EtcdClient(
            link.endpoints, timeout=timeout, budget=budget, connect_timeout=0, link=link, lane=lane or self.lane
        )

    @property
    def endpoints(self) -> list[str]:
        """Every endpoint, in this process's shuffled order."""
        return self._link.endpoints

    @property
    def endpoint(self) -> str:
        """The endpoint requests go to first (the one that last answered)."""
        return self._link.endpoints[self._link.current]

    def _client(self) -> httpx.AsyncClient:
        link = self._link
        if link.closed:  # a straggling task after close() must not open a connection nothing will close
            raise EtcdCallError(1, "the etcd client is closed", self.endpoint)
        http = link.http.get(self.lane)
        if http is None:
            http = link.http[self.lane] = httpx.AsyncClient(
                verify=link.tls or True, timeout=self._timeout, limits=LANE_LIMITS
            )
        return http

    async def close(self) -> None:
        """Close the connections of every view; every later call raises EtcdCallError (code 1, cancelled)."""
        link = self._link
        link.closed = True
        lanes, link.http = link.http, {}
        for http in lanes.values():
            await http.aclose()

    def failed(self, endpoint: str) -> None:
        """Move on from ``endpoint`` (when it is still the current one)."""
        if self.endpoint == endpoint:
            self._link.current = (self._link.current + 1) % len(self._link.endpoints)

    def _headers(self) -> dict[str, str]:
        token = self._link.token
        return {"Authorization": token} if token else {}

    async def call(self, path: str, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """POST ``body`` to ``path`` on the current endpoint, moving on to the next ones as :data:`ERRORS` says.

        Every endpoint is tried at least once; rounds go on while ``budget`` seconds have not passed (a member
        may be electing a leader). Raises the last EtcdCallError.
        """
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._budget
        tries = 0
        while True:
            endpoint = self.endpoint
            try:
                return await self._call_one(endpoint, path, body, timeout)
            except EtcdCallError as exc:
                if self._link.closed or not ERRORS.get(exc.code, ERRORS[2])[2]:
                    raise
                tries += 1
                self.failed(endpoint)
                if tries >= len(self.endpoints) and loop.time() >= give_up:
                    raise
                if tries % len(self.endpoints) == 0:
                    await asyncio.sleep(0.05)  # a full round failed: do not spin

    async def call_hedged(
        self, path: str, body: dict[str, Any], timeout: float | None, hedge_after: float
    ) -> dict[str, Any]:
        """:meth:`call` for an idempotent request (a keepalive) that must be answered soon: while none has
        answered, a new attempt starts every ``hedge_after`` seconds (at once after a failure) on the next endpoint
        in turn from the current one that has no attempt out, and the earlier attempts stay out; the first answer
        wins and its endpoint becomes the current one; the attempts still out are cancelled. So at most one attempt
        per endpoint is out at a time, and with one endpoint there is no hedge at all (an overloaded member is not
        asked more). A member that stalls (SIGSTOP, a full disk) then costs ``hedge_after``, not ``timeout``; a
        leader that stalls costs its re-election and what is left of the attempts its followers forwarded to it.
        After gRPC's hedging policy (``hedgingDelay``). Attempts start while ``budget`` seconds have not passed
        (every endpoint is asked at least once). Raises the last EtcdCallError; ValueError for ``hedge_after`` <= 0.
        """
        if not hedge_after > 0:
            raise ValueError(f"hedge_after must be > 0 seconds, got {hedge_after!r}")
        link = self._link
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._budget
        endpoints = link.endpoints
        count = len(endpoints)
        turn = link.current
        started = failures = 0
        next_at = loop.time()
        asked: dict[asyncio.Task[dict[str, Any]], int] = {}  # each attempt out -> its endpoint's index
        error: EtcdCallError | None = None
        try:
            while True:
                now = loop.time()
                may_start = not link.closed and (now < give_up or started < count) and len(asked) < count
                if may_start and now >= next_at:
                    busy = set(asked.values())
                    while turn % count in busy:
                        turn += 1
                    index = turn % count
                    turn += 1
                    started += 1
                    asked[asyncio.create_task(self._call_one(endpoints[index], path, body, timeout))] = index
                    next_at = now + hedge_after
                    may_start = len(asked) < count
                if not asked:
                    if not may_start:
                        raise error or EtcdCallError(1, "the etcd client is closed", self.endpoint)
                    await asyncio.sleep(next_at - now)  # a round of failures: do not spin
                    continue
                wait = max(0.0, next_at - loop.time()) if may_start else None
                done, _ = await asyncio.wait(asked, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    index = asked.pop(task)
                    exc = task.exception()
                    if exc is None:
                        link.current = index
                        return task.result()
                    if not isinstance(exc, EtcdCallError) or link.closed or not ERRORS.get(exc.code, ERRORS[2])[2]:
                        raise exc
                    self.failed(endpoints[index])
                    error = exc
                    failures += 1
                    next_at = loop.time() + (0.05 if failures % count == 0 else 0.0)
        finally:
            for task in asked:
                task.cancel()
            await asyncio.gather(*asked, return_exceptions=True)

    async def _call_one(self, endpoint: str, path: str, body: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        if self._link.user is not None and self._link.token is None:
            await self._authenticate(endpoint, None)
        for attempt in range(2):
            token = self._link.token
            data = await self._post(endpoint, path, body, self._headers(), timeout)
            code = _code(data)
            if code is None:
                return data
            if code == UNAUTHENTICATED and self._link.user is not None and attempt == 0:
                await self._authenticate(endpoint, token)
                continue
            raise EtcdCallError(code, _message(data), redact(endpoint))
        raise AssertionError("unreachable")

    async def _post(
        self, endpoint: str, path: str, body: dict[str, Any], headers: dict[str, str], timeout: float | None
    ) -> dict[str, Any]:
        try:
            response = await self._client().post(
                endpoint + path, json=body, headers=headers, timeout=self._timeout if timeout is None else timeout
            )
            data = response.json()
        except httpx.TimeoutException as exc:
            raise EtcdCallError(None, f"no answer in time ({type(exc).__name__})", redact(endpoint)) from exc
        except (httpx.HTTPError, ValueError) as exc:
            raise EtcdCallError(None, f"{type(exc).__name__}: {exc}", redact(endpoint)) from exc
        if not isinstance(data, dict):
            raise EtcdCallError(None, f"answered {data!r}, not a JSON object", redact(endpoint))
        if response.status_code != 200 and _code(data) is None:
            raise EtcdCallError(None, f"HTTP {response.status_code}", redact(endpoint))
        return data

    async def _authenticate(self, endpoint: str, rejected: str | None) -> None:
        """Get a token (again, unless another task already replaced the ``rejected`` one)."""
        link = self._link
        async with link.auth_lock:
            if link.token is not None and link.token != rejected:
                return
            data = await self._post(
                endpoint, "/v3/auth/authenticate", {"name": link.user, "password": link.password}, {}, None
            )
            code = _code(data)
            if code is not None:
                code = UNAUTHENTICATED if code in AUTHENTICATE_REFUSED else code
                raise EtcdCallError(code, _message(data) + f" (user {link.user!r})", redact(endpoint))
            link.token = str(data.get("token", ""))

    # -- KV ----------------------------------------------------------------------------------------------------
    async def range(
        self, key: bytes, range_end: bytes | None = None, keys_only: bool = False
    ) -> tuple[list[KeyValue], int]:
        """Keys in [key, range_end) (just ``key`` without ``range_end``) and the store revision; ``keys_only``:
        without their values."""
        body = get(key, range_end)["request_range"]
        if keys_only:
            body["keys_only"] = True
        data = await self.call("/v3/kv/range", body)
        return [KeyValue.parse(kv) for kv in data.get("kvs", [])], _revision(data)

    async def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        data = await self.call("/v3/kv/put", put(key, value, lease)["request_put"])
        return _revision(data)

    async def delete_range(self, key: bytes, range_end: bytes | None = None) -> int:
        body: dict[str, Any] = {"key": b64(key)}
        if range_end is not None:
            body["range_end"] = b64(range_end)
        data = await self.call("/v3/kv/deleterange", body)
        return int(data.get("deleted", 0))

    async def txn(
        self, compares: list[dict[str, Any]], success: list[dict[str, Any]], failure: list[dict[str, Any]]
    ) -> TxnResult:
        data = await self.call("/v3/kv/txn", {"compare": compares, "success": success, "failure": failure})
        ranges: list[list[KeyValue] | None] = []
        for response in data.get("responses", []):
            got = response.get("response_range")
            ranges.append(None if got is None else [KeyValue.parse(kv) for kv in got.get("kvs", [])])
        return TxnResult(bool(data.get("succeeded", False)), _revision(data), ranges)

    # -- leases ------------------------------------------------------------------------------------------------
    async def grant(self, ttl: int) -> tuple[int, int]:
        """A new lease: (ID, TTL granted in seconds)."""
        data = await self.call("/v3/lease/grant", {"TTL": str(ttl)})
        return int(data.get("ID", 0)), int(data.get("TTL", 0))

    async def keepalive(self, lease_id: int, timeout: float | None = None, hedge_after: float | None = None) -> int:
        """One LeaseKeepAlive round trip: the TTL left (<= 0: the lease is gone). ``timeout``: seconds per attempt;
        ``hedge_after``: seconds after which another member is asked too (:meth:`call_hedged`; None: one at a
        time)."""
        body = {"ID": str(lease_id)}
        if hedge_after is not None:
            data = await self.call_hedged("/v3/lease/keepalive", body, timeout, hedge_after)
        else:
            data = await self.call("/v3/lease/keepalive", body, timeout)
        return int(data.get("result", {}).get("TTL", 0))

    async def revoke(self, lease_id: int, timeout: float | None = None) -> None:
        await self.call("/v3/lease/revoke", {"ID": str(lease_id)}, timeout)

    async def time_to_live(self, lease_id: int) -> int:
        """Seconds the lease has left (-1 when it is gone)."""
        data = await self.call("/v3/lease/timetolive", {"ID": str(lease_id)})
        return int(data.get("TTL", 0))

    # -- watches -----------------------------------------------------------------------------------------------
    async def watch(self, key: bytes, start_revision: int, created: asyncio.Event) -> AsyncGenerator[list[Event], None]:
        """Events on ``key`` from ``start_revision`` on, on the current endpoint (one streamed POST).

        Sets ``created`` once etcd confirms the watch. Never returns normally: any end of the stream (cancelled
        by etcd, connection lost) raises EtcdCallError; the caller stops it by cancelling its task.
        """
        endpoint = self.endpoint
        if self._link.user is not None and self._link.token is None:
            await self._authenticate(endpoint, None)
        body = {"create_request": {"key": b64(key), "start_revision": str(start_revision)}}
        timeout = httpx.Timeout(self._timeout.connect, read=None)
        where = redact(endpoint)
        try:
            async with self._client().stream(
                "POST", endpoint + "/v3/watch", json=body, headers=self._headers(), timeout=timeout
            ) as response:
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    message = json.loads(line)
                    if _code(message) is not None or "result" not in message:
                        raise EtcdCallError(_code(message), _message(message), where)
                    result = message["result"]
                    if result.get("canceled"):
                        raise EtcdCallError(2, f"watch cancelled: {result.get('cancel_reason', '')}", where)
                    if result.get("created"):
                        created.set()
                    events = [
                        Event(e.get("type", "PUT"), KeyValue.parse(e.get("kv", {}))) for e in result.get("events", [])
                    ]
                    if events:
                        yield events
        except (httpx.HTTPError, ValueError) as exc:
            raise EtcdCallError(None, f"watch stream broke: {type(exc).__name__}: {exc}", where) from exc
        raise EtcdCallError(None, "watch stream ended", where)


def _code(data: dict[str, Any]) -> int | None:
    """The gRPC status code of an error answer (unary ``code``, stream ``error.grpc_code``), else None."""
    error = data.get("error")
    if error is None:
        return None
    if isinstance(error, dict):
        return int(error.get("grpc_code", 2))
    return int(data.get("code", 2))


def _message(data: dict[str, Any]) -> str:
    error = data.get("error")
    if isinstance(error, dict):
        return str(error.get("message", error))
    return str(data.get("message") or error)


def _revision(data: dict[str, Any]) -> int:
    return int(data.get("header", {}).get("revision", 0))
