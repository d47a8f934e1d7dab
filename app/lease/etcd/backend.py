"""The etcd lease backend: claims, guarded high-water marks, watches, release (see :mod:`app.lease.etcd`)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from app.errors import BackendUnavailableError, ConfigError, LeaseLostError, NotReadyError, PoolExhaustedError
from app.etcd.calls import Calls
from app.etcd.client import EtcdClient, compare, delete, get, prefix_end, put, redact, ssl_context
from app.lease.base import Claim, LeaseBackend, Owner
from app.lease.draw import draw
from app.lease.etcd import keys
from app.lease.etcd.claim import EtcdClaim
from app.lease.etcd.session import Session
from app.lease.etcd.watch import wait_event
from app.metrics import Metrics
from app.pool import IdentityPool
from app.settings import Settings

log = logging.getLogger("idmint.lease.etcd")

BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 5.0
MIN_ATTEMPT_TIMEOUT_S = 0.2

__all__ = ["EtcdBackend", "EtcdClaim"]


class EtcdBackend(LeaseBackend):
    """etcd leases for node identities (see :mod:`app.lease.etcd` for the key layout and the safety argument).

    ``settings``: the ``etcd_*`` settings (endpoints, namespace, TTL, safety margin, timeouts, TLS, auth);
    ``metrics``: optional :class:`~app.metrics.Metrics`; ``clock``: monotonic seconds (deadlines use it).
    Raises :class:`~app.errors.ConfigError` for unusable settings (no endpoints, unreadable TLS files).
    """

    name = "etcd"

    def __init__(
        self, settings: Settings, metrics: Metrics | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not settings.etcd_endpoints:
            raise ConfigError("etcd backend needs etcd_endpoints (IDMINT_ETCD_ENDPOINTS), got none")
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        """Monotonic seconds: every deadline of the lease and its claims is on this clock."""
        self._namespace = settings.etcd_namespace
        self._ttl = int(settings.etcd_lease_ttl)
        self._margin = float(settings.etcd_safety_margin)
        self.mark_interval = self._ttl / 3
        # Marks reach at most max_clock_wait ahead (at least one interval), so a node that re-claims the
        # identity it just dropped waits for its own mark instead of refusing it.
        self.mark_horizon = max(self.mark_interval, min(2 * self.mark_interval, settings.max_clock_wait))
        self._refresh_interval = self._ttl / 3
        self._retry_after = max(1, math.ceil(self._refresh_interval))
        # One endpoint gets this long before the next is asked: a stalled member must not outlast the margin.
        self._attempt_timeout = max(
            MIN_ATTEMPT_TIMEOUT_S, min(settings.etcd_request_timeout, self._refresh_interval / 2)
        )
        tls_wanted = any(url.startswith("https://") for url in settings.etcd_endpoints)
        if not tls_wanted and any(
            f is not None for f in (settings.etcd_ca_cert, settings.etcd_cert_cert, settings.etcd_cert_key)
        ):
            raise ConfigError("etcd_ca_cert / etcd_cert_cert / etcd_cert_key need https:// etcd_endpoints")
        tls = (
            ssl_context(settings.etcd_ca_cert, settings.etcd_cert_cert, settings.etcd_cert_key) if tls_wanted else None
        )
        self._budget = max(settings.etcd_request_timeout, self._attempt_timeout * len(settings.etcd_endpoints))
        self._client = EtcdClient(
            settings.etcd_endpoints,
            timeout=self._attempt_timeout,
            budget=self._budget,
            connect_timeout=settings.etcd_connect_timeout,
            tls=tls,
            user=settings.etcd_user,
            password=settings.etcd_password,
        )
        self._calls = Calls(self._client, self._budget, self._attempt_timeout, self._retry_after)
        self._session: Session | None = None
        self._claims: set[EtcdClaim] = set()
        self._registrations: dict[str, tuple[bytes, int | None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._attempted = asyncio.Event()
        self._ready = asyncio.Event()
        self._healthy: bool | None = None
        self._failures = 0
        self._failing_since: float | None = None
        self._deadline_logged = False
        self._inflight: set[bytes] = set()
        """Claim keys whose claiming transaction is under way (not to be mistaken for leftovers)."""
        self._orphans: dict[bytes, tuple[int, int]] = {}
        """Claim keys released while etcd could not be told: key -> (create revision, lease ID); deleted by the
        background task once etcd answers (they sit on our live lease: otherwise held for as long as we run)."""
        self._reason = "etcd backend not started"
        self._closed = False
        self._fleet_id: str | None = None
        self._held_before: dict[bytes, list[int]] = {}
        """Pool key prefix -> identities this process claimed there, oldest first (re-claims prefer the newest)."""

    # -- lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the background task; wait (bounded) for its first attempt. Never raises for an unreachable etcd."""
        if self._task is not None:
            return
        self._reason = "connecting to etcd"
        self._task = asyncio.create_task(self._run(), name="idmint-etcd-backend")
        first_try = self.settings.etcd_connect_timeout + 2 * self.settings.etcd_request_timeout
        await wait_event(self._attempted, first_try)

    async def close(self) -> None:
        """Stop background work, give every claim back and revoke the lease (timeout <= TTL). Never raises."""
        if self._closed:
            return
        self._closed = True
        self._reason = "etcd backend closed"
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        claims, self._claims = list(self._claims), set()
        for claim in claims:
            await claim.release(None)
        session, self._session = self._session, None
        if session is not None:
            await session.close(min(float(self._ttl), self.settings.etcd_request_timeout))
        await self._client.close()

    # -- the background task: a lease, watches, registrations, deferred deletes -------------------------------
    async def _run(self) -> None:
        backoff = BACKOFF_START_S
        while not self._closed:
            self._wake.clear()
            delay = self._refresh_interval
            try:
                session = self._session
                if session is None or session.lost:
                    session = await self._grant()
                await self._rearm_watches(session)
                await self._publish_registrations(session)
                await self._delete_orphans(session)
                backoff = BACKOFF_START_S
            except NotReadyError as exc:
                self._failed(exc)
                delay = backoff * random.uniform(0.5, 1.0)
                backoff = min(backoff * 2, self._refresh_interval, BACKOFF_MAX_S)
            except Exception as exc:  # noqa: BLE001 -- the background task must outlive any one failure
                log.exception("etcd: background step failed unexpectedly")
                self._failed(BackendUnavailableError(f"etcd backend error: {exc!r}"))
                delay = backoff
            self._attempted.set()
            await wait_event(self._wake, delay)

    async def _grant(self) -> Session:
        async with self._calls.bounded("granting a lease"):
            session = await Session.grant(
                self._client, self._ttl, self._margin, self.clock, self._attempt_timeout, self._outcome
            )
        session.on_done(lambda reason: self._lease_lost(session, reason))
        old, self._session = self._session, session
        if old is not None:
            await old.stop()  # the lost lease's keepalive task ends here, not whenever it next wakes
        log.info(
            "etcd: lease %s granted by %s (TTL %g s, refresh every %.1f s, fail closed %.1f s after a refresh)",
            session.hex,
            redact(self._client.endpoint),
            session.ttl,
            session.interval,
            session.ttl - self._margin,
        )
        self._outcome(session, "ok", None)
        return session

    def _outcome(self, session: Session, outcome: str, error: NotReadyError | None) -> None:
        """Called by the session after each refresh: health, reason, metrics, logs."""
        if session is not self._session and self._session is not None:
            return
        self._renewal(outcome)
        if outcome == "lost":
            session.set_lost(error.reason if error else "lease lost")
        elif error is not None:
            self._failed(error)
        else:
            if self._healthy is False:
                log.info(
                    "etcd: recovered: lease %s refreshed after %d failed attempt(s) over %.1f s",
                    session.hex,
                    self._failures,
                    self.clock() - (self._failing_since or self.clock()),
                )
            elif outcome == "late":
                log.warning("etcd: lease %s refresh was late", session.hex)
            self._failures = 0
            self._failing_since = None
            self._healthy = True
            self._deadline_logged = False
            self._reason = ""
            if self.metrics is not None:
                self.metrics.lease_deadline(session.deadline - self.clock())
            self._ready.set()
            if any(c.needs_rearm(self._client.endpoint) for c in self._claims):
                self._wake.set()  # the client moved to another member: watches follow it

    def _lease_lost(self, session: Session, reason: str) -> None:
        """Called once by ``session`` when its lease is lost: log, stop answering as ready, grant a new lease."""
        if self._closed:
            return
        held = [c for c in self._claims if c.session is session]
        log.error(
            "etcd: lease %s lost: %s; %d claim(s) on it are void, granting a new lease", session.hex, reason, len(held)
        )
        if session is self._session:
            self._ready.clear()
        self._wake.set()

    def _failed(self, exc: NotReadyError) -> None:
        now = self.clock()
        self._failures += 1
        self._reason = exc.reason
        session = self._session
        if isinstance(exc, LeaseLostError) and session is not None:
            session.set_lost(exc.reason)
        if self._healthy is not False:
            self._failing_since = now
            if session is None or session.lost:
                log.warning("etcd: no lease: %s; retrying with backoff", exc.reason)
            else:
                log.warning(
                    "etcd: %s; lease %s fails closed in %.1f s unless a refresh succeeds",
                    exc.reason,
                    session.hex,
                    max(0.0, session.deadline - now),
                )
            self._healthy = False
        if session is not None and not session.lost and now >= session.deadline and not self._deadline_logged:
            self._deadline_logged = True
            log.error(
                "etcd: lease %s deadline passed without a confirmed refresh: claims fail closed until etcd answers",
                session.hex,
            )

    # -- claims ----------------------------------------------------------------------------------------------
    async def _usable(self) -> Session:
        """A lease valid now; waits briefly for a lease being granted. Raises NotReadyError."""
        if self._closed:
            raise BackendUnavailableError("etcd backend is closed")
        if self._task is None:
            raise BackendUnavailableError("etcd backend not started")
        for attempt in range(2):
            session = self._session
            if session is not None and not session.lost and self.clock() < session.deadline:
                return session
            if attempt or self._healthy is False:
                break
            self._wake.set()
            if not await wait_event(self._ready, self.settings.etcd_request_timeout):
                break
        session = self._session
        if self._reason:
            reason = self._reason
        elif session is not None and not session.lost:
            reason = f"etcd lease {session.hex} not refreshed in time (deadline passed)"
        else:
            reason = "no etcd lease yet"
        raise BackendUnavailableError(reason, retry_after=self._retry_after)

    async def claim(self, pool: IdentityPool, owner: Owner, exclude: frozenset[int] = frozenset()) -> Claim:
        """Claim one free identity of ``pool`` on this process's lease (one transaction per attempt).

        Raises NotReadyError when the pool's group is not listed in its ``allowed_groups_key``,
        PoolExhaustedError when every candidate is held, BackendUnavailableError when etcd cannot be used.
        A lease found gone while claiming is replaced (once) and the claim retried on the new one.
        """
        for attempt in range(2):
            session = await self._usable()
            try:
                return await self._claim_on(session, pool, exclude, owner)
            except LeaseLostError as exc:
                session.set_lost(exc.reason)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def _claim_on(self, session: Session, pool: IdentityPool, exclude: frozenset[int], owner: Owner) -> EtcdClaim:
        ns, client = self._namespace, self._client
        prefix = keys.pool_prefix(ns, pool).encode()
        reads = [get(prefix, prefix_end(prefix))]
        if pool.allowed_groups_key:
            reads.append(get((ns + pool.allowed_groups_key).encode()))
        async with self._calls.bounded(f"reading the {pool.scheme} pool"):
            found = await client.txn([], reads, [])
        held: dict[int, bytes] = {}
        ours = {c.key.encode() for c in self._claims}
        for kv in found.ranges[0] or []:
            identity = keys.decode_identity(pool, kv.key[len(prefix) :].decode(errors="replace"))
            if identity is None:
                continue
            held[identity] = kv.value
            if (
                kv.lease == session.lease_id
                and kv.key not in ours
                and kv.key not in self._inflight
                and kv.key not in self._orphans
            ):
                # Ours, from a claim whose answer was lost (timeout): give it back rather than hold it unused.
                log.info("etcd: releasing %s, left on our lease by an unfinished claim", kv.key.decode())
                if await self._delete_quietly(kv.key, kv.create_revision, session.lease_id):
                    del held[identity]
        if pool.allowed_groups_key:
            allowed = found.ranges[1] or []
            keys.check_allowed_groups(ns, pool, allowed[0].value if allowed else None, self._ttl)

        claimed_at = keys.now_rfc3339()
        tries = 0
        before = self._held_before.setdefault(prefix, [])
        for identity in draw(pool, held, prefer=reversed(before), exclude=exclude):
            tries += 1
            key = keys.claim_key(ns, pool, identity).encode()
            mkey = keys.mark_key(ns, pool, identity).encode()
            value = keys.claim_value(owner, pool, identity, session.hex, claimed_at)
            self._inflight.add(key)
            try:
                async with self._calls.bounded(f"claiming {key.decode()}"):
                    result = await client.txn(
                        [compare(key, "CREATE", 0)],
                        [put(key, value, session.lease_id), get(key), get(mkey)],
                        [get(key)],
                    )
            finally:
                self._inflight.discard(key)
            if not result.succeeded:
                now_held = result.ranges[0] or []
                held[identity] = now_held[0].value if now_held else b""
                if (
                    now_held
                    and now_held[0].lease == session.lease_id
                    and key not in ours
                    and key not in self._inflight
                    and key not in {c.key.encode() for c in self._claims}
                ):
                    # Our own put, committed by an attempt whose answer was lost: give it back, try the next.
                    await self._delete_quietly(key, now_held[0].create_revision, session.lease_id)
                continue
            kv = (result.ranges[1] or [])[0]
            marks = result.ranges[2] or []
            try:
                mark = keys.read_mark(marks[0].value if marks else None, mkey.decode())
            except NotReadyError:
                await self._delete_quietly(key, kv.create_revision, session.lease_id)
                raise
            claim = EtcdClaim(
                self._calls,
                pool,
                identity,
                key.decode(),
                mkey.decode(),
                mark,
                session,
                kv.create_revision,
                kv.mod_revision,
                marks[0].mod_revision if marks else 0,
                owner,
                claimed_at,
            )
            self._claims.add(claim)
            if identity in before:
                before.remove(identity)
            before.append(identity)  # tried first next time: a lost lease re-claims the same identity if free
            claim.on_lost(self._claim_lost)
            await claim.watch_from(kv.mod_revision + 1, self.settings.etcd_request_timeout)
            log.info(
                "etcd: claimed %s %s %d (key %s, lease %s, high-water mark %d)",
                pool.scheme,
                pool.kind,
                identity,
                claim.key,
                session.hex,
                mark,
            )
            return claim
        raise PoolExhaustedError(keys.exhausted_reason(pool, exclude, held, tries), retry_after=self._ttl)

    # -- watches ---------------------------------------------------------------------------------------------
    async def _rearm_watches(self, session: Session) -> None:
        """Verify and watch again every claim whose watch broke or sits on another member than the client's."""
        for claim in list(self._claims):
            if claim.session is session and claim.needs_rearm(self._client.endpoint):
                await claim.rearm(self.settings.etcd_request_timeout)

    # -- release / register ----------------------------------------------------------------------------------
    async def release(self, claim: Claim, final_mark: int | None) -> None:
        """Record ``final_mark`` exactly (never below the inherited mark) and delete the claim key.

        Never raises: a lost claim is only forgotten; an unreachable etcd is logged (the lease expires anyway).
        """
        if not isinstance(claim, EtcdClaim) or claim.released:
            return
        self._claims.discard(claim)
        if not await claim.release(final_mark):
            return
        if await self._delete_quietly(claim.key.encode(), claim.create_revision, claim.lease_id):
            log.info("etcd: released %s %s %d", claim.scheme, claim.pool.kind, claim.identity)

    def _claim_lost(self, claim: Claim, reason: str) -> None:
        self._wake.set()

    async def _delete_quietly(self, key: bytes, create_revision: int, lease_id: int) -> bool:
        """Delete our incarnation of ``key`` (same create revision). Never raises; False when it has to wait
        for etcd (kept in ``_orphans``)."""
        try:
            async with self._calls.bounded(f"deleting {key.decode()}"):
                await self._client.txn([compare(key, "CREATE", create_revision)], [delete(key)], [])
            self._orphans.pop(key, None)
        except LeaseLostError:
            self._orphans.pop(key, None)  # gone with the lease
        except NotReadyError as exc:
            self._orphans[key] = (create_revision, lease_id)
            log.warning("etcd: deleting %s failed; retrying once etcd answers: %s", key.decode(), exc.reason)
            return False
        return True

    async def _delete_orphans(self, session: Session) -> None:
        for key, (create_revision, lease_id) in list(self._orphans.items()):
            if lease_id != session.lease_id:
                del self._orphans[key]  # its lease is gone, and the key with it
                continue
            async with self._calls.bounded(f"deleting {key.decode()}"):
                await self._client.txn([compare(key, "CREATE", create_revision)], [delete(key)], [])
            del self._orphans[key]
            log.info("etcd: released %s (deferred while etcd was unreachable)", key.decode())

    async def register(self, scheme: str, name: str, value: dict[str, Any]) -> None:
        """Put ``idmint/<scheme>/<name>`` = JSON ``value`` on the lease; re-published on every new lease.

        Raises BackendUnavailableError when it cannot be published now (it is published once etcd answers).
        """
        key = keys.register_key(self._namespace, scheme, name)
        self._registrations[key] = (keys.to_json(value), None)
        session = await self._usable()
        await self._publish_registrations(session)

    async def _publish_registrations(self, session: Session) -> None:
        for key, (data, lease_id) in list(self._registrations.items()):
            if lease_id == session.lease_id:
                continue
            payload = {**json.loads(data), "lease": session.hex}
            async with self._calls.bounded(f"registering {key}"):
                await self._client.put(key.encode(), keys.to_json(payload), session.lease_id)
            self._registrations[key] = (data, session.lease_id)
            log.info("etcd: registered %s on lease %s", key, session.hex)

    # -- the fleet ---------------------------------------------------------------------------------------------
    async def fleet_id(self) -> str:
        """The fleet ID at ``<namespace>idmint/fleet`` (on no lease: it outlives every node), written by the first
        node to ask in one create-if-absent transaction. Raises NotReadyError when etcd cannot be used now, or when
        the key holds no fleet ID."""
        if self._fleet_id is not None:
            return self._fleet_id
        key = keys.fleet_key(self._namespace).encode()
        value = keys.to_json({"fleet_id": str(uuid.uuid4()), "created_at": keys.now_rfc3339()})
        async with self._calls.bounded("reading the fleet ID"):
            result = await self._client.txn([compare(key, "CREATE", 0)], [put(key, value), get(key)], [get(key)])
        found = result.ranges[1] if result.succeeded else result.ranges[0]
        self._fleet_id = keys.read_fleet_id(found[0].value if found else b"", key.decode())
        return self._fleet_id

    def member_token(self) -> str | None:
        """This process's lease ID (hex): a node on the same etcd sees it live, one on a restored copy does not."""
        session = self._session
        return session.hex if session is not None and not session.lost else None

    async def has_member(self, token: str) -> bool | None:
        """Whether lease ``token`` (16 hex digits) is live in this etcd (LeaseTimeToLive); None when etcd cannot
        answer now."""
        try:
            lease_id = int(token, 16) if len(token) == 16 else -1
        except ValueError:
            return False
        if lease_id <= 0:
            return False
        try:
            async with self._calls.bounded("looking up a peer's lease"):
                return await self._client.time_to_live(lease_id) > 0
        except NotReadyError:
            return None

    async def count_held(self, pool: IdentityPool) -> int | None:
        """Claim keys of the region's slice, read in one range request (keys only)."""
        prefix = keys.pool_prefix(self._namespace, pool).encode()
        first, last = pool.slice
        try:
            async with self._calls.bounded(f"counting the {pool.scheme} claims"):
                found, _ = await self._client.range(prefix, prefix_end(prefix), keys_only=True)
        except NotReadyError:
            return None
        held = (keys.decode_identity(pool, kv.key[len(prefix) :].decode(errors="replace")) for kv in found)
        return sum(1 for identity in held if identity is not None and first <= identity <= last)

    # -- helpers ---------------------------------------------------------------------------------------------
    def _renewal(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.lease_renewal(outcome)

    def status(self) -> dict[str, Any]:
        session = self._session
        out: dict[str, Any] = {
            "backend": self.name,
            "endpoints": [redact(url) for url in self.settings.etcd_endpoints],
            "endpoint": redact(self._client.endpoint),
            "namespace": self._namespace,
            "lease_ttl_s": self._ttl,
            "connected": bool(self._healthy),
            "healthy": bool(self._healthy),
        }
        if session is not None:
            out["lease"] = session.hex
            out["lease_lost"] = session.lost
            out["deadline_in_s"] = round(session.deadline - self.clock(), 3)
        if self._reason:
            out["reason"] = self._reason
        out["claims"] = sorted(c.key for c in self._claims)
        return out
