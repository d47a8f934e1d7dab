"""Backfill marks on PostgreSQL (:mod:`app.storage.backfill`): rows of ``<schema>.backfill_marks``.

An update is one READ COMMITTED transaction: ``pg_advisory_xact_lock`` of the (space, identity) (a row lock could
not cover a mark not yet written), ``SELECT`` of the ticks' marks once the lock is held, the change, then one
``INSERT ... ON CONFLICT DO UPDATE`` of the marks raised (never lowered: ``GREATEST``), ``COMMIT``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import psycopg

from app.storage.backfill import BackfillStore, MarkChange
from app.storage.postgres.client import Database, fetch

T = TypeVar("T")


class PostgresBackfillStore(BackfillStore):
    """Marks as rows of ``<schema>.backfill_marks``; any number of replicas."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def update(self, space: str, identity: int, ticks: Sequence[int], change: MarkChange[T]) -> T:
        sql = self.db.sql
        lock_name = f"{space}/{identity}"

        async def work(conn: psycopg.AsyncConnection[Any]) -> T:
            await fetch(conn, sql.seq_lock, {"space": sql.backfill_lock_space, "name": lock_name})
            rows = await fetch(conn, sql.backfill_read, {"space": space, "identity": identity, "ticks": list(ticks)})
            writes, result = change({int(tick): int(high) for tick, high in rows})
            if writes:
                await fetch(
                    conn,
                    sql.backfill_put,
                    {"space": space, "identity": identity, "ticks": list(writes), "highs": list(writes.values())},
                )
            return result

        return await self.db.transaction(f"raising backfill marks of {lock_name}", work)
