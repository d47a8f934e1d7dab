"""The etcd lease backend: node identities leased from etcd, for any number of replicas (client: aetcd).

Modelled on etcd's Go ``concurrency.Session``: one lease per process (TTL ``settings.etcd_lease_ttl``), refreshed
by a background task every TTL/3; every claim is one key bound to that lease, created by one transaction
``If(CreateRevision(key) == 0) Then Put(key, value, lease)``. When the lease expires (the process died or lost
etcd for longer than the TTL) etcd deletes its keys and the identities return to the pool.

Key layout under ``settings.etcd_namespace`` (default ``unique-id-generator/``)::

    cluster-id                               "3" or "1, 3, 4": allowed eight-byte cluster IDs (java-uniqueid);
                                             absent = any; never written by idmint
    pool/<cluster>:<generator>               eight-byte generator ID claim, on the lease (java-uniqueid layout)
    idmint/muid/<medallion, 11 hex digits>   Muid medallion claim, on the lease (uppercase, as in the Muid text)
    idmint/hlc-ulid/<publisher id>           HLC-ULID publisher ID claim, on the lease (decimal)
    idmint/siq/<domain hash, 8 hex>/<shard>  SIQ shard claim per domain, on the lease (decimal shard)
    idmint/wiji/<random part hex>            Wiji random part of a replica, on the lease (no exclusivity)
    idmint/marks/<scheme>/<rest of claim>    high-water mark of an identity, on NO lease: it outlives holders
                                             (e.g. idmint/marks/eight-byte/3/17, idmint/marks/siq/86ce1947/7)

Claim value (JSON, UTF-8)::

    {"holder": {"host", "pid", "version", "started_at", "address"}, "scheme": "<scheme>",
     "kind": "generator_id", "identity": 17, "lease": "694d8b2c1f3e0a11", "claimed_at": "2025-...Z",
     "high_water_mark": <last mark this holder recorded, native units; -1 until its first record>}

Mark value (JSON): ``{"high_water_mark": <native units>, "holder": {...}, "lease": "<hex>"}``. Marks only rise
(:meth:`EtcdClaim.record_mark`), except the exact final mark written by :meth:`EtcdBackend.release`, which may
lower our own reservation but never goes below the mark inherited at claim time. Every mark write is one
transaction guarded by the mod revisions of the claim key and the mark key, so only the current holder writes.

java-uniqueid (``uniqueid-etcd``, ``ResourceClaim``) claims ``pool/<cluster>:<generator>`` with ``Version(key) == 0
-> Put(key, "", lease)``, reads the pool with a keys-only range read and never reads values, so the JSON value
is ignored by Java clients, and keys it holds (with an empty value) are skipped here. Our marks live outside
``pool/`` so its pool count is not disturbed.

Fail closed: a claim's :attr:`~app.lease.base.Claim.deadline` is the ``clock()`` time at which the last
successful refresh (or grant) was *sent*, plus the TTL, minus ``settings.etcd_safety_margin``; etcd cannot expire
the lease before that. A refresh answering TTL <= 0 (lease expired or revoked), a write refused with "lease not
found", or a watch event showing the claim key deleted or overwritten makes the claim lost; a broken watch makes
the claim invalid until the key is verified and watched again. A lost lease is re-granted automatically; the node
re-claims on it.

Working around aetcd 1.0.0:

* no TLS option, and it dials one host:port: :class:`_Client` overrides ``connect`` (aetcd's steps plus TLS channel
  credentials, a bounded, polled wait for the channel, and closing the channel when a step fails); the keepalive
  task drops the connection after repeated failures and dials the next of ``settings.etcd_endpoints``;
* it authenticates once per connection, but tokens expire and vanish when etcd restarts: a rejected token makes
  the keepalive task reconnect (and so authenticate again);
* ``refresh_lease`` leaves its LeaseKeepAlive stream open until garbage collection: :meth:`_keepalive_once`
  does the round trip itself and cancels the stream.

A released claim whose key cannot be deleted (etcd unreachable) is remembered and deleted once etcd answers:
it sits on our live lease and would otherwise stay held for as long as this process runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import random
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aetcd
import aetcd.watcher
import grpc
import grpc.aio
from aetcd import rpc

from app.errors import BackendUnavailableError, ConfigError, LeaseLostError, NotReadyError, PoolExhaustedError
from app.lease.base import Claim, Holder, LeaseBackend, PoolSpec
from app.metrics import Metrics
from app.settings import Settings

log = logging.getLogger("idmint.lease.etcd")

T = TypeVar("T")

DEFAULT_PORT = 2379
CLUSTER_ID_KEY = "cluster-id"
POOL_PREFIX = "pool/"
IDMINT_PREFIX = "idmint/"
MARKS_PREFIX = IDMINT_PREFIX + "marks/"
RANDOM_DRAW_TRIES = 64
"""Uniform draws tried in a large pool (Muid medallions) before it counts as exhausted."""
SMALL_POOL_SIZE = 65_536
"""Pools up to this size draw "random" identities from the list of free ones instead of by rejection."""
BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 5.0
LATE_FACTOR = 1.5
"""A refresh sent later than this many refresh intervals after the previous one is logged as late."""
FAILURES_BEFORE_RECONNECT = 2
"""Consecutive failed refreshes after which the connection is dropped and the next endpoint dialled."""
WATCH_CANCEL_TIMEOUT_S = 1.0
GRPC_RECONNECT_BACKOFF_MS = 100
READY_POLL_S = 0.02
CLOSE_SETTLE_S = 0.05
"""After closing the channel, let grpc deliver the cancellations of its calls while the event loop still runs."""


# -- key layout (pure functions) ----------------------------------------------------------------------------------
def pool_prefix(namespace: str, pool: PoolSpec) -> str:
    """The key prefix under which ``pool``'s claims live (one range read lists them)."""
    return namespace + pool.key_prefix


def encode_identity(pool: PoolSpec, identity: int) -> str:
    """The last key segment naming ``identity`` (``pool.key_format``: Muid medallions as 11 uppercase hex)."""
    return pool.key_format.format(identity)


