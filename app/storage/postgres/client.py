"""The process's PostgreSQL connection pools (:class:`Database`), every statement on them bounded in time, and the
one table from psycopg's errors to the project's (:data:`ERRORS`, read by :func:`map_error` only).

Two pools per process: the lease's (:data:`LEASE_POOL_SIZE` connection, ``application_name`` ``idmint-lease``:
renewals, claims, marks, registrations, fleet records, revokes) and the stores' (``IDMINT_POSTGRES_POOL_SIZE``
connections, default 1: sequences, whose updates wait on ``pg_advisory_xact_lock``, and the ledger). A sequence
update waiting on another replica's lock therefore never holds the connection a renewal needs. Default total: 2
connections per process, so 48 replicas fit PostgreSQL's default ``max_connections`` of 100 (less its 3
``superuser_reserved_connections``). Each connection is opened within ``IDMINT_POSTGRES_CONNECT_TIMEOUT`` and
configured with ``statement_timeout`` = ``IDMINT_POSTGRES_STATEMENT_TIMEOUT`` (the server cancels a statement
that runs longer) and READ COMMITTED transactions (whatever the server's default_transaction_isolation). A server
that does not answer at all (stalled: SIGSTOP, a dead network) is met by a client-side limit as well: a statement
whose answer has not come within the limit has its connection's socket shut down under it (the pool replaces the
connection) and raises BackendUnavailableError at once; psycopg's own cancellation, which asks the server to cancel
and then waits for it, is never left to wait on a server that cannot answer.

The URL is a secret: it is parsed once (:func:`describe`), and only ``postgresql://user@host:port/dbname`` (no
password, no options) is ever shown, in logs, ``/readyz``, ``/v1/schemes``, ``/v1/fleet`` or errors; error texts
from libpq are scrubbed of the password as well.

The tables are created at the first use when absent (:meth:`Database.ready`), under an advisory lock so that
replicas starting together do not race; a database whose tables are newer than this idmint is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from app.errors import BackendUnavailableError, ConfigError, NotReadyError
from app.storage.postgres.sql import SCHEMA_VERSION, Statements
from app.storage.tables.db import Fetch, SchemaGate, answered_in_time

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger("idmint.storage.postgres")

T = TypeVar("T")

# SQLSTATE (exact code, else its two-character class; None: no SQLSTATE, a failed or lost connection) -> (what
# PostgreSQL did, our error class). The one table of PostgreSQL errors; nothing is told apart by message text but
# a full server's refusal (SLOTS_FULL). A connection that fails at start-up carries no SQLSTATE (libpq reports
# none): a wrong password, a missing database and a refused TCP connection all map to None, and libpq's own words
# (appended) say which.
ERRORS: dict[str | None, tuple[str, type[NotReadyError]]] = {
    None: ("is unreachable or refused the connection", BackendUnavailableError),
    "08": ("is unreachable (connection failed or lost)", BackendUnavailableError),
    "28": ("rejected our credentials", BackendUnavailableError),
    "3D": ("has no such database", BackendUnavailableError),
    "3F": ("has no such schema (run `idmint storage sql`)", BackendUnavailableError),
    "42P01": ("has no idmint tables (run `idmint storage sql`)", BackendUnavailableError),
    "42501": ("refused: permission denied", BackendUnavailableError),
    "25006": ("is read-only (a standby, or default_transaction_read_only)", BackendUnavailableError),
    "40": ("aborted the statement on a conflict", BackendUnavailableError),
    "53300": ("has no connection slot free (max_connections reached)", BackendUnavailableError),
    "53": ("is out of resources (too many connections, disk full or out of memory)", BackendUnavailableError),
    "57014": ("did not answer in time (statement_timeout)", BackendUnavailableError),
    "57P": ("is shutting down, restarting or starting up", BackendUnavailableError),
    "XX": ("failed internally", BackendUnavailableError),
}
FALLBACK = ("failed", BackendUnavailableError)
SLOTS_FULL = ("too many clients already", "remaining connection slots are reserved")
"""PostgreSQL's words when it refuses a connection for want of a free slot (SQLSTATE 53300, too_many_connections,
sent at start-up, where libpq reports no SQLSTATE): the one failure told apart by its text, as 53300."""
POOL_CLOSE_TIMEOUT_S = 1.0
"""Seconds :meth:`Database.close` waits for the pool's background workers."""
ABANDON_WAIT_S = 1.0
"""Seconds a statement whose socket was shut down under it gets to fail by itself."""
SLACK_S = 0.5
"""The client-side limit of a statement: the server's statement_timeout plus this (answers in flight)."""
LEASE_POOL_SIZE = 1
"""Connections of the lease's own pool (:func:`app.storage.postgres.open_postgres`): its statements are short and
never wait on a sequence's lock, so one connection serves a renewal every TTL/3 and the claims' mark writes."""


