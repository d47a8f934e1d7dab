"""PostgreSQL sequence storage: one ``sequences`` row per sequence, advanced by one atomic ``UPDATE ... RETURNING``.

Row::

    name  start  cache  next (numeric: up to 2**63)  reserved_first  version

A reservation is one statement (:attr:`Statements.seq_reserve <app.storage.postgres.sql.Statements.seq_reserve>`):
``SET reserved_first = next, next = next + least(count, 2**63 - next), version = version + 1 WHERE name = $1 AND
(the count fits, or partial and something is left) RETURNING reserved_first, next, version``. The row lock makes
concurrent reservations from any number of replicas queue, each reading the row as the previous one left it (READ
COMMITTED re-reads a row updated under it), so two reservations never overlap and there is nothing to retry. A
reservation the statement refuses is read once more to tell an unknown sequence from one that would pass
2**63-1 (:meth:`SequenceRecord.advance <app.storage.sequences.SequenceRecord.advance>` words the error).

A hand-back at a clean stop is one compare-and-set on ``version``: ``SET next = first WHERE version = <the version
this process's latest reservation left> AND next = last + 1``; it applies only when nobody wrote the row since.

Creating is ``INSERT ... WHERE (SELECT count(*) ...) < IDMINT_MAX_SEQUENCES ON CONFLICT DO NOTHING``: two replicas
creating different names at the same moment can pass the cap by one each, as on etcd.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.errors import BackendUnavailableError
from app.storage.postgres.client import Database
from app.storage.sequences import MAX_VALUE, SequenceRecord, SequenceStore, conflict, too_many, unknown


class PostgresSequenceStore(SequenceStore):
    """Sequences as rows of ``<schema>.sequences``; any number of replicas."""

    name = "postgres"

    def __init__(self, db: Database, max_sequences: int) -> None:
        self.db = db
        self.max_sequences = max_sequences
        self._wrote: dict[str, tuple[SequenceRecord, int]] = {}
        """name -> (record, version) of this process's latest reservation: the compare of a hand-back."""
        self._locks: dict[str, asyncio.Lock] = {}
        self.reservations = 0

    def _record(self, name: str, start: Any, cache: Any, nxt: Any) -> SequenceRecord:
        start, cache, nxt = int(start), int(cache), int(nxt)
        if not 0 <= start <= nxt <= MAX_VALUE + 1 or cache < 1:
            raise BackendUnavailableError(f"sequence row {self.db.schema}.sequences/{name} is out of rule", 5)
        return SequenceRecord(name, start, cache, nxt)

    async def create(self, name: str, start: int, cache: int) -> tuple[SequenceRecord, bool]:
        sql = self.db.sql
        params = {"name": name, "start": start, "cache": cache, "max": self.max_sequences}
        rows = await self.db.run(f"creating sequence {name}", sql.seq_create, params)
        if rows:
            return self._record(name, *rows[0]), True
        found = await self.db.run(f"reading sequence {name}", sql.seq_get, {"name": name})
        if not found:
            raise too_many(self.max_sequences)
        existing = self._record(name, *found[0])
        if not existing.same_settings(start, cache):
            raise conflict(existing, start, cache)
        return existing, False

    async def get(self, name: str) -> SequenceRecord:
        rows = await self.db.run(f"reading sequence {name}", self.db.sql.seq_get, {"name": name})
        if not rows:
            raise unknown(name)
        return self._record(name, *rows[0])

    async def list(self) -> list[SequenceRecord]:
        rows = await self.db.run("listing sequences", self.db.sql.seq_list, {"limit": self.max_sequences})
        return [self._record(str(r[0]), r[1], r[2], r[3]) for r in rows]

    async def reserve(self, name: str, count: int, partial: bool = False) -> tuple[int, int]:
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:  # one reservation of a name at a time from this process: _wrote stays its latest
            rows = await self.db.run(
                f"reserving {count} integers of sequence {name}",
                self.db.sql.seq_reserve,
                {"name": name, "count": count, "partial": partial},
            )
            if not rows:
                record = await self.get(name)  # unknown() when absent
                record.advance(count, partial)  # raises SequenceOverflowError, as it would not fit
                raise BackendUnavailableError(f"sequence {name} changed while being reserved; try again")
            first, after, version, start, cache = rows[0]
            record = self._record(name, start, cache, after)
            self._wrote[name] = (record, int(version))
            self.reservations += 1
            return int(first), int(after) - 1

    async def give_back(self, name: str, first: int, last: int, timeout: float) -> bool:
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            wrote = self._wrote.pop(name, None)
            if wrote is None:
                return False
            record, version = wrote
            if record.next != last + 1 or not record.start <= first <= last <= MAX_VALUE:
                return False
            rows = await self.db.run(
                f"handing back {last - first + 1} integers of sequence {name}",
                self.db.sql.seq_give_back,
                {"name": name, "first": first, "version": version, "after": last + 1},
                limit=timeout,
            )
            return bool(rows)

    def status(self) -> dict[str, Any]:
        return {
            "store": self.name,
            "database": self.db.where,
            "schema": self.db.schema,
            "reservations": self.reservations,
        }