def decode_identity(pool: PoolSpec, segment: str) -> int | None:
    """Inverse of :func:`encode_identity`; None for a segment that is not one of ours (does not round-trip)."""
    base = 16 if pool.key_format.rstrip("}")[-1:] in ("x", "X") else 10
    if not segment.isascii() or not segment.isalnum():
        return None
    try:
        identity = int(segment, base)
    except ValueError:
        return None
    return identity if encode_identity(pool, identity) == segment else None


def claim_key(namespace: str, pool: PoolSpec, identity: int) -> str:
    """``<namespace><key_prefix><identity>``: ``pool/<cluster>:<generator>`` for eight-byte (java-uniqueid),
    ``idmint/<scheme>/...`` otherwise."""
    return pool_prefix(namespace, pool) + encode_identity(pool, identity)


def mark_key(namespace: str, pool: PoolSpec, identity: int) -> str:
    """The lease-free key holding ``identity``'s high-water mark: ``<namespace><mark_prefix><identity>``."""
    return namespace + pool.mark_prefix + encode_identity(pool, identity)


def register_key(namespace: str, scheme: str, name: str) -> str:
    """``idmint/<scheme>/<name>``: information published on the lease without exclusivity (Wiji)."""
    return f"{namespace}{IDMINT_PREFIX}{scheme}/{name}"


def parse_cluster_ids(value: str) -> list[int]:
    """Parse the ``cluster-id`` key as java-uniqueid does (``ClusterID.parseIntegers``): comma list, trimmed."""
    return [int(part.strip()) for part in value.split(",")]


def _cluster_id(pool: PoolSpec) -> int:
    try:
        cluster = int(pool.group)
    except ValueError:
        raise ValueError(f"eight-byte PoolSpec.group must be the cluster ID in decimal, got {pool.group!r}") from None
    if not 0 <= cluster <= 15:
        raise ValueError(f"eight-byte cluster ID must be in 0..15, got {cluster}")
    return cluster


