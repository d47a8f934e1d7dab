"""One PostgreSQL lease kept alive: the etcd session's twin (:mod:`app.storage.etcd.session`), on a ``leases`` row.

The session alone owns the lease's health. The keepalive task renews every TTL/3 with one statement
(:attr:`Statements.renew <app.storage.postgres.sql.Statements.renew>`): ``UPDATE leases SET expires_at =
clock_timestamp() + ttl WHERE lease_id = $1 AND expires_at > clock_timestamp()``, which also returns, from the same
snapshot, every claim row still on the lease (its identity, generation, and whether a revoke is pending). No row
means the lease expired or was deleted: the session is :attr:`~Session.lost` (final, as etcd's NOT_FOUND), its
:meth:`Session.done` is set and every :meth:`Session.on_done` callback called at once. The claim rows go to the
``on_snapshot`` callback, which makes every claim not among them lost.

Fail closed: :attr:`Session.deadline` is the ``clock()`` time (the injected monotonic clock, seconds) at which the
last successful renewal (or the grant) was *sent*, plus the TTL, minus the safety margin; the database computed
the row's expiry at a later instant, so it cannot expire the lease before that. A failed renewal is retried with a
short backoff while the deadline holds. :attr:`Session.status` sums it up: ``"alive"``, ``"unconfirmed"`` (past the
deadline, not known lost) or ``"lost"``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from app.errors import BackendUnavailableError, LeaseLostError, NotReadyError
from app.storage.postgres.client import Database

log = logging.getLogger("idmint.storage.postgres")

RETRY_START_S = 0.05
RETRY_MAX_S = 0.25
"""Failed renewals are retried at least this often: a failover must not eat the safety margin."""
LATE_FACTOR = 1.5
"""A renewal sent later than this many renewal intervals after the previous one counts as late."""
LEASE_ID_BITS = 63
"""Lease IDs are random positive bigints, drawn by the process (PostgreSQL has no lease IDs of its own)."""
GRANT_TRIES = 3

Held = dict[tuple[str, int], tuple[int, bool]]
"""A renewal's snapshot of the claim rows on the lease: (pool key, identity) -> (generation, revoke pending)."""
Outcome = Callable[["Session", str, "NotReadyError | None"], None]
"""Called after every renewal attempt: (session, "ok" | "late" | "failed" | "lost", the error or None)."""
Snapshot = Callable[["Session", float, Held], Awaitable[None]]
"""Awaited after every renewal that found the lease: (session, the renewal's send time, the claim rows on it)."""
DoneCallback = Callable[[str], None]
"""Called once when the lease is lost, with the reason."""


