"""The PostgreSQL lease backend: the lease's upkeep and health, claims, release (see :mod:`app.storage.postgres`)."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable
from typing import Any

from app.errors import BackendUnavailableError, LeaseLostError, NotReadyError
from app.metrics import Metrics
from app.schemes.pool import IdentityPool
from app.settings import Settings
from app.storage.lease import Claim, Facts, LeaseBackend, Owner
from app.storage.postgres.claim import PostgresClaim
from app.storage.postgres.claimer import Claimer, Leftovers
from app.storage.postgres.client import Database
from app.storage.postgres.history import HistoryFacts
from app.storage.postgres.records import FleetRows, Registrations
from app.storage.postgres.revoke import revoke_claim
from app.storage.postgres.session import Held, Session

log = logging.getLogger("idmint.storage.postgres")

BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 5.0
FORGET_LEASES_AFTER_S = 86_400
"""Lease rows expired this long ago are deleted when a lease is granted (a claim row on a missing lease is free)."""

__all__ = ["PostgresBackend", "PostgresClaim"]


async def _wait(event: asyncio.Event, timeout: float) -> bool:
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


class PostgresBackend(LeaseBackend):
    """PostgreSQL leases for node identities (see :mod:`app.storage.postgres` for the tables and the safety
    argument). ``db``: the lease's own :class:`~app.storage.postgres.client.Database` (no sequence traffic on it);
    ``settings``: the TTL and safety margin; ``metrics``: optional; ``clock``: monotonic seconds (deadlines use it)."""

    name = "postgres"

    def __init__(
        self,
        settings: Settings,
        db: Database,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        owner: dict[str, Any] | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.metrics = metrics
        self.clock = clock
        self._ttl = int(settings.lease_ttl)
        self._margin = float(settings.lease_safety_margin)
        self.mark_interval = self._ttl / 3
        self.mark_horizon = max(self.mark_interval, min(2 * self.mark_interval, settings.max_clock_wait))
        self._refresh_interval = self._ttl / 3
        self._retry_after = max(1, math.ceil(self._refresh_interval))
        self._owner = owner or {}
        self._session: Session | None = None
        self._leftovers = Leftovers()
        self._claimer = Claimer(db, self._ttl, self._claim_lost)
        self._registrations = Registrations(db)
        self._fleet = FleetRows(db)
        self._history = HistoryFacts(db)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._attempted = asyncio.Event()
        self._ready = asyncio.Event()
        self._healthy: bool | None = None
        self._failures = 0
        self._failing_since: float | None = None
        self._deadline_logged = False
        self._reason = "postgres backend not started"
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the background task; wait (bounded) for its first attempt. Never raises for an unreachable or
        refusing database (its reason is reported instead)."""
        if self._task is not None:
            return
        self._reason = "connecting to PostgreSQL"
        self._task = asyncio.create_task(self._run(), name="idmint-pg-backend")
        await _wait(self._attempted, self.settings.postgres_connect_timeout + 2 * self.db.limit)

    async def close(self) -> None:
        """Stop background work, give every claim back and end the lease (timeout <= TTL). Never raises."""
        if self._closed:
            return
        self._closed = True
        self._reason = "postgres backend closed"
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        claims, self._claimer.claims = list(self._claimer.claims), set()
        for claim in claims:
            try:
                await claim.release(None)
            except NotReadyError:
                pass  # the lease row is ended below, or expires
        session, self._session = self._session, None
        if session is not None:
            await session.close(min(float(self._ttl), self.db.limit))

    # -- the background task: a lease, registrations, deferred releases ---------------------------------------
    async def _run(self) -> None:
        backoff = BACKOFF_START_S
        while not self._closed:
            self._wake.clear()
            delay = self._refresh_interval
            try:
                session = self._session
                if session is None or session.lost:
                    session = await self._grant()
                await self._registrations.publish(session)
                await self._leftovers.retry(session)
                backoff = BACKOFF_START_S
            except NotReadyError as exc:
                self._failed(exc)
                delay = backoff * random.uniform(0.5, 1.0)
                backoff = min(backoff * 2, self._refresh_interval, BACKOFF_MAX_S)
            except Exception as exc:  # the background task must outlive any one failure
                log.exception("postgres: background step failed unexpectedly")
                self._failed(BackendUnavailableError(f"postgres backend error: {exc!r}"))
                delay = backoff
            self._attempted.set()
            await _wait(self._wake, delay)

    async def _grant(self) -> Session:
        await self.db.ready()
        session = await Session.grant(
            self.db, self._ttl, self._margin, self._owner, self.clock, self._outcome, self._snapshot
        )
        session.on_done(lambda reason: self._lease_lost(session, reason))
        old, self._session = self._session, session
        if old is not None:
            await old.stop()
        log.info(
            "postgres: lease %s granted by %s (TTL %g s, renewed every %.1f s, fail closed %.1f s after a renewal)",
            session.hex,
            self.db.where,
            session.ttl,
            session.interval,
            session.ttl - self._margin,
        )
        try:
            await self.db.run("forgetting old leases", self.db.sql.forget_leases, {"keep": FORGET_LEASES_AFTER_S})
        except NotReadyError as exc:
            log.info("postgres: old leases not forgotten now: %s", exc.reason)
        self._outcome(session, "ok", None)
        return session

    async def _snapshot(self, session: Session, sent_at: float, held: Held) -> None:
        """A renewal's claim rows: every claim on ``session`` confirmed before it was sent and not among them (or
        being revoked) is lost, pushed through its loss callbacks, once its own row confirms it."""
        suspects = [(c, c.suspect(sent_at, held)) for c in list(self._claimer.claims) if c.session is session]
        for claim, reason in suspects:
            if reason is not None:
                await claim.confirm_loss(reason)

    def _outcome(self, session: Session, outcome: str, error: NotReadyError | None) -> None:
        """Called by the session after each renewal: health, reason, metrics, logs."""
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
                    "postgres: recovered: lease %s renewed after %d failed attempt(s) over %.1f s",
                    session.hex,
                    self._failures,
                    self.clock() - (self._failing_since or self.clock()),
                )
            elif outcome == "late":
                log.warning("postgres: lease %s renewal was late", session.hex)
            self._failures = 0
            self._failing_since = None
            self._healthy = True
            self._deadline_logged = False
            self._reason = ""
            if self.metrics is not None:
                self.metrics.lease_deadline(session.deadline - self.clock())
            self._ready.set()

    def _lease_lost(self, session: Session, reason: str) -> None:
        if self._closed:
            return
        held = [c for c in self._claimer.claims if c.session is session]
        log.error(
            "postgres: lease %s lost: %s; %d claim(s) on it are void, granting a new lease",
            session.hex,
            reason,
            len(held),
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
                log.warning("postgres: no lease: %s; retrying with backoff", exc.reason)
            else:
                log.warning(
                    "postgres: %s; lease %s fails closed in %.1f s unless a renewal succeeds",
                    exc.reason,
                    session.hex,
                    max(0.0, session.deadline - now),
                )
            self._healthy = False
        if session is not None and not session.lost and now >= session.deadline and not self._deadline_logged:
            self._deadline_logged = True
            log.error(
                "postgres: lease %s deadline passed without a confirmed renewal: claims fail closed until "
                "PostgreSQL answers",
                session.hex,
            )

    # -- claims ----------------------------------------------------------------------------------------------
    async def _usable(self) -> Session:
        """A lease valid now; waits briefly for a lease being granted. Raises NotReadyError."""
        if self._closed:
            raise BackendUnavailableError("postgres backend is closed")
        if self._task is None:
            raise BackendUnavailableError("postgres backend not started")
        for attempt in range(2):
            session = self._session
            if session is not None and not session.lost and self.clock() < session.deadline:
                return session
            if attempt or self._healthy is False:
                break
            self._wake.set()
            if not await _wait(self._ready, self.db.limit):
                break
        session = self._session
        if self._reason:
            reason = self._reason
        elif session is not None and not session.lost:
            reason = f"PostgreSQL lease {session.hex} not renewed in time (deadline passed)"
        else:
            reason = "no PostgreSQL lease yet"
        raise BackendUnavailableError(reason, retry_after=self._retry_after)

    async def claim(self, pool: IdentityPool, owner: Owner, exclude: frozenset[int] = frozenset()) -> PostgresClaim:
        """Claim one free identity of ``pool`` on this process's lease (one conditional UPDATE per attempt).

        Raises NotReadyError (rows waiting under the lost-row rule), PoolExhaustedError when every candidate is
        held, BackendUnavailableError when PostgreSQL cannot be used."""
        session = await self._usable()
        return await self._claimer.claim(session, pool, exclude, owner)

    async def release(self, claim: Claim, final_mark: int | None) -> None:
        """Record ``final_mark`` exactly (never below the inherited mark) and free the row. Never raises: a lost
        claim is only forgotten; a row PostgreSQL cannot be told of now is freed once it answers."""
        if not isinstance(claim, PostgresClaim) or claim.released:
            return
        self._claimer.claims.discard(claim)
        try:
            if await claim.release(final_mark):
                log.info("postgres: released %s %s %d", claim.scheme, claim.pool.kind, claim.identity)
        except NotReadyError as exc:
            log.warning("postgres: releasing %s failed; retrying once PostgreSQL answers: %s", claim.key, exc.reason)
            self._leftovers.add(claim)

    def _claim_lost(self, claim: Claim, reason: str) -> None:
        self._wake.set()

    async def register(self, scheme: str, name: str, value: dict[str, Any]) -> None:
        """Write row ``idmint/<scheme>/<name>`` = ``value`` with the lease; written again with every new lease.
        Raises BackendUnavailableError when it cannot be written now (it is, once PostgreSQL answers)."""
        self._registrations.add(scheme, name, value)
        session = await self._usable()
        await self._registrations.publish(session)

    async def revoke(self, pool: IdentityPool, identity: int, by: dict[str, Any]) -> dict[str, Any]:
        """Revoke another node's claim (:func:`~app.storage.postgres.revoke.revoke_claim`)."""
        return await revoke_claim(self.db, self._ttl, pool, identity, by)

    # -- the fleet ---------------------------------------------------------------------------------------------
    async def fleet_id(self) -> str:
        return await self._fleet.read_fleet_id()

    async def history_facts(self) -> Facts:
        return await self._history.read()

    async def read_record(self, name: str) -> dict[str, Any] | None:
        return await self._fleet.read_record(name)

    async def swap_record(self, name: str, expected: dict[str, Any] | None, value: dict[str, Any]) -> bool:
        return await self._fleet.swap_record(name, expected, value)

    def member_token(self) -> str | None:
        """This process's lease ID (hex): a node on the same database sees it alive, one on a copy does not."""
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
            "database": self.db.where,
            "schema": self.db.schema,
            "pool_size": self.settings.postgres_pool_size,
            "lease_connections": self.db.size,
            "lease_ttl_s": self._ttl,
            "connected": bool(self._healthy),
            "healthy": bool(self._healthy),
        }
        if session is not None:
            out["lease"] = session.hex
            out["lease_lost"] = session.lost
            out["lease_status"] = session.status
            out["deadline_in_s"] = round(session.deadline - self.clock(), 3)
        if self._reason:
            out["reason"] = self._reason
        out["claims"] = sorted(c.key for c in self._claimer.claims)
        return out
