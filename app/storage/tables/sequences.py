"""Sequence storage on SQL tables: a row per document, changed by one transaction under the sequence's lock.

Rows (documents and events: :mod:`app.storage.sequences`; values as compact JSON text)::

    sequence_documents  (name, doc)  value             doc: record, tombstone, period/<key>
    sequence_events     (name, id)   period  body      period: a period key, or "never"

An update (:meth:`~app.storage.sequences.SequenceStore.update`) is one READ COMMITTED transaction: the sequence's
lock (the dialect's ``seq_lock``: PostgreSQL's ``pg_advisory_xact_lock``, MySQL's ``SELECT ... FOR UPDATE`` of the
name's row in ``sequence_locks``; held until COMMIT or ROLLBACK), a ``SELECT`` of the documents named -- read after
the lock is held, so under READ COMMITTED it sees every update that committed before --, the change, then an upsert
of the documents written, ``DELETE`` of those deleted and ``INSERT`` of the events, and ``COMMIT``. Every
update of a name, from any replica, takes the same lock, so none reads a snapshot another is about to change: the
change runs once, and there is nothing to retry. A transaction cut short (the statement timeout, a lost connection,
a node stopped) is rolled back by the server and its lock released; only a COMMIT whose answer is lost leaves it
unknown whether the change applied (BackendUnavailableError: a reservation then counts as a gap, and a gapless one
lapses back to ``free`` at its expiry).

Listing reads the ``record`` rows (tombstones and periods are other documents: the ``IDMINT_MAX_SEQUENCES`` cap and
``list`` never see them); the audit log is read in ``id`` order from an index on (name, period, id); pruning deletes
over every name, :data:`PRUNE_BATCH` rows a statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.storage import sequences as shared
from app.storage.sequences import RECORD, AuditPage, Change, Docs, Outcome, SequenceRecord, SequenceStore, T
from app.storage.tables.db import Database, Fetch

NEVER = "never"
"""The ``period`` column of an event of a sequence that never resets."""
PRUNE_BATCH = 5000
"""Rows one pruning statement deletes at most: a backlog (millions of events, IDMINT_LEDGER_DAYS lowered) is
deleted in many short statements, never in one that outlives the statement timeout and is rolled back every time."""


class TableSequenceStore(SequenceStore):
    """Sequences as rows of ``<schema>.sequence_documents`` and ``<schema>.sequence_events``; any number of
    replicas."""

    def __init__(self, db: Database, max_sequences: int) -> None:
        super().__init__(max_sequences)
        self.db = db
        self.name = db.store

    def _where(self, name: str, doc: str = RECORD) -> str:
        return f"{self.db.schema}.sequence_documents/{name}/{doc}"

    async def get(self, name: str) -> SequenceRecord:
        rows = await self.db.run(f"reading sequence {name}", self.db.sql.seq_get, {"name": name})
        if not rows:
            raise shared.unknown(name)
        return SequenceRecord.from_json(name, rows[0][0], self._where(name))

    async def list(self) -> list[SequenceRecord]:
        rows = await self.db.run("listing sequences", self.db.sql.seq_list, {"limit": self.max_sequences})
        return [SequenceRecord.from_json(str(n), value, self._where(str(n))) for n, value in rows]

    async def update(self, name: str, docs: Sequence[str], change: Change[T], timeout: float | None = None) -> T:
        names = [shared.check_doc(doc) for doc in docs]
        sql = self.db.sql

        async def work(fetch: Fetch) -> Outcome[T]:
            await fetch(sql.seq_lock, {"space": sql.seq_lock_space, "name": name})
            snapshot: dict[str, dict[str, Any] | None] = dict.fromkeys(names)
            for doc, value in await fetch(sql.seq_read, {"name": name, "docs": names}):
                snapshot[doc] = shared.loads(value, self._where(name, doc))
            found: Docs = snapshot
            outcome = change(found)
            shared.check_outcome(names, outcome)
            puts = {doc: shared.dumps(value).decode() for doc, value in outcome.writes.items() if value is not None}
            gone = [doc for doc, value in outcome.writes.items() if value is None]
            if puts:
                await fetch(sql.seq_put, {"name": name, "docs": list(puts), "values": list(puts.values())})
            if gone:
                await fetch(sql.seq_delete, {"name": name, "docs": gone})
            if outcome.events:
                events = outcome.events
                await fetch(
                    sql.seq_append,
                    {
                        "name": name,
                        "ids": [event["id"] for event in events],
                        "periods": [str(event.get("period") or NEVER) for event in events],
                        "bodies": [shared.dumps(event).decode() for event in events],
                    },
                )
            return outcome

        outcome = await self.db.transaction(f"updating sequence {name}", work, timeout)
        if outcome.error is not None:
            raise outcome.error
        return outcome.result

    async def audit(self, name: str, after: str | None, limit: int, period: str | None = None) -> AuditPage:
        rows = await self.db.run(
            f"reading the audit log of sequence {name}",
            self.db.sql.seq_audit,
            {"name": name, "after": after or "", "period": period, "limit": limit + 1},
        )
        page = [
            shared.loads(body, f"{self.db.schema}.sequence_events/{name}/{event_id}") for event_id, body in rows[:limit]
        ]
        return page, (str(rows[limit - 1][0]) if len(rows) > limit and limit > 0 else None)

    async def prune(self, events_before_ns: int, periods_before: str) -> int:
        sql = self.db.sql
        removed = 0
        for doing, statement, cut in (
            ("pruning sequence audit logs", sql.seq_prune_events, f"{events_before_ns:020d}"),
            ("pruning sequence periods", sql.seq_prune_periods, f"period/{periods_before}"),
        ):
            while True:  # batch after batch until one comes short (the end, or another replica pruning too)
                rows = await self.db.run(doing, statement, {"cut": cut, "batch": PRUNE_BATCH})
                count = int(rows[0][0]) if rows else 0
                removed += count
                if count < PRUNE_BATCH:
                    break
        return removed

    def status(self) -> dict[str, Any]:
        return {**super().status(), "database": self.db.where, "schema": self.db.schema}
