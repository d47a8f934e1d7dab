"""What a SQL dialect's database gives the table backends (:mod:`app.storage.tables`).

Rows: every statement returns a list of tuples. A statement that returns rows (``SELECT``, or PostgreSQL's
``RETURNING``) returns them; a guarded write that changed (or, on MySQL, matched) no row returns ``[]``, so a
caller asks ``if rows`` whichever dialect ran it. A count a caller reads is ``rows[0][0]`` when ``rows`` is not
empty, 0 otherwise.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from app.errors import BackendUnavailableError

T = TypeVar("T")

Fetch = Callable[[Any, "Mapping[str, Any] | None"], Awaitable[list[tuple[Any, ...]]]]
"""Run one statement inside a transaction: ``await fetch(statement, params)`` -> its rows."""


async def answered_in_time(
    work: Awaitable[T],
    conn: Any,
    give_up: float,
    *,
    abandon: Callable[[asyncio.Task[T], Any], Awaitable[None]],
    drop: Callable[[Any], Awaitable[None]],
    late: str,
) -> asyncio.Task[T]:
    """Run one statement's ``work`` on ``conn`` until the loop's time ``give_up`` and return its finished task (its
    result or error is the caller's to read, and the connection the caller's to give back). When it does not answer
    in time, or the caller is cancelled meanwhile, the statement is ended under the driver (``abandon(task, conn)``:
    never left waiting on the server), then the connection given up (``drop(conn)``); then
    BackendUnavailableError(``late``) is raised, or the cancellation goes on. That clean-up runs to its end whatever
    cancels the caller meanwhile (a connection given up under a statement still running could hand its socket to
    another), and the caller waits for it: it is bounded by ``abandon``."""
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=max(0.0, give_up - asyncio.get_running_loop().time()))
    except asyncio.CancelledError:
        await _give_up(task, conn, abandon, drop)
        raise
    if task not in done:
        await _give_up(task, conn, abandon, drop)
        raise BackendUnavailableError(late)
    return task


async def _give_up(
    task: asyncio.Task[T],
    conn: Any,
    abandon: Callable[[asyncio.Task[T], Any], Awaitable[None]],
    drop: Callable[[Any], Awaitable[None]],
) -> None:
    """``abandon(task, conn)`` then ``drop(conn)``, in a task of its own that no cancellation of ours reaches; we wait
    for it to end, and a cancellation that came meanwhile is raised after it."""

    async def clean_up() -> None:
        try:
            await abandon(task, conn)
        finally:
            await drop(conn)

    cleaning = asyncio.ensure_future(clean_up())
    cancelled = False
    while not cleaning.done():
        try:
            await asyncio.shield(cleaning)
        except asyncio.CancelledError:
            cancelled = True
        except BaseException:  # the clean-up's own error: raised below, after a cancellation if one came
            break
    if cancelled:
        raise asyncio.CancelledError
    cleaning.result()


def as_json(value: Any) -> Any:
    """A JSON column's value as Python: PostgreSQL's ``jsonb`` comes decoded, MySQL's text is decoded here (text
    that is not JSON: None)."""
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


class Database(Protocol):
    """A bounded pool on one database and the statements of its schema (``sql``)."""

    store: str
    """The backend's name in logs and reports ("postgres", "mysql")."""
    title: str
    """The server's name in reasons ("PostgreSQL", "MySQL")."""
    log: logging.Logger
    where: str
    """The server, for logs and reasons (a URL without its password)."""
    schema: str
    """The schema (PostgreSQL) or database (MySQL) the tables are in."""
    size: int
    limit: float
    """Seconds one statement may take, as the client sees it."""

    @property
    def sql(self) -> Any: ...

    async def ready(self) -> None: ...

    async def close(self) -> None: ...

    async def run(
        self, doing: str, query: Any, params: Mapping[str, Any] | None = None, limit: float | None = None
    ) -> list[tuple[Any, ...]]: ...

    async def transaction(self, doing: str, work: Callable[[Fetch], Awaitable[T]], limit: float | None = None) -> T: ...


TABLE_PRIVILEGES = {
    "schema_version": "SELECT",
    "meta": "SELECT, INSERT",
    "leases": "SELECT, INSERT, UPDATE, DELETE",
    "claims": "SELECT, INSERT, UPDATE",
    "registrations": "SELECT, INSERT, UPDATE",
    "records": "SELECT, INSERT, UPDATE",
    "ledger": "SELECT, INSERT, UPDATE, DELETE",
    "sequence_documents": "SELECT, INSERT, UPDATE, DELETE",
    "sequence_events": "SELECT, INSERT, DELETE",
    "backfill_marks": "SELECT, INSERT, UPDATE",
}
"""Table -> the privileges the statements need on it, on every dialect (a replica writes no DDL and no
schema-version row; claim rows are never deleted). A dialect adds its own tables' (MySQL: ``sequence_locks``)."""


class SchemaGate:
    """The tables made ready once per pool: read their version, create them when absent or older (the dialect's
    ``create`` takes its lock), refuse them when newer. ``version``: this idmint's; ``what``: the place named in a
    refusal ("PostgreSQL schema idmint")."""

    def __init__(self, version: int, what: str, log: logging.Logger) -> None:
        self.version = version
        self.what = what
        self.log = log
        self.done = False
        self._lock: asyncio.Lock | None = None

    async def ensure(self, read: Callable[[], Awaitable[int | None]], create: Callable[[], Awaitable[None]]) -> None:
        """Make sure the tables are at :attr:`version`: ``read()`` gives theirs (None: absent), ``create()`` makes
        them. Raises BackendUnavailableError (and what ``read``/``create`` raise) when they cannot be used."""
        if self.done:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.done:
                return
            found = await read()
            if found is None or found < self.version:
                await create()
                self.log.info("%s: tables created or brought to version %d", self.what, self.version)
            elif found > self.version:
                raise BackendUnavailableError(
                    f"{self.what} holds idmint tables at version {found}, newer than this idmint's {self.version}: "
                    "run the idmint that set them up, or use another"
                )
            self.done = True


class PortableStatements:
    """The statements every dialect writes alike (standard SQL; the tables qualified by ``s``, already quoted): a
    dialect's ``Statements`` starts from these and adds its own."""

    def __init__(self, s: str) -> None:
        self.end_lease = f"DELETE FROM {s}.leases WHERE lease_id = %(lease)s"
        self.row_of = f"""
            SELECT c.lease_id, c.generation, c.revoked_until IS NOT NULL
            FROM {s}.claims c WHERE c.pool_key = %(pool)s AND c.identity = %(identity)s"""
        self.revoke_free = f"""
            UPDATE {s}.claims SET lease_id = NULL, revoked_until = NULL
            WHERE pool_key = %(pool)s AND identity = %(identity)s AND generation = %(generation)s
              AND revoked_until IS NOT NULL"""
        self.open_records = f"""
            SELECT record FROM {s}.ledger
            WHERE scheme = %(scheme)s AND identity = %(identity)s AND lease = %(lease)s AND ended_at_ns IS NULL"""
        self.record_get = f"SELECT value FROM {s}.records WHERE name = %(name)s"
        self.ledger_read = f"""
            SELECT record, body, updated_at FROM {s}.ledger
            WHERE updated_at >= %(since)s ORDER BY updated_at LIMIT %(limit)s"""
        self.ledger_read_all = f"SELECT record, body, updated_at FROM {s}.ledger ORDER BY updated_at LIMIT %(limit)s"
        self.seq_get = f"SELECT value FROM {s}.sequence_documents WHERE name = %(name)s AND doc = 'record'"