async def _wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` s for ``event``; True when set.

    ``asyncio.timeout``, not ``asyncio.wait_for``: on Python 3.11 the latter swallows a cancellation that
    arrives while the event is being set, and a cancelled keepalive task would then run on forever.
    """
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


def _now_rfc3339() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _json(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=False).encode()


def _holder_of(value: bytes) -> str:
    """A short description of who holds a key, from its value (empty for java-uniqueid)."""
    if not value:
        return "a client that left no holder details (java-uniqueid writes an empty value)"
    try:
        holder = json.loads(value)["holder"]
        return f"{holder['host']} pid {holder['pid']}" + (f" ({holder['address']})" if holder.get("address") else "")
    except (ValueError, KeyError, TypeError):
        return "a client with an unrecognised value"


def _read_mark(value: bytes | None, key: str) -> int:
    if value is None:
        return -1
    try:
        return int(json.loads(value)["high_water_mark"])
    except (ValueError, KeyError, TypeError) as exc:
        # A mark we cannot read must not be taken as "no mark": that could repeat IDs.
        raise BackendUnavailableError(f"high-water mark key {key} is unreadable: {exc}") from exc


# -- the one place where aetcd / grpc errors become ours ----------------------------------------------------------
_ETCD_ERRORS: tuple[type[BaseException], ...] = (
    aetcd.ClientError, grpc.RpcError, grpc.aio.BaseError, OSError, asyncio.TimeoutError, asyncio.InvalidStateError,
)


def map_etcd_error(exc: BaseException, doing: str, endpoint: str) -> NotReadyError:
    """Translate an aetcd/grpc/transport error into the project's tree (the only place that does)."""
    if isinstance(exc, NotReadyError):
        return exc
    detail = (exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)) or type(exc).__name__
    lowered = detail.lower()
    if "lease not found" in lowered:
        return LeaseLostError(f"etcd lease expired or was revoked (while {doing})")
    if (isinstance(exc, aetcd.exceptions.UnauthenticatedError) or "authentication failed" in lowered
            or "invalid auth token" in lowered or "permission denied" in lowered
            or "user name is empty" in lowered or "auth token" in lowered):
        return BackendUnavailableError(f"etcd at {endpoint} rejected our credentials (while {doing}): {detail}")
    if isinstance(exc, asyncio.TimeoutError | aetcd.ConnectionTimeoutError):
        return BackendUnavailableError(f"etcd at {endpoint} did not answer in time (while {doing})")
    if isinstance(exc, aetcd.ConnectionFailedError | OSError):
        return BackendUnavailableError(f"etcd at {endpoint} is unreachable (while {doing}): {detail}")
    return BackendUnavailableError(f"etcd at {endpoint} failed (while {doing}): {detail}")


def _credentials_error(error: NotReadyError) -> bool:
    return isinstance(error, BackendUnavailableError) and "rejected our credentials" in error.reason


# -- the aetcd client, with TLS and a bounded connect ---------------------------------------------------------------
@dataclass(frozen=True)
class _Endpoint:
    url: str
    target: str  # host:port for grpc
    tls: bool


def _parse_endpoint(url: str) -> _Endpoint:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"etcd_endpoints must be http:// or https:// URLs, got {url!r}")
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    return _Endpoint(url=url, target=f"{host}:{parts.port or DEFAULT_PORT}", tls=parts.scheme == "https")


class _Client(aetcd.Client):
    """aetcd.Client (1.0.0) plus TLS channel credentials and a bounded wait for the connection.

    ``connect`` repeats the steps of aetcd's own (channel, optional Authenticate, stubs, watcher) with a secure
    channel when credentials are given, waits at most ``ready_timeout`` seconds for the channel to be ready, and
    closes the channel when any step fails (aetcd's leaks it).
    """

    def __init__(self, endpoint: _Endpoint, credentials: grpc.ChannelCredentials | None, username: str | None,
                 password: str | None, timeout: float, ready_timeout: float, options: dict[str, Any]) -> None:
        super().__init__(host=endpoint.target, username=username, password=password,
                         timeout=timeout, options=options, connect_wait_timeout=ready_timeout)  # type: ignore[arg-type]
        self.endpoint = endpoint
        self._credentials = credentials
        self._ready_timeout = ready_timeout

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        if self._is_connecting:
            async with asyncio.timeout(self._connect_wait_timeout):
                await self._connected.wait()
            return
        self._is_connecting = True
        channel: grpc.aio.Channel | None = None
        try:
            options = list(self._options.items())
            if self._credentials is not None:
                channel = rpc.secure_channel(self.endpoint.target, self._credentials, options=options)
            else:
                channel = rpc.insecure_channel(self.endpoint.target, options=options)
            await self._wait_ready(channel)
            metadata = None
            if self._username is not None and self._password is not None:
                auth = rpc.AuthStub(channel)
                resp = await auth.Authenticate(
                    rpc.AuthenticateRequest(name=self._username, password=self._password), timeout=self._timeout)
                metadata = (("token", resp.token),)
                self.auth_stub = auth
            self.channel = channel
            self.metadata = metadata
            self.kvstub = rpc.KVStub(channel)
            self.clusterstub = rpc.ClusterStub(channel)
            self.leasestub = rpc.LeaseStub(channel)
            self.maintenancestub = rpc.MaintenanceStub(channel)
            self._watcher = aetcd.watcher.Watcher(rpc.WatchStub(channel), timeout=self._timeout, metadata=metadata)
            self._connected.set()
        except BaseException:
            if channel is not None and self.channel is not channel:
                await channel.close()
            raise
        finally:
            self._is_connecting = False

    async def _wait_ready(self, channel: grpc.aio.Channel) -> None:
        """Poll the channel until READY (``ConnectionTimeoutError`` after ``ready_timeout``).

        Not ``channel.channel_ready()``: cancelling that leaves a connectivity watch inside grpc that fires later
        on the event loop it was made on, which may be closed by then.
        """
        deadline = asyncio.get_running_loop().time() + self._ready_timeout
        while channel.get_state(try_to_connect=True) != grpc.ChannelConnectivity.READY:
            if asyncio.get_running_loop().time() >= deadline:
                raise aetcd.ConnectionTimeoutError(f"no connection within {self._ready_timeout:g} s")
            await asyncio.sleep(READY_POLL_S)


# -- session and claims ---------------------------------------------------------------------------------------
class _Session:
    """One granted lease. ``deadline`` moves forward with every successful refresh; ``lost_reason`` is final."""

    def __init__(self, lease_id: int, ttl: float, sent_at: float, margin: float) -> None:
        self.lease_id = lease_id
        self.ttl = ttl
        self.margin = margin
        self.last_sent = sent_at
        self.deadline = sent_at + ttl - margin
        self.lost_reason: str | None = None
        self.deadline_logged = False

    @property
    def lost(self) -> bool:
        return self.lost_reason is not None

    @property
    def hex(self) -> str:
        return f"{self.lease_id:016x}"

    def refreshed(self, sent_at: float, ttl: float) -> None:
        self.last_sent = sent_at
        self.deadline = max(self.deadline, sent_at + min(ttl, self.ttl) - self.margin)
        self.deadline_logged = False


class EtcdClaim(Claim):
    """One identity held as a key on this process's lease."""

    def __init__(self, backend: EtcdBackend, pool: PoolSpec, identity: int, key: str, mark_key: str,
                 high_water_mark: int, session: _Session, create_revision: int, mod_revision: int,
                 marks_mod_revision: int, holder: Holder, claimed_at: str) -> None:
        self.scheme = pool.scheme
        self.identity = identity
        self.key = key
        self.high_water_mark = high_water_mark
        self.pool = pool
        self.mark_key = mark_key
        self.holder = holder
        self.claimed_at = claimed_at
        self._backend = backend
        self._session = session
        self._create_revision = create_revision
        self._mod_revision = mod_revision
        self._marks_mod_revision = marks_mod_revision
        self._stored_mark = high_water_mark
        self._lost_reason: str | None = None
        self._released = False
        self._watch: aetcd.Watch | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._watch_broken_at: float | None = None
        self._lock = asyncio.Lock()

    @property
    def lease_id(self) -> int:
        return self._session.lease_id

    @property
    def deadline(self) -> float:
        deadline = self._session.deadline
        if self._watch_broken_at is not None:
            deadline = min(deadline, self._watch_broken_at)
        return deadline

    @property
    def lost_reason(self) -> str | None:
        if self._released:
            return "released"
        return self._lost_reason or self._session.lost_reason

    def lost(self) -> bool:
        return self._released or self._lost_reason is not None or self._session.lost

    def valid(self) -> bool:
        return not self.lost() and self._backend._clock() < self.deadline

    async def record_mark(self, mark: int) -> None:
        await self._backend._record_mark(self, mark)

    def record_mark_sync(self, mark: int) -> None:
        self._backend._run_threadsafe(lambda: self.record_mark(mark))

    def _value(self, mark: int) -> bytes:
        return _claim_value(self.holder, self.pool, self.identity, self._session, self.claimed_at, mark)

    def _set_lost(self, reason: str) -> None:
        if self._lost_reason is None and not self._released:
            self._lost_reason = reason
            log.error("etcd: %s %s %d lost: %s (key %s)", self.scheme, self.pool.kind, self.identity, reason,
                      self.key)
            self._backend._metrics_held(self.scheme, False, None)
            self._backend._check_soon()


def _claim_value(holder: Holder, pool: PoolSpec, identity: int, session: _Session, claimed_at: str,
                 mark: int = -1) -> bytes:
    """The claim key's value: who holds it, on which lease, and the last mark it recorded (-1: none yet)."""
    return _json({
        "holder": holder.as_dict(), "scheme": pool.scheme, "kind": pool.kind, "identity": identity,
        "lease": session.hex, "claimed_at": claimed_at, "high_water_mark": mark,
    })


# -- the backend ------------------------------------------------------------------------------------------------
class EtcdBackend(LeaseBackend):
    """etcd leases for node identities (see the module docstring for the key layout and the safety argument).

    ``settings``: the ``etcd_*`` settings (endpoints, namespace, TTL, safety margin, timeouts, TLS, auth);
    ``metrics``: optional :class:`~app.metrics.Metrics`; ``clock``: monotonic seconds (deadlines use it).
    Raises :class:`~app.errors.ConfigError` for unusable settings (no endpoints, unreadable TLS files).
    """

    name = "etcd"

    def __init__(self, settings: Settings, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not settings.etcd_endpoints:
            raise ConfigError("etcd backend needs etcd_endpoints (IDMINT_ETCD_ENDPOINTS), got none")
        self.settings = settings
        self.metrics = metrics
        self._clock = clock
        self._namespace = settings.etcd_namespace
        self._endpoints = [_parse_endpoint(url) for url in settings.etcd_endpoints]
        self._credentials = self._load_credentials(settings)
        self._ttl = int(settings.etcd_lease_ttl)
        self._margin = float(settings.etcd_safety_margin)
        self.mark_interval = self._ttl / 3
        # Marks reach at most max_clock_wait ahead (at least one interval), so a node that re-claims the
        # identity it just dropped waits for its own mark instead of refusing it.
        self.mark_horizon = max(self.mark_interval, min(2 * self.mark_interval, settings.max_clock_wait))
        self._refresh_interval = self._ttl / 3
        self._retry_after = max(1, math.ceil(self._refresh_interval))
        self._options = {
            "grpc.initial_reconnect_backoff_ms": GRPC_RECONNECT_BACKOFF_MS,
            "grpc.min_reconnect_backoff_ms": GRPC_RECONNECT_BACKOFF_MS,
            "grpc.max_reconnect_backoff_ms": max(GRPC_RECONNECT_BACKOFF_MS, int(self._refresh_interval * 500)),
        }
        self._endpoint_index = 0
        self._client: _Client | None = None
        self._session: _Session | None = None
        self._claims: set[EtcdClaim] = set()
        self._registrations: dict[str, tuple[bytes, int | None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._attempted: asyncio.Event | None = None
        self._ready: asyncio.Event | None = None
        self._healthy: bool | None = None
        self._failures = 0
        self._failing_since: float | None = None
        self._reconnect = False
        self._inflight: set[bytes] = set()
        """Claim keys whose claiming transaction is under way (not to be mistaken for leftovers)."""
        self._orphans: dict[bytes, tuple[int, int]] = {}
        """Claim keys released while etcd could not be told: key -> (create revision, lease ID); deleted by the
        keepalive task once etcd answers (they sit on our live lease: otherwise held for as long as we run)."""
        self._reason = "etcd backend not started"
        self._closed = False

    @staticmethod
    def _load_credentials(settings: Settings) -> grpc.ChannelCredentials | None:
        tls_wanted = any(urlsplit(url).scheme == "https" for url in settings.etcd_endpoints)
        files = (settings.etcd_ca_cert, settings.etcd_cert_cert, settings.etcd_cert_key)
        if not tls_wanted:
            if any(f is not None for f in files):
                raise ConfigError("etcd_ca_cert / etcd_cert_cert / etcd_cert_key need https:// etcd_endpoints")
            return None

        def read(path: Path | None, what: str) -> bytes | None:
            if path is None:
                return None
            try:
                return Path(path).read_bytes()
            except OSError as exc:
                raise ConfigError(f"{what} {path} cannot be read: {exc}") from exc

        return grpc.ssl_channel_credentials(
            root_certificates=read(settings.etcd_ca_cert, "etcd_ca_cert"),
            private_key=read(settings.etcd_cert_key, "etcd_cert_key"),
            certificate_chain=read(settings.etcd_cert_cert, "etcd_cert_cert"),
        )

    # -- lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the keepalive task; wait (bounded) for its first attempt. Never raises for an unreachable etcd."""
        if self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._attempted = asyncio.Event()
        self._ready = asyncio.Event()
        self._reason = "connecting to etcd"
        self._task = asyncio.create_task(self._run(), name="idmint-etcd-keepalive")
        first_try = self.settings.etcd_connect_timeout + 2 * self.settings.etcd_request_timeout
        await _wait_event(self._attempted, first_try)

    async def close(self) -> None:
        """Stop the keepalive task, give every claim back and revoke the lease (timeout <= TTL). Never raises."""
        if self._closed:
            return
        self._closed = True
        self._reason = "etcd backend closed"
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=self.settings.etcd_request_timeout + 1.0)
            self._task = None
        claims, self._claims = list(self._claims), set()
        for claim in claims:
            claim._released = True
            await self._stop_watch(claim)
            self._metrics_held(claim.scheme, False, None)
        session, client = self._session, self._client
        self._session = None
        if session is not None and not session.lost and client is not None:
            timeout = min(float(self._ttl), self.settings.etcd_request_timeout)
            try:
                async with self._etcd("revoking the lease", client, timeout):
                    await client.revoke_lease(session.lease_id)
                session.lost_reason = "lease revoked at shutdown"
                log.info("etcd: lease %s revoked; %d claim(s) released", session.hex, len(claims))
            except LeaseLostError:
                log.info("etcd: lease %s was already gone at shutdown", session.hex)
            except NotReadyError as exc:
                log.warning("etcd: revoking lease %s failed (it expires within %d s): %s", session.hex, self._ttl,
                            exc.reason)
        await self._drop_client()
        await asyncio.sleep(CLOSE_SETTLE_S)

    # -- the keepalive task ------------------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self._wake is not None and self._attempted is not None
        backoff = BACKOFF_START_S
        while not self._closed:
            self._wake.clear()
            error: NotReadyError | None = None
            try:
                delay = await self._step()
                backoff = BACKOFF_START_S
            except NotReadyError as exc:
                error = exc
            except Exception as exc:  # noqa: BLE001 -- the keepalive must outlive any one failure
                log.exception("etcd: keepalive step failed unexpectedly")
                error = BackendUnavailableError(f"etcd backend error: {exc!r}")
            if error is not None:
                await self._failed(error)
                delay = backoff * random.uniform(0.5, 1.0)
                backoff = min(backoff * 2, self._refresh_interval, BACKOFF_MAX_S)
            self._attempted.set()
            if delay > 0:
                await _wait_event(self._wake, delay)

    async def _step(self) -> float:
        """Connect, grant or refresh, re-arm watches. Returns seconds until the next refresh is due."""
        if self._reconnect:
            self._reconnect = False
            await self._drop_client()
        client = await self._connected_client()
        session = self._session
        if session is None or session.lost:
            session = await self._grant(client)
        else:
            sent_at = self._clock()
            async with self._etcd("refreshing the lease", client):
                reply = await self._keepalive_once(client, session.lease_id)
            if reply is None:
                raise BackendUnavailableError("etcd ended the keepalive stream without an answer")
            ttl = reply.TTL
            if ttl <= 0:
                self._lease_lost(session, "etcd says the lease expired or was revoked")
                return 0.0
            late = sent_at - session.last_sent - self._refresh_interval
            session.refreshed(sent_at, ttl)
            if self._healthy is False:
                log.info("etcd: recovered: lease %s refreshed after %d failed attempt(s) over %.1f s", session.hex,
                         self._failures, sent_at - (self._failing_since or sent_at))
            elif late > self._refresh_interval * (LATE_FACTOR - 1):
                log.warning("etcd: lease %s refresh was %.1f s late", session.hex, late)
            self._renewal("late" if late > self._refresh_interval * (LATE_FACTOR - 1) else "ok")
        await self._rearm_watches(client, session)
        await self._publish_registrations(client, session)
        await self._delete_orphans(client, session)
        self._set_healthy(session)
        return max(0.0, session.last_sent + self._refresh_interval - self._clock())

    async def _keepalive_once(self, client: _Client, lease_id: int) -> Any:
        """One LeaseKeepAlive round trip; the stream is cancelled before returning.

        aetcd's ``refresh_lease`` returns from inside ``async for`` and leaves the stream open until it is garbage
        collected, when grpc cancels it on the event loop it was made on -- which may be closed by then.
        """
        await client.connect()
        call = client.leasestub.LeaseKeepAlive(timeout=self.settings.etcd_request_timeout, metadata=client.metadata)
        try:
            await call.write(rpc.LeaseKeepAliveRequest(ID=lease_id))
            reply = await call.read()
        finally:
            call.cancel()
        return None if reply is grpc.aio.EOF else reply

    async def _connected_client(self) -> _Client:
        if self._client is not None:
            return self._client
        endpoint = self._endpoints[self._endpoint_index % len(self._endpoints)]
        s = self.settings
        client = _Client(endpoint, self._credentials if endpoint.tls else None, s.etcd_user, s.etcd_password,
                         timeout=s.etcd_request_timeout, ready_timeout=s.etcd_connect_timeout,
                         options=self._options)
        try:
            async with self._etcd("connecting", client, s.etcd_connect_timeout + s.etcd_request_timeout):
                await client.connect()
        except NotReadyError:
            self._endpoint_index += 1
            raise
        self._client = client
        log.info("etcd: connected to %s", endpoint.url)
        return client

    async def _grant(self, client: _Client) -> _Session:
        sent_at = self._clock()
        async with self._etcd("granting a lease", client):
            lease = await client.lease(self._ttl)
        if lease.ttl <= 0:
            raise BackendUnavailableError(f"etcd granted a lease with TTL {lease.ttl}")
        session = _Session(lease.id, min(lease.ttl, self._ttl), sent_at, self._margin)
        self._session = session
        log.info("etcd: lease %s granted (TTL %d s, refresh every %.1f s, fail closed %.1f s after a refresh)",
                 session.hex, session.ttl, self._refresh_interval, session.ttl - self._margin)
        self._renewal("ok")
        return session

    def _lease_lost(self, session: _Session, reason: str) -> None:
        if session.lost:
            return
        session.lost_reason = reason
        held = [c for c in self._claims if c._session is session]
        log.error("etcd: lease %s lost: %s; %d claim(s) on it are void, granting a new lease", session.hex, reason,
                  len(held))
        self._renewal("lost")
        for claim in held:
            self._metrics_held(claim.scheme, False, None)
        if self._ready is not None:
            self._ready.clear()
        if self._wake is not None:
            self._wake.set()

    async def _failed(self, exc: NotReadyError) -> None:
        now = self._clock()
        self._failures += 1
        self._reason = exc.reason
        if self._ready is not None:
            self._ready.clear()
        session = self._session
        if isinstance(exc, LeaseLostError) and session is not None:
            self._lease_lost(session, exc.reason)
        if self._healthy is not False:
            self._failing_since = now
            if session is None or session.lost:
                log.warning("etcd: no lease: %s; retrying with backoff", exc.reason)
            else:
                log.warning("etcd: lease %s refresh failed: %s; issuing stops in %.1f s unless a refresh succeeds",
                            session.hex, exc.reason, max(0.0, session.deadline - now))
            self._healthy = False
        if session is not None and not session.lost and now >= session.deadline and not session.deadline_logged:
            session.deadline_logged = True
            log.error("etcd: lease %s deadline passed without a confirmed refresh: claims fail closed until etcd "
                      "answers", session.hex)
        self._renewal("failed")
        if _credentials_error(exc) or self._failures % FAILURES_BEFORE_RECONNECT == 0:
            self._endpoint_index += 1
            await self._drop_client()

    def _set_healthy(self, session: _Session) -> None:
        self._failures = 0
        self._failing_since = None
        self._healthy = True
        self._reason = ""
        if self.metrics is not None:
            self.metrics.lease_deadline(session.deadline - self._clock())
        if self._ready is not None:
            self._ready.set()

    async def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        for claim in self._claims:
            if claim._watch_task is not None and claim._watch_broken_at is None:
                claim._watch_broken_at = self._clock()
        try:
            async with asyncio.timeout(self.settings.etcd_request_timeout):
                await client.close()
        except Exception as exc:  # noqa: BLE001 -- closing a broken channel may fail in any way; it is gone
            log.debug("etcd: closing the connection failed: %r", exc)

    # -- claims ----------------------------------------------------------------------------------------------
    async def _usable(self) -> tuple[_Client, _Session]:
        """The client and a lease valid now; waits briefly for a lease being granted. Raises NotReadyError."""
        if self._closed:
            raise BackendUnavailableError("etcd backend is closed")
        if self._task is None or self._ready is None or self._wake is None:
            raise BackendUnavailableError("etcd backend not started")
        for attempt in range(2):
            client, session = self._client, self._session
            if (client is not None and session is not None and not session.lost
                    and self._clock() < session.deadline):
                return client, session
            if attempt or self._healthy is False:
                break
            self._wake.set()
            if not await _wait_event(self._ready, self.settings.etcd_request_timeout):
                break
        session = self._session
        if self._reason:
            reason = self._reason
        elif session is not None and not session.lost:
            reason = f"etcd lease {session.hex} not refreshed in time (deadline passed)"
        else:
            reason = "no etcd lease yet"
        raise BackendUnavailableError(reason, retry_after=self._retry_after)

    async def claim(self, pool: PoolSpec, holder: Holder) -> Claim:
        """Claim one free identity of ``pool`` on this process's lease (one transaction per attempt).

        Raises NotReadyError when our cluster ID is not listed in ``cluster-id`` (eight-byte),
        PoolExhaustedError when every candidate is held, BackendUnavailableError when etcd cannot be used.
        A lease found gone while claiming is replaced (once) and the claim retried on the new one.
        """
        for attempt in range(2):
            client, session = await self._usable()
            try:
                return await self._claim_on(client, session, pool, holder)
            except LeaseLostError as exc:
                self._lease_lost(session, exc.reason)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def _claim_on(self, client: _Client, session: _Session, pool: PoolSpec, holder: Holder) -> EtcdClaim:
        ns = self._namespace
        prefix = pool_prefix(ns, pool).encode()
        t = client.transactions
        reads = [t.get(prefix, aetcd.utils.prefix_range_end(prefix))]
        if pool.allowed_groups_key:
            reads.append(t.get((ns + pool.allowed_groups_key).encode()))
        async with self._etcd(f"reading the {pool.scheme} pool", client):
            _, found = await client.transaction(compare=[], success=reads, failure=[])
        held: dict[int, bytes] = {}
        ours = {c.key.encode() for c in self._claims}
        for value, kv in found[0]:
            identity = decode_identity(pool, kv.key.decode(errors="replace")[len(prefix):])
            if identity is None:
                continue
            held[identity] = value
            if (kv.lease == session.lease_id and kv.key not in ours and kv.key not in self._inflight
                    and kv.key not in self._orphans):
                # Ours, from a claim whose answer was lost (timeout): give it back rather than hold it unused.
                log.info("etcd: releasing %s, left on our lease by an unfinished claim", kv.key.decode())
                if await self._delete_quietly(client, kv.key, kv.create_revision, session.lease_id):
                    del held[identity]
        if pool.allowed_groups_key:
            self._check_cluster_id(pool, found[1][0][0] if found[1] else None)

        claimed_at = _now_rfc3339()
        tries = 0
        for identity in self._draw(pool, held):
            tries += 1
            key = claim_key(ns, pool, identity).encode()
            mkey = mark_key(ns, pool, identity).encode()
            self._inflight.add(key)
            try:
                async with self._etcd(f"claiming {key.decode()}", client):
                    ok, resp = await client.transaction(
                        compare=[t.create(key) == 0],
                        success=[t.put(key, _claim_value(holder, pool, identity, session, claimed_at),
                                       session.lease_id), t.get(key), t.get(mkey)],
                        failure=[t.get(key)],
                    )
            finally:
                self._inflight.discard(key)
            if not ok:
                held[identity] = resp[0][0][0] if resp[0] else b""
                continue
            kv = resp[1][0][1]
            mark_value, mark_kv = resp[2][0] if resp[2] else (None, None)
            try:
                mark = _read_mark(mark_value, mkey.decode())
            except NotReadyError:
                await self._delete_quietly(client, key, kv.create_revision, session.lease_id)
                raise
            claim = EtcdClaim(self, pool, identity, key.decode(), mkey.decode(), mark, session,
                              kv.create_revision, kv.mod_revision, mark_kv.mod_revision if mark_kv else 0, holder,
                              claimed_at)
            self._claims.add(claim)
            await self._start_watch(client, claim, kv.mod_revision + 1)
            log.info("etcd: claimed %s %s %d (key %s, lease %s, high-water mark %d)", pool.scheme, pool.kind,
                     identity, claim.key, session.hex, mark)
            self._metrics_held(pool.scheme, True, identity)
            return claim
        raise PoolExhaustedError(self._exhausted_reason(pool, held, tries), retry_after=self._ttl)

    def _check_cluster_id(self, pool: PoolSpec, value: bytes | None) -> None:
        if value is None:
            return
        cluster = _cluster_id(pool)
        key = self._namespace + (pool.allowed_groups_key or CLUSTER_ID_KEY)
        try:
            allowed = parse_cluster_ids(value.decode())
        except ValueError:
            raise NotReadyError(f"etcd key {key} holds {value!r}, not a comma-separated list of cluster IDs",
                                retry_after=self._ttl) from None
        if cluster not in allowed:
            raise NotReadyError(
                f"cluster ID {cluster} is not listed in etcd key {key} ({value.decode()!r}); "
                f"set IDMINT_CLUSTER_ID to one of {', '.join(map(str, allowed))} or add it to the key",
                retry_after=self._ttl)

    @staticmethod
    def _draw(pool: PoolSpec, held: dict[int, bytes]) -> Iterator[int]:
        """Candidate identities in the order to try; ``held`` is updated by the caller as attempts fail."""
        if pool.candidates is not None:
            for identity in pool.candidates:
                if identity not in held and identity not in pool.exclude:
                    yield identity
            return
        if pool.draw == "random":
            size = pool.maximum - pool.minimum + 1
            if size <= SMALL_POOL_SIZE:
                free = [i for i in range(pool.minimum, pool.maximum + 1) if i not in held and i not in pool.exclude]
                while free:
                    identity = free.pop(secrets.randbelow(len(free)))
                    if identity not in held:
                        yield identity
                return
            for _ in range(RANDOM_DRAW_TRIES):
                identity = pool.minimum + secrets.randbelow(size)
                if identity not in held and identity not in pool.exclude:
                    yield identity
            return
        if pool.draw != "scan":
            raise ValueError(f"PoolSpec.draw must be 'scan' or 'random', got {pool.draw!r}")
        for identity in range(pool.minimum, pool.maximum + 1):
            if identity not in held and identity not in pool.exclude:
                yield identity

    def _exhausted_reason(self, pool: PoolSpec, held: dict[int, bytes], tries: int) -> str:
        where = f" in cluster {_cluster_id(pool)}" if pool.allowed_groups_key else (
            f" for domain hash {pool.group}" if pool.group else "")
        if pool.candidates is not None:
            parts = []
            for identity in pool.candidates:
                if identity in held:
                    parts.append(f"{identity} is held by {_holder_of(held[identity])}")
                elif identity in pool.exclude:
                    parts.append(f"{identity} was refused (high-water mark ahead of our clock)")
            what = "static " if pool.static else ""
            return f"{pool.scheme}: {what}{pool.kind}{where} unavailable: " + "; ".join(parts or ["no candidates"])
        size = pool.maximum - pool.minimum + 1
        in_range = sum(1 for i in held if pool.minimum <= i <= pool.maximum)
        refused = f", {len(pool.exclude)} refused" if pool.exclude else ""
        tried = f" after {tries} random draw(s)" if pool.draw == "random" and size > SMALL_POOL_SIZE else ""
        return (f"{pool.scheme}: no free {pool.kind}{where}{tried}: {in_range} of {size} held "
                f"({pool.minimum}..{pool.maximum}){refused}")

    # -- watches ---------------------------------------------------------------------------------------------
    async def _start_watch(self, client: _Client, claim: EtcdClaim, start_revision: int) -> None:
        try:
            async with self._etcd(f"watching {claim.key}", client):
                watch = await client.watch(claim.key.encode(), start_revision=start_revision)
        except NotReadyError as exc:
            log.warning("etcd: watching %s failed: %s; the claim is unusable until it is watched", claim.key,
                        exc.reason)
            claim._watch_broken_at = self._clock()
            claim._watch_task = None
            return
        claim._watch = watch
        claim._watch_broken_at = None
        claim._watch_task = asyncio.create_task(self._follow(claim, watch), name=f"idmint-etcd-watch-{claim.key}")

    async def _follow(self, claim: EtcdClaim, watch: aetcd.Watch) -> None:
        try:
            async for event in watch:
                kv = event.kv
                if event.kind == "DELETE":
                    claim._set_lost("claim key deleted")
                    return
                if kv.lease != claim.lease_id or kv.create_revision != claim._create_revision:
                    claim._set_lost(f"claim key overwritten (now on lease {kv.lease:016x})")
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 -- any end of the stream means: not watched any more
            log.debug("etcd: watch of %s ended: %r", claim.key, exc)
        if not claim.lost() and not claim._released:
            if claim._watch_broken_at is None:
                claim._watch_broken_at = self._clock()
            claim._watch_task = None
            if self._wake is not None:
                self._wake.set()

    async def _stop_watch(self, claim: EtcdClaim) -> None:
        task, watch = claim._watch_task, claim._watch
        claim._watch_task, claim._watch = None, None
        if watch is not None:
            try:
                async with asyncio.timeout(WATCH_CANCEL_TIMEOUT_S):
                    await watch.cancel()
            except Exception as exc:  # noqa: BLE001 -- the stream may already be gone
                log.debug("etcd: cancelling the watch of %s failed: %r", claim.key, exc)
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=WATCH_CANCEL_TIMEOUT_S)

    async def _rearm_watches(self, client: _Client, session: _Session) -> None:
        """Verify and watch again every claim whose watch broke (the key may have changed meanwhile)."""
        for claim in list(self._claims):
            if claim._watch_task is not None and claim._watch_broken_at is None:
                continue
            if claim.lost() or claim._session is not session:
                continue
            await self._stop_watch(claim)
            async with self._etcd(f"verifying {claim.key}", client):
                got = await client.get(claim.key.encode())
            if got is None:
                claim._set_lost("claim key deleted")
                continue
            if got.lease != session.lease_id or got.create_revision != claim._create_revision:
                claim._set_lost(f"claim key overwritten (now on lease {got.lease:016x})")
                continue
            await self._start_watch(client, claim, got.header.revision + 1)
            if claim._watch_task is None:
                raise BackendUnavailableError(f"etcd: watching {claim.key} failed")

    # -- marks -----------------------------------------------------------------------------------------------
    async def _record_mark(self, claim: EtcdClaim, mark: int, exact: bool = False) -> None:
        """Store ``mark`` in the claim key and the mark key, guarded by both keys' mod revisions.

        Only ever raises the stored mark, except ``exact`` (release) which stores the final mark as given (never
        below the mark inherited at claim time).
        """
        if claim.lost():
            raise LeaseLostError(f"{claim.scheme} {claim.pool.kind} {claim.identity} lost: {claim.lost_reason}")
        if exact:
            mark = max(mark, claim.high_water_mark)
            if mark == claim._stored_mark:
                return
        elif mark <= claim._stored_mark:
            return
        client = self._client
        if client is None:
            raise BackendUnavailableError(self._reason or "etcd not connected", retry_after=self._retry_after)
        t = client.transactions
        key, mkey = claim.key.encode(), claim.mark_key.encode()
        mark_value = _json({"high_water_mark": mark, "holder": claim.holder.as_dict(), "lease": claim._session.hex})
        async with claim._lock:
            for _ in range(2):
                try:
                    async with self._etcd(f"recording the high-water mark of {claim.key}", client):
                        ok, resp = await client.transaction(
                            compare=[t.mod(key) == claim._mod_revision, t.mod(mkey) == claim._marks_mod_revision],
                            success=[t.put(key, claim._value(mark), claim.lease_id), t.put(mkey, mark_value),
                                     t.get(key), t.get(mkey)],
                            failure=[t.get(key), t.get(mkey)],
                        )
                except LeaseLostError as exc:
                    self._lease_lost(claim._session, exc.reason)
                    raise
                if ok:
                    claim._mod_revision = resp[2][0][1].mod_revision
                    claim._marks_mod_revision = resp[3][0][1].mod_revision
                    claim._stored_mark = mark
                    return
                key_kv = resp[0][0][1] if resp[0] else None
                if key_kv is None:
                    claim._set_lost("claim key deleted")
                elif key_kv.lease != claim.lease_id or key_kv.create_revision != claim._create_revision:
                    claim._set_lost(f"claim key overwritten (now on lease {key_kv.lease:016x})")
                if claim.lost():
                    raise LeaseLostError(f"{claim.scheme} {claim.pool.kind} {claim.identity} lost: "
                                         f"{claim.lost_reason}")
                # Our key is intact; the mark key was written by someone else (an operator?): re-read and retry.
                claim._mod_revision = key_kv.mod_revision  # type: ignore[union-attr]
                mark_value_now, mark_kv = resp[1][0] if resp[1] else (None, None)
                claim._marks_mod_revision = mark_kv.mod_revision if mark_kv else 0
                stored = _read_mark(mark_value_now, claim.mark_key)
                if not exact and stored >= mark:
                    claim._stored_mark = stored
                    return
        raise BackendUnavailableError(f"high-water mark of {claim.key} keeps changing under us; not recorded",
                                      retry_after=self._retry_after)

    def _run_threadsafe(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``make()`` on the backend's event loop from another thread and wait for it (blocking variants)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            raise BackendUnavailableError("etcd backend not started")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError("record_mark_sync called on the backend's own event loop; await record_mark instead")
        future = asyncio.run_coroutine_threadsafe(make(), loop)
        try:
            return future.result(self.settings.etcd_request_timeout * 3)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise BackendUnavailableError("etcd did not answer in time (recording a mark)") from None

    # -- release / register ----------------------------------------------------------------------------------
    async def release(self, claim: Claim, final_mark: int | None) -> None:
        """Record ``final_mark`` exactly (never below the inherited mark) and delete the claim key.

        Never raises: a lost claim is only forgotten; an unreachable etcd is logged (the lease expires anyway).
        """
        if not isinstance(claim, EtcdClaim) or claim._released:
            return
        was_lost = claim.lost()
        if not was_lost and final_mark is not None:
            try:
                await self._record_mark(claim, final_mark, exact=True)
            except NotReadyError as exc:
                log.warning("etcd: final high-water mark of %s not recorded: %s", claim.key, exc.reason)
        claim._released = True
        self._claims.discard(claim)
        await self._stop_watch(claim)
        self._metrics_held(claim.scheme, False, None)
        if claim._lost_reason is not None or claim._session.lost:
            return
        if await self._delete_quietly(self._client, claim.key.encode(), claim._create_revision, claim.lease_id):
            log.info("etcd: released %s %s %d", claim.scheme, claim.pool.kind, claim.identity)

    async def _delete_quietly(self, client: _Client | None, key: bytes, create_revision: int,
                              lease_id: int) -> bool:
        """Delete our incarnation of ``key`` (same create revision). Never raises; False when it has to wait
        for etcd (kept in ``_orphans``)."""
        if client is None:
            self._orphans[key] = (create_revision, lease_id)
            return False
        t = client.transactions
        try:
            async with self._etcd(f"deleting {key.decode()}", client):
                await client.transaction(compare=[t.create(key) == create_revision], success=[t.delete(key)],
                                         failure=[])
            self._orphans.pop(key, None)
        except LeaseLostError:
            self._orphans.pop(key, None)  # gone with the lease
        except NotReadyError as exc:
            self._orphans[key] = (create_revision, lease_id)
            log.warning("etcd: deleting %s failed; retrying once etcd answers: %s", key.decode(), exc.reason)
            return False
        return True

    async def _delete_orphans(self, client: _Client, session: _Session) -> None:
        for key, (create_revision, lease_id) in list(self._orphans.items()):
            if lease_id != session.lease_id:
                del self._orphans[key]  # its lease is gone, and the key with it
                continue
            t = client.transactions
            async with self._etcd(f"deleting {key.decode()}", client):
                await client.transaction(compare=[t.create(key) == create_revision], success=[t.delete(key)],
                                         failure=[])
            del self._orphans[key]
            log.info("etcd: released %s (deferred while etcd was unreachable)", key.decode())

    async def register(self, scheme: str, name: str, value: dict[str, Any]) -> None:
        """Put ``idmint/<scheme>/<name>`` = JSON ``value`` on the lease; re-published on every new lease.

        Raises BackendUnavailableError when it cannot be published now (it is published once etcd answers).
        """
        key = register_key(self._namespace, scheme, name)
        self._registrations[key] = (_json(value), None)
        client, session = await self._usable()
        await self._publish_registrations(client, session)

    async def _publish_registrations(self, client: _Client, session: _Session) -> None:
        for key, (data, lease_id) in list(self._registrations.items()):
            if lease_id == session.lease_id:
                continue
            payload = json.loads(data)
            payload["lease"] = session.hex
            async with self._etcd(f"registering {key}", client):
                await client.put(key.encode(), _json(payload), lease=session.lease_id)
            self._registrations[key] = (data, session.lease_id)
            log.info("etcd: registered %s on lease %s", key, session.hex)

    # -- helpers ---------------------------------------------------------------------------------------------
    @asynccontextmanager
    async def _etcd(self, doing: str, client: _Client, timeout: float | None = None) -> AsyncIterator[None]:
        """Bound one etcd call in time and map its errors (see :func:`map_etcd_error`)."""
        limit = timeout if timeout is not None else self.settings.etcd_request_timeout + 1.0
        try:
            async with asyncio.timeout(limit):
                yield
        except _ETCD_ERRORS as exc:
            error = map_etcd_error(exc, doing, client.endpoint.url)
            if _credentials_error(error) and client is self._client:
                # aetcd authenticates once per connection; tokens expire or vanish when etcd restarts.
                self._reconnect = True
                self._check_soon()
            raise error from exc

    def _check_soon(self) -> None:
        """Refresh now rather than at the next interval (a claim key vanished: maybe the whole lease did)."""
        if self._wake is not None:
            self._wake.set()

    def _renewal(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.lease_renewal(outcome)

    def _metrics_held(self, scheme: str, held: bool, identity: int | None) -> None:
        if self.metrics is not None:
            self.metrics.lease_held(scheme, held, identity)

    def status(self) -> dict[str, Any]:
        session = self._session
        out: dict[str, Any] = {
            "backend": self.name,
            "endpoints": [e.url for e in self._endpoints],
            "namespace": self._namespace,
            "lease_ttl_s": self._ttl,
            "connected": self._client is not None,
            "healthy": bool(self._healthy),
        }
        if session is not None:
            out["lease"] = session.hex
            out["lease_lost"] = session.lost
            out["deadline_in_s"] = round(session.deadline - self._clock(), 3)
        if self._reason:
            out["reason"] = self._reason
        out["claims"] = sorted(c.key for c in self._claims)
        return out
