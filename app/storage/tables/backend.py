"""The lease backend on SQL tables: the lease's upkeep and health, claims, release (see :mod:`app.storage.postgres`
for the tables and the safety argument)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from app.errors import NotReadyError
from app.metrics import Metrics
from app.schemes.pool import IdentityPool
from app.settings import Settings
from app.storage.expiring import ExpiringBackend
from app.storage.lease import Claim, Facts, Owner
from app.storage.tables.claim import TableClaim
from app.storage.tables.claimer import Claimer, Leftovers
from app.storage.tables.db import Database
from app.storage.tables.records import FleetRows, Registrations
from app.storage.tables.revoke import revoke_claim
from app.storage.tables.session import Held, Session

FORGET_LEASES_AFTER_S = 86_400
"""Lease rows expired this long ago are deleted when a lease is granted (a claim row on a missing lease is free)."""

__all__ = ["TableBackend", "TableClaim"]

History = Callable[[], Awaitable[Facts]]
"""Reads what the store is now (:meth:`TableBackend.history_facts`): the dialect's own statements."""


class TableBackend(ExpiringBackend):
    """Leases for node identities in a SQL database (see :mod:`app.storage.postgres` for the tables and the safety
    argument). ``db``: the lease's own :class:`~app.storage.tables.db.Database` (no sequence traffic on it);
    ``history``: reads the store's history facts; ``pool_size``: the stores' pool size (reported);
    ``connect_timeout``: seconds to open a connection; ``settings``: the TTL and safety margin; ``metrics``:
    optional; ``clock``: monotonic seconds (deadlines use it)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        history: History,
        pool_size: int,
        connect_timeout: float,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        owner: dict[str, Any] | None = None,
    ) -> None:
        self.name = self.store = db.store
        self.title = db.title
        self.log = db.log
        super().__init__(settings, metrics, clock)
        self.db = db
        self._pool_size = pool_size
        self._connect_timeout = connect_timeout
        self._owner = owner or {}
        self._session: Session | None = None
        self._leftovers = Leftovers(db)
        self._claimer = Claimer(db, self._ttl, self._claim_lost)
        self._registrations = Registrations(db)
        self._fleet = FleetRows(db)
        self._history = history

    # -- lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the background task; wait (bounded) for its first attempt. Never raises for an unreachable or
        refusing database (its reason is reported instead)."""
        await self._begin(self._connect_timeout + 2 * self.db.limit)

    async def close(self) -> None:
        """Stop background work, give every claim back and end the lease (timeout <= TTL). Never raises."""
        if self._closed:
            return
        await self._end_task()
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
    @property
    def claims(self) -> set[TableClaim]:
        return self._claimer.claims

    @property
    def _wait_s(self) -> float:
        return self.db.limit

    def _where(self) -> str:
        return self.db.where

    async def _new_session(self) -> Session:
        await self.db.ready()
        return await Session.grant(
            self.db, self._ttl, self._margin, self._owner, self.clock, self._outcome, self._snapshot
        )

    async def _granted(self) -> None:
        try:
            await self.db.run("forgetting old leases", self.db.sql.forget_leases, {"keep": FORGET_LEASES_AFTER_S})
        except NotReadyError as exc:
            self.log.info("%s: old leases not forgotten now: %s", self.store, exc.reason)

    async def _step(self, session: Session) -> None:
        await self._registrations.publish(session)
        await self._leftovers.retry(session)

    async def _snapshot(self, session: Session, sent_at: float, held: Held) -> None:
        """A renewal's claim rows: every claim on ``session`` confirmed before it was sent and not among them (or
        being revoked) is lost, pushed through its loss callbacks, once its own row confirms it."""
        suspects = [(c, c.suspect(sent_at, held)) for c in list(self._claimer.claims) if c.session is session]
        for claim, reason in suspects:
            if reason is not None:
                await claim.confirm_loss(reason)

    # -- claims ----------------------------------------------------------------------------------------------
    async def claim(self, pool: IdentityPool, owner: Owner, exclude: frozenset[int] = frozenset()) -> TableClaim:
        """Claim one free identity of ``pool`` on this process's lease (one conditional UPDATE per attempt).

        Raises NotReadyError (rows waiting under the lost-row rule), PoolExhaustedError when every candidate is
        held, BackendUnavailableError when the database cannot be used."""
        session = await self._usable()
        return await self._claimer.claim(session, pool, exclude, owner)

    async def release(self, claim: Claim, final_mark: int | None) -> None:
        """Record ``final_mark`` exactly (never below the inherited mark) and free the row. Never raises: a lost
        claim is only forgotten; a row the database cannot be told of now is freed once it answers."""
        if not isinstance(claim, TableClaim) or claim.released:
            return
        self._claimer.claims.discard(claim)
        try:
            if await claim.release(final_mark):
                self.log.info("%s: released %s %s %d", self.store, claim.scheme, claim.pool.kind, claim.identity)
        except NotReadyError as exc:
            self.log.warning(
                "%s: releasing %s failed; retrying once %s answers: %s", self.store, claim.key, self.title, exc.reason
            )
            self._leftovers.add(claim)

    def _claim_lost(self, claim: Claim, reason: str) -> None:
        self._wake.set()

    async def register(self, scheme: str, name: str, value: dict[str, Any]) -> None:
        """Write row ``idmint/<scheme>/<name>`` = ``value`` with the lease; written again with every new lease.
        Raises BackendUnavailableError when it cannot be written now (it is, once the database answers)."""
        self._registrations.add(scheme, name, value)
        session = await self._usable()
        await self._registrations.publish(session)

    async def revoke(self, pool: IdentityPool, identity: int, by: dict[str, Any]) -> dict[str, Any]:
        """Revoke another node's claim (:func:`~app.storage.tables.revoke.revoke_claim`)."""
        return await revoke_claim(self.db, self._ttl, pool, identity, by)

    # -- the fleet ---------------------------------------------------------------------------------------------
    async def history_facts(self) -> Facts:
        return await self._history()

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "backend": self.name,
            "database": self.db.where,
            "schema": self.db.schema,
            "pool_size": self._pool_size,
            "lease_connections": self.db.size,
            "lease_ttl_s": self._ttl,
            "connected": bool(self._healthy),
            "healthy": bool(self._healthy),
        }
        out.update(self._lease_status())
        return out
