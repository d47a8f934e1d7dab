"""The claim ledger in a SQL database: one ``ledger`` row per claim record, on no lease, so it outlives its owner.

A write is an upsert by record ID, stamping ``updated_at`` with the database's clock. Reads after
the first are incremental: rows whose ``updated_at`` is at or after the newest one read, less an overlap window
(:data:`OVERLAP_S`): a row stamped earlier may commit later than one stamped after it, and is still read. Rows read
twice are harmless (the ledger's index keeps the latest version). Retention deletes each record that ended before
the limit (a newer version, open again, is never deleted). An owner's liveness is its lease row's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta

from app.errors import NotReadyError
from app.storage.ledger import NS_IN_S, ClaimRecord, LedgerStore
from app.storage.tables.db import Database
from app.storage.tables.records import lease_of

OVERLAP_S = 30.0
"""Seconds before the newest ``updated_at`` read that the next incremental read starts: more than any statement
may take to commit after it stamped its row (the statement timeout, a synchronous standby's acknowledgement)."""
READ_LIMIT = 100_000
"""At most this many records are read at once (a fleet restarting hourly writes ~20,000 a month)."""
SINCE_KEY = "ledger_since"


class TableLedgerStore(LedgerStore):
    """Claim records as rows of ``<schema>.ledger`` (see the module docstring). ``clock``: the node's (ns since the
    epoch), for :meth:`owner_alive`'s expiry."""

    def __init__(self, db: Database, clock: Callable[[], int]) -> None:
        self.db = db
        self.name = db.store
        self.clock = clock
        self._newest: datetime | None = None

    async def write(self, record: ClaimRecord) -> None:
        await self.db.run(
            "writing a claim ledger record",
            self.db.sql.ledger_write,
            {
                "record": record.record,
                "scheme": record.scheme,
                "identity": record.identity,
                "lease": record.lease,
                "ended_at_ns": record.ended_at_ns,
                "body": record.to_json().decode(),
            },
        )

    async def read(self, full: bool) -> list[ClaimRecord]:
        sql = self.db.sql
        if full or self._newest is None:
            rows = await self.db.run("reading the claim ledger", sql.ledger_read_all, {"limit": READ_LIMIT})
        else:
            since = self._newest - timedelta(seconds=OVERLAP_S)
            rows = await self.db.run("reading the claim ledger", sql.ledger_read, {"since": since, "limit": READ_LIMIT})
        out: list[ClaimRecord] = []
        for _, body, updated_at in rows:
            with contextlib.suppress(ValueError):
                out.append(ClaimRecord.from_json(body))
            if self._newest is None or updated_at > self._newest:
                self._newest = updated_at
        return out

    async def compact(self, before_ns: int, records: list[ClaimRecord]) -> int:
        dropped = [r.record for r in records if r.ended_at_ns is not None and r.ended_at_ns < before_ns]
        if not dropped:
            return 0
        found = await self.db.run(
            "compacting the claim ledger",
            self.db.sql.ledger_compact,
            {"records": dropped, "before": before_ns},
        )
        return int(found[0][0]) if found else 0

    async def since_ns(self, now_ns: int) -> int:
        sql = self.db.sql
        await self.db.run("writing when the claim ledger began", sql.meta_put, {"key": SINCE_KEY, "value": str(now_ns)})
        rows = await self.db.run("reading when the claim ledger began", sql.meta_get, {"key": SINCE_KEY})
        try:
            return int(rows[0][0])
        except (IndexError, ValueError) as exc:
            raise NotReadyError(f"{self.db.title} meta row {SINCE_KEY} holds no time: {exc}") from exc

    async def owner_alive(self, record: ClaimRecord) -> tuple[bool | None, int | None]:
        """Whether the record's lease row is alive, and when it expires or expired (ns, on the node's clock: the time
        left, negative once expired, measured by the database, added to our clock read before asking, so it is never
        later than the expiry); (False, None) when the row is gone."""
        lease_id = lease_of(record.lease or "")
        if lease_id is None:
            return None, None
        asked_ns = self.clock()  # before the question: the database measured the time left after it (never later)
        try:
            rows = await self.db.run("looking up an owner's lease", self.db.sql.lease_left, {"lease": lease_id})
        except NotReadyError:
            return None, None
        if not rows:
            return False, None  # deleted: released cleanly, or expired over a day ago
        left_ns = int(rows[0][0] * NS_IN_S)
        # Expired or not, the row says when: a dead owner's record ends at its lease's expiry even when no sweep saw
        # the lease alive (no earlier estimate), never at the later moment it was found gone, which could fall after
        # the moment a successor claimed the identity.
        return left_ns > 0, asked_ns + left_ns
