"""Backfill marks on SQL tables (:mod:`app.storage.backfill`): rows of ``<schema>.backfill_marks``, one per
(space, identity, tick), ``high`` the highest sequence used in that tick.

An update is one READ COMMITTED transaction: the (space, identity)'s lock (the dialect's ``backfill_lock``:
PostgreSQL's ``pg_advisory_xact_lock``, MySQL's ``SELECT ... FOR UPDATE`` of a row of ``sequence_locks``; a row
lock on ``backfill_marks`` could not cover a mark not yet written), a ``SELECT`` of the ticks' marks once the lock
is held, the change, then one upsert of the marks raised (never lowered: ``GREATEST``), ``COMMIT``. Every update of
a (space, identity), from any replica, takes the same lock, so the change runs once, on a current snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.storage.backfill import BackfillStore, MarkChange, T
from app.storage.tables.db import Database, Fetch


class TableBackfillStore(BackfillStore):
    """Marks as rows of ``<schema>.backfill_marks``; any number of replicas. Raises BackendUnavailableError when
    the database cannot be used."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def update(self, space: str, identity: int, ticks: Sequence[int], change: MarkChange[T]) -> T:
        sql = self.db.sql
        lock_name = f"{space}/{identity}"

        async def work(fetch: Fetch) -> T:
            await fetch(sql.backfill_lock, {"space": sql.backfill_lock_space, "name": lock_name})
            rows = await fetch(sql.backfill_read, {"space": space, "identity": identity, "ticks": list(ticks)})
            writes, result = change({int(tick): int(high) for tick, high in rows})
            if writes:
                await fetch(
                    sql.backfill_put,
                    {"space": space, "identity": identity, "ticks": list(writes), "highs": list(writes.values())},
                )
            return result

        return await self.db.transaction(f"raising backfill marks of {lock_name}", work)
