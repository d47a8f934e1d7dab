"""One lease kept alive in a SQL database: the :class:`~app.storage.expiring.ExpiringSession` on a ``leases`` row.

The keepalive renews with one statement or transaction (the dialect's ``renew``):
``UPDATE leases SET expires_at = now + ttl WHERE lease_id = $1 AND expires_at > now`` (the database's clock),
which also returns, in the same transaction, every claim row still on the lease (its identity, generation, and
whether a revoke is pending). No row means the lease expired or was deleted: the session is lost (final, as etcd's
NOT_FOUND). The claim rows go to the ``on_snapshot`` callback, which makes every claim not among them lost, before
the deadline moves.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from app.errors import BackendUnavailableError, LeaseLostError, NotReadyError
from app.storage.expiring import ExpiringSession, Outcome
from app.storage.tables.db import Database

LEASE_ID_BITS = 63
"""Lease IDs are random positive bigints, drawn by the process (a SQL database has no lease IDs of its own)."""
GRANT_TRIES = 3

Held = dict[tuple[str, int], tuple[int, bool]]
"""A renewal's snapshot of the claim rows on the lease: (pool key, identity) -> (generation, revoke pending)."""
Snapshot = Callable[["Session", float, Held], Awaitable[None]]
"""Awaited after every renewal that found the lease: (session, the renewal's send time, the claim rows on it)."""


class Session(ExpiringSession):
    """A granted lease row and the task keeping it alive. Build with :meth:`grant`; end with :meth:`close`."""

    closed_reason = "lease ended at shutdown"

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
        super().__init__(lease_id, ttl, sent_at, margin, clock, on_outcome)
        self.db = db
        self.store = db.store
        self.log = db.log
        self._on_snapshot = on_snapshot

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
                session.start(f"idmint-{db.store}-lease-{session.hex}")
                return session
        raise BackendUnavailableError(f"{db.title}: {GRANT_TRIES} random lease IDs were all taken")

    async def _renew(self, sent_at: float) -> float:
        rows = await self.db.run("renewing the lease", self.db.sql.renew, {"lease": self.lease_id})
        if not rows:
            self.set_lost(f"{self.db.title} lease {self.hex} expired or was deleted")
            raise LeaseLostError(f"{self.db.title} lease {self.hex} expired or was deleted")
        held: Held = {(str(r[0]), int(r[1])): (int(r[2]), bool(r[3])) for r in rows if r[0] is not None}
        # The claims first: one no longer on the lease is lost before the deadline moves.
        if self._on_snapshot is not None:
            await self._on_snapshot(self, sent_at, held)
        return self.ttl

    async def _end(self, timeout: float) -> None:
        try:
            await self.db.run("ending the lease", self.db.sql.end_lease, {"lease": self.lease_id}, timeout)
            self.log.info("%s: lease %s ended", self.store, self.hex)
        except NotReadyError as exc:
            self.log.warning(
                "%s: ending lease %s failed (it expires within %g s): %s", self.store, self.hex, self.ttl, exc.reason
            )