class Session:
    """A granted lease row and the task keeping it alive. Build with :meth:`grant`; end with :meth:`close`."""

    def __init__(
        self,
        db: Database,
        lease_id: int,
        ttl: float,
        sent_at: float,
        margin: float,
        clock: Callable[[], float],
        on_outcome: Outcome | None = None,
        on_snapshot: Snapshot | None = None,
    ) -> None:
        self.db = db
        self.lease_id = lease_id
        self.ttl = ttl
        self.margin = margin
        self.interval = ttl / 3
        self.last_sent = sent_at
        self.deadline = sent_at + ttl - margin
        self.lost_reason: str | None = None
        self.lost_event = asyncio.Event()
        self.clock = clock
        """The monotonic clock (seconds) :attr:`deadline` is on."""
        self._done_callbacks: list[DoneCallback] = []
        self._on_outcome = on_outcome
        self._on_snapshot = on_snapshot
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def grant(
        cls,
        db: Database,
        ttl: int,
        margin: float,
        owner: dict[str, Any],
        clock: Callable[[], float],
        on_outcome: Outcome | None = None,
        on_snapshot: Snapshot | None = None,
    ) -> Session:
        """Insert a lease row of ``ttl`` seconds (a random 63-bit ID) and start keeping it alive. Raises
        NotReadyError."""
        for _ in range(GRANT_TRIES):
            lease_id = secrets.randbits(LEASE_ID_BITS) or 1
            sent_at = clock()
            rows = await db.run(
                "granting a lease",
                db.sql.grant,
                {"lease": lease_id, "owner": json.dumps(owner), "ttl": ttl},
            )
            if rows:
                session = cls(db, lease_id, ttl, sent_at, margin, clock, on_outcome, on_snapshot)
                session._task = asyncio.create_task(session._keep_alive(), name=f"idmint-pg-lease-{session.hex}")
                return session
        raise BackendUnavailableError(f"PostgreSQL: {GRANT_TRIES} random lease IDs were all taken")

    @property
    def lost(self) -> bool:
        """True once the lease row was found gone (expired or deleted), or the session was closed."""
        return self.lost_reason is not None

    @property
    def status(self) -> str:
        """``"lost"`` (final), ``"unconfirmed"`` (past :attr:`deadline`) or ``"alive"``."""
        if self.lost:
            return "lost"
        return "alive" if self.clock() < self.deadline else "unconfirmed"

    @property
    def hex(self) -> str:
        return f"{self.lease_id:016x}"

    def done(self) -> asyncio.Event:
        """Set once the lease is lost: expired, deleted, or closed."""
        return self.lost_event

    def on_done(self, callback: DoneCallback) -> None:
        """Call ``callback(reason)`` once, the moment the lease is lost (at once when it already is)."""
        if self.lost_reason is not None:
            callback(self.lost_reason)
        else:
            self._done_callbacks.append(callback)

    def off_done(self, callback: DoneCallback) -> None:
        """Forget ``callback`` (its claim was released)."""
        if callback in self._done_callbacks:
            self._done_callbacks.remove(callback)

    def set_lost(self, reason: str) -> None:
        """Mark the lease lost for ``reason`` (first reason wins) and tell every :meth:`on_done` callback."""
        if self.lost_reason is None:
            self.lost_reason = reason
            self.lost_event.set()
            callbacks, self._done_callbacks = self._done_callbacks, []
            for callback in callbacks:
                callback(reason)

    async def refresh(self) -> None:
        """One renewal. Raises NotReadyError (LeaseLostError: the row is gone)."""
        sent_at = self.clock()
        rows = await self.db.run("renewing the lease", self.db.sql.renew, {"lease": self.lease_id})
        if not rows:
            self.set_lost(f"PostgreSQL lease {self.hex} expired or was deleted")
            raise LeaseLostError(f"PostgreSQL lease {self.hex} expired or was deleted")
        held: Held = {(str(r[0]), int(r[1])): (int(r[2]), bool(r[3])) for r in rows if r[0] is not None}
        # The claims first: one no longer on the lease is lost before the deadline moves.
        if self._on_snapshot is not None:
            await self._on_snapshot(self, sent_at, held)
        late = sent_at - self.last_sent > self.interval * LATE_FACTOR
        self.last_sent = sent_at
        self.deadline = max(self.deadline, sent_at + self.ttl - self.margin)
        self._report("late" if late else "ok", None)

    async def _keep_alive(self) -> None:
        retry = RETRY_START_S
        while not self.lost:
            delay = max(0.0, self.last_sent + self.interval - self.clock())
            if delay:
                await asyncio.sleep(delay)
                if self.lost:
                    return
            try:
                await self.refresh()
                retry = RETRY_START_S
            except NotReadyError as exc:
                self._report("lost" if self.lost else "failed", exc)
                if self.lost:
                    return
                await asyncio.sleep(retry * random.uniform(0.5, 1.0))
                retry = min(retry * 2, self.interval / 4, RETRY_MAX_S)
            except Exception as exc:  # the keepalive must outlive any one failure
                log.exception("postgres: renewing lease %s failed unexpectedly", self.hex)
                self._report("failed", NotReadyError(f"postgres renewal error: {exc!r}"))
                await asyncio.sleep(retry)

    def _report(self, outcome: str, error: NotReadyError | None) -> None:
        if self._on_outcome is not None:
            self._on_outcome(self, outcome, error)

    async def stop(self) -> None:
        """Stop the keepalive task (the lease runs out by itself)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def close(self, timeout: float) -> None:
        """Stop keeping alive and delete the lease row, waiting at most ``min(timeout, TTL)`` s. Never raises."""
        await self.stop()
        if self.lost:
            return
        try:
            await self.db.run(
                "ending the lease", self.db.sql.end_lease, {"lease": self.lease_id}, min(timeout, self.ttl)
            )
            log.info("postgres: lease %s ended", self.hex)
        except NotReadyError as exc:
            log.warning("postgres: ending lease %s failed (it expires within %g s): %s", self.hex, self.ttl, exc.reason)
        self.set_lost("lease ended at shutdown")
