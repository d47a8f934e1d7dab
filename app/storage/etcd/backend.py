"""The etcd lease backend: the lease's upkeep and health, claims, release (see :mod:`app.storage.etcd`)."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable
from typing import Any

from app.errors import BackendUnavailableError, ConfigError, LeaseLostError, NotReadyError
from app.metrics import Metrics
from app.schemes.pool import IdentityPool
from app.settings import Settings
from app.storage.etcd.calls import RETRY_BUDGET_S, Calls, open_client
from app.storage.etcd.claim import EtcdClaim
from app.storage.etcd.claimer import Claimer, Leftovers
from app.storage.etcd.client import LEASE_LANE, EtcdClient, redact
from app.storage.etcd.history import read_facts
from app.storage.etcd.records import FleetReads, Registrations
from app.storage.etcd.revoke import revoke_claim
from app.storage.etcd.session import Session
from app.storage.etcd.watch import wait_event
from app.storage.lease import Claim, Facts, LeaseBackend, Owner

log = logging.getLogger("idmint.lease.etcd")

BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 5.0
MIN_ATTEMPT_TIMEOUT_S = 0.2

__all__ = ["EtcdBackend", "EtcdClaim"]


class EtcdBackend(LeaseBackend):
    """etcd leases for node identities (see :mod:`app.storage.etcd` for the key layout and the safety argument).

    ``settings``: the ``etcd_*`` settings (endpoints, namespace, TTL, safety margin, timeouts, TLS, auth);
    ``metrics``: optional :class:`~app.metrics.Metrics`; ``clock``: monotonic seconds (deadlines use it).
    Raises :class:`~app.errors.ConfigError` for unusable settings (no endpoints, unreadable TLS files).
    """

    name = "etcd"

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        client: EtcdClient | None = None,
    ) -> None:
        if not settings.etcd_endpoints:
            raise ConfigError("etcd backend needs etcd_endpoints (IDMINT_ETCD_ENDPOINTS), got none")
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        """Monotonic seconds: every deadline of the lease and its claims is on this clock."""
        self._namespace = settings.etcd_namespace
        self._ttl = int(settings.lease_ttl)
        self._margin = float(settings.lease_safety_margin)
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
        self._owns_client = client is None
        shared = client or open_client(settings)
        # The lease's calls on connections of their own: no store call waiting for a connection delays a keepalive.
        self._calls = Calls.on(shared, settings, self._attempt_timeout, self._retry_after, lane=LEASE_LANE)
        self._client = self._calls.client
        self._revoking = shared.limited(timeout=settings.etcd_request_timeout, budget=RETRY_BUDGET_S, lane=LEASE_LANE)
        self._session: Session | None = None
        self._leftovers = Leftovers(self._calls)
        self._claimer = Claimer(
            self._calls, self._namespace, self._ttl, self._leftovers, self._claim_lost, settings.etcd_request_timeout
        )
        self._registrations = Registrations(self._calls, self._namespace)
        self._fleet = FleetReads(self._calls, self._namespace)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._attempted = asyncio.Event()
        self._ready = asyncio.Event()
        self._healthy: bool | None = None
        self._failures = 0
        self._failing_since: float | None = None
        self._deadline_logged = False
        self._reason = "etcd backend not started"
        self._closed = False

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
        claims, self._claimer.claims = list(self._claimer.claims), set()
        for claim in claims:
            await claim.release(None)
        session, self._session = self._session, None
        if session is not None:
            await session.close(min(float(self._ttl), self.settings.etcd_request_timeout))
        if self._owns_client:
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
                await self._registrations.publish(session)
                await self._leftovers.retry(session)
                backoff = BACKOFF_START_S
            except NotReadyError as exc:
                self._failed(exc)
                delay = backoff * random.uniform(0.5, 1.0)
                backoff = min(backoff * 2, self._refresh_interval, BACKOFF_MAX_S)
            except Exception as exc:  # the background task must outlive any one failure
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
            if any(c.needs_rearm(self._client.endpoint) for c in self._claimer.claims):
                self._wake.set()  # the client moved to another member: watches follow it

    def _lease_lost(self, session: Session, reason: str) -> None:
        """Called once by ``session`` when its lease is lost: log, stop answering as ready, grant a new lease."""
        if self._closed:
            return
        held = [c for c in self._claimer.claims if c.session is session]
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

    async def claim(self, pool: IdentityPool, owner: Owner, exclude: frozenset[int] = frozenset()) -> EtcdClaim:
        """Claim one free identity of ``pool`` on this process's lease (one transaction per attempt).

        Raises NotReadyError when the pool's group is not listed in its ``allowed_groups_key``,
        PoolExhaustedError when every candidate is held, BackendUnavailableError when etcd cannot be used.
        A lease found gone while claiming is replaced (once) and the claim retried on the new one.
        """
        for attempt in range(2):
            session = await self._usable()
            try:
                return await self._claimer.claim(session, pool, exclude, owner)
            except LeaseLostError as exc:
                session.set_lost(exc.reason)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    # -- watches ---------------------------------------------------------------------------------------------
    async def _rearm_watches(self, session: Session) -> None:
        """Verify and watch again every claim whose watch broke or sits on another member than the client's."""
        for claim in list(self._claimer.claims):
            if claim.session is session and claim.needs_rearm(self._client.endpoint):
                await claim.rearm(self.settings.etcd_request_timeout)

    # -- release / register ----------------------------------------------------------------------------------
    async def release(self, claim: Claim, final_mark: int | None) -> None:
        """Record ``final_mark`` exactly (never below the inherited mark) and delete the claim key.

        Never raises: a lost claim is only forgotten; an unreachable etcd is logged (the lease expires anyway).
        """
        if not isinstance(claim, EtcdClaim) or claim.released:
            return
        self._claimer.claims.discard(claim)
        if not await claim.release(final_mark):
            return
        if await self._leftovers.delete(claim.key.encode(), claim.create_revision, claim.lease_id):
            log.info("etcd: released %s %s %d", claim.scheme, claim.pool.kind, claim.identity)

    def _claim_lost(self, claim: Claim, reason: str) -> None:
        self._wake.set()

    async def register(self, scheme: str, name: str, value: dict[str, Any]) -> None:
        """Put ``idmint/<scheme>/<name>`` = JSON ``value`` on the lease; re-published on every new lease.

        Raises BackendUnavailableError when it cannot be published now (it is published once etcd answers).
        """
        self._registrations.add(scheme, name, value)
        session = await self._usable()
        await self._registrations.publish(session)

    async def revoke(self, pool: IdentityPool, identity: int, by: dict[str, Any]) -> dict[str, Any]:
        """Revoke another node's claim of ``identity`` of ``pool`` (:func:`~app.storage.etcd.revoke.revoke_claim`:
        the owner stops first, then the identity is freed)."""
        return await revoke_claim(self._revoking, self._namespace, self._ttl, pool, identity, by)

    # -- the fleet ---------------------------------------------------------------------------------------------
    async def fleet_id(self) -> str:
        """The fleet ID (:meth:`FleetReads.read_fleet_id <app.storage.etcd.records.FleetReads.read_fleet_id>`)."""
        return await self._fleet.read_fleet_id()

    async def history_facts(self) -> Facts:
        return await read_facts(self._calls, self._namespace)

    async def read_record(self, name: str) -> dict[str, Any] | None:
        return await self._fleet.read_record(name)

    async def swap_record(self, name: str, expected: dict[str, Any] | None, value: dict[str, Any]) -> bool:
        return await self._fleet.swap_record(name, expected, value)

    def member_token(self) -> str | None:
        """This process's lease ID (hex): a node on the same etcd sees it live, one on a restored copy does not."""
        session = self._session
        return session.hex if session is not None and not session.lost else None

    async def has_member(self, token: str) -> bool | None:
        return await self._fleet.has_member(token)

    async def count_held(self, pool: IdentityPool) -> int | None:
        return await self._fleet.count_held(pool)

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
        out["claims"] = sorted(c.key for c in self._claimer.claims)
        return out
