"""Backfill marks: for each backfill identity and time tick, the highest sequence a back-dated ID used.

Snowflake and eight-byte IDs back-dated to a past time take a backfill identity (the region's reserve, leased as
any identity is) and a sequence of that identity's tick (a millisecond, or a snowflake layout's unit). Live issue
never holds those identities; backfill keeps, **in storage**, per ``(space, identity, tick)``, the highest sequence
handed out (``high``, -1 when none), and raises it before any of those IDs leave the process. So two replicas
backfilling into one millisecond on one identity take disjoint sequences, and a restarted replica (or another
replica that later leases the identity) continues above them. ``space`` names the identity space:
``<scheme>/<group>`` (``snowflake/twitter``, ``eight-byte/0``).

The rule is written once, here (:func:`grant`: from each tick's stored mark, take up to the count asked of what is
left below the identity's sequences per tick, and raise the mark past it); a backend supplies one primitive,
:meth:`BackfillStore.update`: read the marks of some ticks of one (space, identity) as one snapshot, apply a pure
function of them, and write the marks it returns atomically, only if the snapshot is still current (else apply it
again on a fresh one). A mark never goes down. Backends:

* **embedded** -- one SQLite database in the state directory (``backfill.sqlite3``), one ``BEGIN IMMEDIATE``
  transaction per update (every process on the machine queues on SQLite's write lock);
* **etcd** -- a key per mark, ``<namespace>idmint/backfill/<space>/<identity>/<tick>``, one transaction per update:
  ``If(ModRevision(k) == seen, for every tick) Then Put(each mark raised) Else Get(every tick)``;
* **PostgreSQL, MySQL/MariaDB** -- table ``backfill_marks`` (:mod:`app.storage.tables.backfill`), one
  transaction per update under the (space, identity)'s lock (``pg_advisory_xact_lock``; ``SELECT ... FOR UPDATE``
  of a ``sequence_locks`` row).

An update covers at most :attr:`BackfillStore.max_ticks` ticks (an etcd transaction holds 128 operations); a request
with more is taken in chunks of disjoint ticks (up to :data:`CHUNKS_AT_ONCE` in flight), each durable before any ID
of the request is handed out (a chunk taken for a request that then fails leaves unused sequences, never a repeat).

May import: :mod:`app.errors` only.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")
Marks = dict[int, int]
"""tick -> the highest sequence used in it (a tick absent: none used)."""
Grant = dict[int, tuple[int, int]]
"""tick -> (first sequence, count) handed to one request (count >= 1)."""
MarkChange = Callable[[Marks], tuple[Marks, T]]
"""A pure function of a snapshot of marks: (the marks to write, the result)."""
CHUNKS_AT_ONCE = 1
"""Updates of one take in flight at once (their ticks are disjoint). One: more did not raise the rate on etcd (its
JSON gateway is CPU-bound) but slowed every other reader of the store."""


def grant(marks: Mapping[int, int], wants: Mapping[int, int], sequences: int) -> tuple[Marks, Grant]:
    """The rule: for each tick of ``wants`` (tick -> IDs asked), up to that many sequences above its stored mark
    and below ``sequences`` (the identity's sequences per tick); returns (raised marks, tick -> (first, count)).
    A full tick is left out of both."""
    writes: Marks = {}
    granted: Grant = {}
    for tick, count in wants.items():
        first = marks.get(tick, -1) + 1
        take = min(count, sequences - first)
        if take > 0:
            writes[tick] = first + take - 1
            granted[tick] = (first, take)
    return writes, granted


class BackfillStore(abc.ABC):
    """Where backfill marks live; one per process, owned by the storage bundle. Every method may raise
    :class:`~app.errors.BackendUnavailableError` (HTTP 503 + Retry-After)."""

    max_ticks: int = 10_000
    """Ticks one :meth:`update` covers at most."""

    async def start(self) -> None:
        """Open what the store needs (lazily: never raises for unreachable storage)."""

    async def close(self) -> None:
        """Release what the store opened."""

    @abc.abstractmethod
    async def update(self, space: str, identity: int, ticks: Sequence[int], change: MarkChange[T]) -> T:
        """Apply ``change`` to the marks of ``ticks`` (at most :attr:`max_ticks`) of ``identity`` in ``space`` in
        one atomic step: the snapshot holds the stored mark of each tick that has one; the marks ``change`` returns
        are written only if none of the snapshot's changed meanwhile (else ``change`` runs again on a fresh one).
        Durable when it returns."""

    async def take(self, space: str, identity: int, wants: Mapping[int, int], sequences: int) -> Grant:
        """Sequences for ``wants`` (tick -> IDs asked) on ``identity``: up to the count asked per tick, above every
        sequence handed out before on that (space, identity, tick) by any process; the marks are raised in storage
        before it returns. A tick with no sequence left is absent from the answer, one with fewer than asked
        has a smaller count."""
        ticks = sorted(wants)
        gate = asyncio.Semaphore(CHUNKS_AT_ONCE)

        async def one(chunk: Mapping[int, int]) -> Grant:
            def change(marks: Marks) -> tuple[Marks, Grant]:
                return grant(marks, chunk, sequences)

            async with gate:
                return await self.update(space, identity, list(chunk), change)

        chunks = [
            {tick: wants[tick] for tick in ticks[start : start + self.max_ticks]}
            for start in range(0, len(ticks), self.max_ticks)
        ]
        out: Grant = {}
        for granted in await asyncio.gather(*(one(chunk) for chunk in chunks)):
            out.update(granted)
        return out

    async def marks(self, space: str, identity: int, ticks: Sequence[int]) -> Marks:
        """The stored marks of ``ticks`` (a tick without one is absent)."""
        found: Marks = {}
        for start in range(0, len(ticks), self.max_ticks):

            def read(marks: Marks) -> tuple[Marks, None]:
                found.update(marks)
                return {}, None

            await self.update(space, identity, list(ticks[start : start + self.max_ticks]), read)
        return found


class MemoryBackfillStore(BackfillStore):
    """The test double: marks in this process's memory (one lock: every update is atomic)."""

    def __init__(self) -> None:
        self.stored: dict[tuple[str, int, int], int] = {}
        self._lock = asyncio.Lock()

    async def update(self, space: str, identity: int, ticks: Sequence[int], change: MarkChange[T]) -> T:
        async with self._lock:
            snapshot = {
                tick: self.stored[(space, identity, tick)] for tick in ticks if (space, identity, tick) in self.stored
            }
            writes, result = change(snapshot)
            for tick, high in writes.items():
                self.stored[(space, identity, tick)] = high
            return result