def map_error(exc: BaseException, doing: str, where: str, secret: str | None = None) -> NotReadyError:
    """The project's error for ``exc`` (psycopg's, or the pool's timeout), per :data:`ERRORS`; ``doing`` says what
    we were doing, ``where`` names the server (:func:`describe`); ``secret`` (the password) never appears."""
    if isinstance(exc, PoolTimeout):
        return BackendUnavailableError(f"PostgreSQL at {where} gave no connection in time (while {doing})")
    code: str | None = getattr(exc, "sqlstate", None)
    if code is None and isinstance(exc, psycopg.OperationalError) and any(w in str(exc) for w in SLOTS_FULL):
        code = "53300"
    if code is None:
        lost = isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))
        what, kind = ERRORS[None] if lost else FALLBACK
    else:
        what, kind = ERRORS.get(code) or ERRORS.get(code[:3]) or ERRORS.get(code[:2]) or FALLBACK
    detail = " ".join(str(exc).split())
    if secret:
        detail = detail.replace(secret, "***")
    return kind(f"PostgreSQL at {where} {what} (while {doing}): {detail}"[:600])


def describe(url: str) -> tuple[str, str | None]:
    """``(postgresql://user@host:port/dbname, password or None)`` for a libpq URI or key=value string; no password,
    no options. Raises ConfigError (without quoting ``url``: it may hold the password) when libpq cannot parse it."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise ConfigError(
            "IDMINT_POSTGRES_URL is not a libpq connection string (postgresql://user@host:port/dbname or "
            "'host=... dbname=...'); it is not shown: it may hold a password"
        ) from None
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = params.get("port")
    user = params.get("user")
    where = f"{host}:{port}" if port else host
    shown = f"postgresql://{user}@{where}" if user else f"postgresql://{where}"
    dbname = params.get("dbname")
    password = params.get("password")
    return (shown + (f"/{dbname}" if dbname else "")), (str(password) if password else None)


RECONNECT_TIMEOUT_S = 5.0
"""Seconds psycopg_pool keeps retrying one lost connection (its backoff: 1, 2 s ...) before a later getconn starts
afresh."""


class Database:
    """One pool (``settings.postgres_*``; ``size`` connections, default ``IDMINT_POSTGRES_POOL_SIZE``, named
    ``name`` in ``pg_stat_activity.application_name``) and the statements of the schema.

    Opened lazily by the first :meth:`run` (or :meth:`open`), on the running event loop; closed by
    :meth:`close` (:meth:`Storage.close <app.storage.base.Storage.close>`). Never raises at open for an unreachable
    server or wrong credentials: statements raise BackendUnavailableError naming why, and the pool keeps trying.
    """

    def __init__(self, settings: Settings, size: int | None = None, name: str = "idmint") -> None:
        if settings.postgres_url is None:
            raise ConfigError("the PostgreSQL backend needs IDMINT_POSTGRES_URL")
        self.store = "postgres"
        self.title = "PostgreSQL"
        self.log = log
        self._url = settings.postgres_url.get_secret_value()
        self.where, self._secret = describe(self._url)
        self.schema = settings.postgres_schema
        self.sql = Statements(self.schema)
        self.size = settings.postgres_pool_size if size is None else size
        self.name = name
        self.statement_timeout = float(settings.postgres_statement_timeout)
        self.connect_timeout = float(settings.postgres_connect_timeout)
        self.limit = self.statement_timeout + SLACK_S
        """Seconds one statement may take, as the client sees it (a connection's wait included)."""
        self._pool: AsyncConnectionPool | None = None
        self.connect_error: psycopg.Error | None = None
        """Why the pool's last connection attempt failed (None once one succeeds): what a statement that got no
        connection reports (the pool itself only says it gave none in time)."""
        self._gate = SchemaGate(SCHEMA_VERSION, f"PostgreSQL schema {self.schema}", log)
        self._closed = False

    # -- the pool --------------------------------------------------------------------------------------------
    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.connect_error = None
        ms = int(self.statement_timeout * 1000)
        await conn.execute(f"SET statement_timeout = {ms}")
        await conn.execute(f"SET idle_in_transaction_session_timeout = {max(ms, 1000)}")
        # Every transaction READ COMMITTED, whatever the database's or role's default_transaction_isolation: an
        # update's snapshot must be taken after its lock is held (REPEATABLE READ would take it at the lock
        # statement, before the wait, and read what a replica committed meanwhile as absent).
        await conn.set_isolation_level(psycopg.IsolationLevel.READ_COMMITTED)

    async def open(self) -> AsyncConnectionPool:
        """The pool, opened on first use (connections are made in the background; raises only when closed)."""
        if self._closed:
            raise BackendUnavailableError("the PostgreSQL connection pool is closed")
        if self._pool is None:
            database = self

            class Connection(psycopg.AsyncConnection[Any]):
                """Keeps why a connection attempt failed (the pool only logs it)."""

                @classmethod
                async def connect(cls, *args: Any, **kwargs: Any) -> Any:
                    try:
                        return await super().connect(*args, **kwargs)
                    except psycopg.Error as exc:
                        database.connect_error = exc
                        raise

            self._pool = AsyncConnectionPool(
                self._url,
                connection_class=Connection,
                min_size=self.size,
                max_size=self.size,
                kwargs={
                    "autocommit": True,
                    "connect_timeout": max(2, math.ceil(self.connect_timeout)),
                    "application_name": self.name,
                },
                configure=self._configure,
                open=False,
                name=self.name,
                timeout=self.limit,
                # psycopg_pool doubles the wait between reconnection attempts without a cap (1, 2, 4 ... s), so
                # after a long outage the next attempt could be minutes away. It gives up after this many seconds
                # instead, and the next getconn (a keepalive, a request) starts a fresh attempt at once: recovery
                # after an outage of any length is within one keepalive interval plus a few seconds.
                reconnect_timeout=RECONNECT_TIMEOUT_S,
            )
            await self._pool.open(wait=False)
        return self._pool

    async def close(self) -> None:
        """Close every connection. Never raises."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(timeout=POOL_CLOSE_TIMEOUT_S), POOL_CLOSE_TIMEOUT_S + 1.0)
            except Exception as exc:  # closing is best effort
                log.warning("postgres: closing the connection pool failed: %r", exc)

    # -- statements ------------------------------------------------------------------------------------------
    async def run(
        self, doing: str, query: str, params: Mapping[str, Any] | None = None, limit: float | None = None
    ) -> list[tuple[Any, ...]]:
        """Run one statement (its own transaction) and return its rows ([] for none). Bounded by ``limit`` seconds
        (default :attr:`limit`) for the connection and the answer together. Raises the mapped NotReadyError
        (BackendUnavailableError: unreachable, refused, timed out) naming ``doing``."""
        if not self._gate.done:
            await self.ready()
        return await self._run(doing, query, params, limit)

    async def transaction(
        self,
        doing: str,
        work: Callable[[Fetch], Awaitable[T]],
        limit: float | None = None,
    ) -> T:
        """Run ``work(fetch)`` (``await fetch(statement, params)``: its rows) inside one READ COMMITTED transaction
        (whatever the server's default_transaction_isolation; committed when it returns, rolled back when it raises) and
        return what it returned: each statement of ``work`` sees every transaction committed before it began. Bounded as
        :meth:`run` is, by ``limit`` seconds for the whole transaction: past it the connection is cut (the server rolls
        the transaction back) and BackendUnavailableError is raised; an answer to COMMIT that is lost leaves it unknown
        whether it applied. Raises what ``work`` raises (an IdmintError as is; psycopg's mapped as :meth:`run` maps
        them)."""
        if not self._gate.done:
            await self.ready()

        async def transact(conn: psycopg.AsyncConnection[Any]) -> T:
            async def fetch_here(query: str, params: Mapping[str, Any] | None) -> list[tuple[Any, ...]]:
                return await fetch(conn, query, params)

            async with conn.transaction():
                return await work(fetch_here)

        result: T = await self._bounded(doing, limit, transact)
        return result

    async def _run(
        self, doing: str, query: str, params: Mapping[str, Any] | None, limit: float | None
    ) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = await self._bounded(doing, limit, lambda conn: fetch(conn, query, params))
        return rows

    async def _bounded(self, doing: str, limit: float | None, work: Any) -> Any:
        pool = await self.open()
        loop = asyncio.get_running_loop()
        give_up = loop.time() + (limit or self.limit)
        # The pool's wait is never cancelled: on Python 3.11 its asyncio.wait_for loses a cancellation that meets a
        # connection handed over at the same moment, and the cancelled task would run on. It is shielded, and a
        # connection it gets after we were cancelled goes back to the pool.
        getting = asyncio.ensure_future(pool.getconn(timeout=max(0.05, give_up - loop.time())))
        try:
            conn = await asyncio.shield(getting)
        except asyncio.CancelledError:
            getting.add_done_callback(lambda got: _give_back(pool, got))
            raise
        except (psycopg.Error, PoolTimeout) as exc:
            why = self.connect_error if isinstance(exc, PoolTimeout) and self.connect_error is not None else exc
            raise map_error(why, doing, self.where, self._secret) from None
        # No answer in time: the statement is ended under psycopg (its own cancellation would wait on a server that
        # cannot answer); the pool replaces the connection.
        late = f"PostgreSQL at {self.where} did not answer in time (while {doing})"
        task = await answered_in_time(work(conn), conn, give_up, abandon=_abandon, drop=pool.putconn, late=late)
        await pool.putconn(conn)
        try:
            return task.result()
        except psycopg.Error as exc:
            raise map_error(exc, doing, self.where, self._secret) from None
        except asyncio.CancelledError:  # the statement itself was cancelled, not us
            raise BackendUnavailableError(
                f"PostgreSQL at {self.where}: the statement was cancelled (while {doing})"
            ) from None

    async def ready(self) -> None:
        """Make sure the tables exist at :data:`~app.storage.postgres.sql.SCHEMA_VERSION` (creating them when
        absent). Raises BackendUnavailableError when PostgreSQL cannot be used, or its tables are newer than
        this idmint (set up by a newer version)."""
        await self._gate.ensure(
            lambda: self._bounded("reading the schema version", None, self._version),
            lambda: self._bounded("creating the tables", None, self._create),
        )

    async def _version(self, conn: psycopg.AsyncConnection[Any]) -> int | None:
        """The tables' version; None when they are absent (no schema, no table)."""
        try:
            rows = await fetch(conn, self.sql.version, None)
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            return None
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    async def _create(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async with conn.transaction():
            await conn.execute(self.sql.ddl_lock, {"schema": self.schema})
            await conn.execute(self.sql.ddl)


def _give_back(pool: AsyncConnectionPool, got: asyncio.Future[Any]) -> None:
    """Return the connection ``got`` brought (if any) to ``pool``: its asker was cancelled meanwhile."""
    if not got.cancelled() and got.exception() is None:
        asyncio.ensure_future(pool.putconn(got.result()))


async def _abandon(task: asyncio.Task[Any], conn: psycopg.AsyncConnection[Any]) -> None:
    """End ``task``'s statement on ``conn`` at once: shut the connection's socket down under it (reads then see the
    end of the stream, and psycopg fails the statement by itself), wait for the task, then close the connection,
    so that the pool replaces it. The socket is not closed before the task ended: closing it under a running
    statement could hand its file descriptor to another socket while psycopg still waits on it. The connection is
    closed even when the task had already finished (we were cancelled just as it did): its socket is shut down, and
    the pool, seeing it idle, would hand it to the next caller, whose statement would fail."""
    with contextlib.suppress(OSError, psycopg.Error):
        sock = socket.socket(fileno=conn.pgconn.socket)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.detach()
    done, _ = await asyncio.wait({task}, timeout=ABANDON_WAIT_S)
    if not done:  # not woken by the shutdown: psycopg's own cancellation (bounded by its timeouts)
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)  # its error (the statement we gave up) is ours to drop
    with contextlib.suppress(OSError, psycopg.Error):
        await conn.close()


async def fetch(
    conn: psycopg.AsyncConnection[Any], query: str, params: Mapping[str, Any] | None
) -> list[tuple[Any, ...]]:
    """Run one statement on ``conn`` (inside :meth:`Database.transaction`'s ``work``): its rows, [] for none."""
    cursor = await conn.execute(query, params)
    return await cursor.fetchall() if cursor.description is not None else []
