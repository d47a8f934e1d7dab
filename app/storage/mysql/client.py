"""The process's MySQL/MariaDB connection pools (:class:`Database`, on aiomysql), every statement on them bounded in
time, and the one table from the server's error codes to the project's (:data:`ERRORS`, read by :func:`map_error`).

Two pools per process, as PostgreSQL's: the lease's (:data:`LEASE_POOL_SIZE` connection: renewals, claims, marks,
registrations, fleet records, revokes) and the stores' (``IDMINT_MYSQL_POOL_SIZE`` connections: sequences, whose
updates wait on a row lock, and the ledger), so a sequence update waiting on another replica's lock never holds
the connection a renewal needs. A pool is a bounded set of connections made on demand: a statement that gets none
in time, or whose connection cannot be opened within ``IDMINT_MYSQL_CONNECT_TIMEOUT``, raises
BackendUnavailableError naming why at once (wrong password, unknown database, refused, unreachable), and the next
statement tries again. Each connection is set up with READ COMMITTED transactions (whatever the server's
``transaction_isolation``), UTC, ``innodb_lock_wait_timeout`` and the server-side statement limit
(``max_statement_time`` on MariaDB, ``max_execution_time`` on MySQL, for reads) from
``IDMINT_MYSQL_STATEMENT_TIMEOUT``. A server that does not answer at all (stalled: SIGSTOP, a dead network) is met
by a client-side limit as well: a statement whose answer has not come within the limit has its connection's
transport aborted under it (the connection is dropped, never reused) and raises BackendUnavailableError at once.

The URL is a secret: it is parsed once (:func:`describe`), and only ``mysql://user@host:port/database`` (no
password) is ever shown, in logs, ``/readyz``, ``/v1/fleet`` or errors; error texts are scrubbed of the password.

The tables are created at the first use when absent (:meth:`Database.ready`), under ``GET_LOCK`` so that replicas
starting together do not race; a database whose tables are newer than this idmint is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlsplit

import aiomysql
import pymysql
from pymysql.constants import CLIENT

from app.errors import BackendUnavailableError, ConfigError, NotReadyError
from app.storage.mysql.sql import SCHEMA_VERSION, Each, Lock, Rows, Script, Statement, Statements
from app.storage.tables.db import Fetch, SchemaGate, answered_in_time

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger("idmint.storage.mysql")

T = TypeVar("T")

# The server's error code (or the client's, 2xxx) -> (what the server did, our error class). The one table of
# MySQL errors; nothing is told apart by message text.
ERRORS: dict[int | None, tuple[str, type[NotReadyError]]] = {
    None: ("is unreachable or refused the connection", BackendUnavailableError),
    2002: ("is unreachable or refused the connection", BackendUnavailableError),
    2003: ("is unreachable or refused the connection", BackendUnavailableError),
    2005: ("is unreachable (unknown host)", BackendUnavailableError),
    2006: ("is unreachable (connection lost)", BackendUnavailableError),
    2013: ("is unreachable (connection lost)", BackendUnavailableError),
    1045: ("rejected our credentials", BackendUnavailableError),
    1044: ("refused: permission denied", BackendUnavailableError),
    1142: ("refused: permission denied", BackendUnavailableError),
    1143: ("refused: permission denied", BackendUnavailableError),
    1227: ("refused: permission denied", BackendUnavailableError),
    1049: ("has no such database", BackendUnavailableError),
    1146: ("has no idmint tables (run `idmint storage sql --dialect mysql`)", BackendUnavailableError),
    1290: ("is read-only (a replica, or read_only)", BackendUnavailableError),
    1792: ("is read-only (a read-only transaction)", BackendUnavailableError),
    1836: ("is read-only (a replica, or read_only)", BackendUnavailableError),
    1205: ("did not answer in time (innodb_lock_wait_timeout)", BackendUnavailableError),
    1213: ("aborted the statement on a deadlock", BackendUnavailableError),
    1040: ("has no connection slot free (max_connections reached)", BackendUnavailableError),
    1203: ("has no connection slot free (max_user_connections reached)", BackendUnavailableError),
    1969: ("did not answer in time (max_statement_time)", BackendUnavailableError),
    3024: ("did not answer in time (max_execution_time)", BackendUnavailableError),
    1317: ("interrupted the statement", BackendUnavailableError),
    1053: ("is shutting down", BackendUnavailableError),
    1927: ("is shutting down (connection killed)", BackendUnavailableError),
}
FALLBACK = ("failed", BackendUnavailableError)
SLACK_S = 0.5
"""The client-side limit of a statement: the server's statement limit plus this (answers in flight)."""
ABANDON_WAIT_S = 1.0
"""Seconds a statement whose transport was aborted under it gets to fail by itself."""
LEASE_POOL_SIZE = 1
"""Connections of the lease's own pool (:func:`app.storage.mysql.open_mysql`)."""
DATABASE_NAME = re.compile(r"[A-Za-z0-9_$]{1,64}")


def map_error(exc: BaseException, doing: str, where: str, secret: str | None = None) -> NotReadyError:
    """The project's error for ``exc`` (PyMySQL's, or a lost connection), per :data:`ERRORS`; ``doing`` says what
    we were doing, ``where`` names the server (:func:`describe`); ``secret`` (the password) never appears."""
    code = exc.args[0] if isinstance(exc, pymysql.err.MySQLError) and exc.args else None
    if not isinstance(code, int):
        code = None
    lost = isinstance(exc, (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError, EOFError))
    what, kind = ERRORS.get(code) or (ERRORS[None] if lost and code is None else FALLBACK)
    detail = " ".join(str(exc).split())
    if secret:
        detail = detail.replace(secret, "***")
    return kind(f"MySQL at {where} {what} (while {doing}): {detail}"[:600])


def describe(url: str) -> tuple[dict[str, Any], str]:
    """``(connection arguments, mysql://user@host:port/database)`` for a ``mysql://user:password@host:port/db``
    URL (``mariadb://`` too; user and password percent-encoded). Raises ConfigError (without quoting ``url``: it
    holds the password) when it is not one."""
    problem = (
        "IDMINT_MYSQL_URL is not mysql://user:password@host:port/database (a database name of letters, digits, _ "
        "and $); it is not shown: it may hold a password"
    )
    try:
        parts = urlsplit(url)
        port = parts.port or 3306
    except ValueError:
        raise ConfigError(problem) from None
    database = unquote(parts.path.lstrip("/"))
    if parts.scheme not in ("mysql", "mariadb") or not parts.hostname or not DATABASE_NAME.fullmatch(database):
        raise ConfigError(problem)
    user = unquote(parts.username) if parts.username else "root"
    args = {
        "host": parts.hostname,
        "port": port,
        "user": user,
        "password": unquote(parts.password) if parts.password else "",
        "db": database,
    }
    return args, f"mysql://{user}@{parts.hostname}:{port}/{database}"


class Database:
    """One bounded pool (``settings.mysql_*``; ``size`` connections, default ``IDMINT_MYSQL_POOL_SIZE``) and the
    statements of the URL's database. Connects on demand; closed by :meth:`close`. Never raises at construction
    for an unreachable server or wrong credentials: statements raise BackendUnavailableError naming why."""

    store = "mysql"
    title = "MySQL"
    log = log

    def __init__(self, settings: Settings, size: int | None = None) -> None:
        if settings.mysql_url is None:
            raise ConfigError("the MySQL backend needs IDMINT_MYSQL_URL")
        self._args, self.where = describe(settings.mysql_url.get_secret_value())
        self._secret: str | None = self._args["password"] or None
        self.schema: str = self._args["db"]
        self.sql = Statements(self.schema)
        self.size = settings.mysql_pool_size if size is None else size
        self.statement_timeout = float(settings.mysql_statement_timeout)
        self.connect_timeout = float(settings.mysql_connect_timeout)
        self.limit = self.statement_timeout + SLACK_S
        """Seconds one statement may take, as the client sees it (a connection's wait and opening included)."""
        self._idle: list[aiomysql.Connection] = []
        self._slots: asyncio.Semaphore | None = None
        self._gate = SchemaGate(SCHEMA_VERSION, f"MySQL database {self.schema}", log)
        self._closed = False
        self.mariadb: bool | None = None
        """Whether the server is MariaDB (its statement limit differs); None before the first connection."""

    # -- connections -----------------------------------------------------------------------------------------
    async def _connect(self, timeout: float) -> aiomysql.Connection:
        async with asyncio.timeout(timeout):
            conn = await aiomysql.connect(
                **self._args,
                connect_timeout=max(1.0, min(self.connect_timeout, timeout)),
                autocommit=True,
                charset="utf8mb4",
                client_flag=CLIENT.FOUND_ROWS,
            )
        try:
            version = conn.get_server_info()
            self.mariadb = "mariadb" in version.lower()
            lock_wait = max(1, math.ceil(self.statement_timeout))
            async with conn.cursor() as cur:
                await cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                await cur.execute("SET SESSION time_zone = '+00:00'")
                await cur.execute(f"SET SESSION innodb_lock_wait_timeout = {lock_wait}")
                if self.mariadb:
                    await cur.execute(f"SET SESSION max_statement_time = {self.statement_timeout:.3f}")
                else:
                    await cur.execute(f"SET SESSION max_execution_time = {int(self.statement_timeout * 1000)}")
        except BaseException:
            conn.close()
            raise
        return conn

    async def _acquire(self, give_up: float) -> aiomysql.Connection:
        if self._closed:
            raise BackendUnavailableError("the MySQL connection pool is closed")
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.size)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(max(0.05, give_up - loop.time())):
                await self._slots.acquire()
        except TimeoutError:
            raise BackendUnavailableError(f"MySQL at {self.where} gave no connection in time") from None
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        try:
            return await self._connect(max(0.05, give_up - loop.time()))
        except BaseException:
            self._slots.release()
            raise

    def _release(self, conn: aiomysql.Connection, reuse: bool) -> None:
        if reuse and not self._closed and not conn.closed:
            self._idle.append(conn)
        else:
            _drop(conn)
        if self._slots is not None:
            self._slots.release()

    async def close(self) -> None:
        """Close every idle connection (one in use is dropped when it comes back). Never raises."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            _drop(conn)

    # -- statements ------------------------------------------------------------------------------------------
    async def run(
        self, doing: str, query: Statement, params: Mapping[str, Any] | None = None, limit: float | None = None
    ) -> list[tuple[Any, ...]]:
        """Run one statement (a :class:`~app.storage.mysql.sql.Script`, ``Each``, ``Rows`` or ``Lock``: in one
        transaction) and return its rows (see :mod:`app.storage.tables.db`). Bounded by ``limit`` seconds (default
        :attr:`limit`) for the connection and the answer together. Raises the mapped NotReadyError naming
        ``doing``."""
        if not self._gate.done:
            await self.ready()
        if isinstance(query, str):
            rows: list[tuple[Any, ...]] = await self._bounded(doing, limit, lambda conn: _fetch(conn, query, params))
            return rows
        found: list[tuple[Any, ...]] = await self._bounded(
            doing, limit, lambda conn: _transact(conn, lambda f: f(query, params))
        )
        return found

    async def transaction(self, doing: str, work: Callable[[Fetch], Awaitable[T]], limit: float | None = None) -> T:
        """Run ``work(fetch)`` inside one READ COMMITTED transaction (committed when it returns, rolled back when it
        raises) and return what it returned. Bounded as :meth:`run` is, for the whole transaction: past it the
        connection is cut (the server rolls the transaction back) and BackendUnavailableError is raised; an answer
        to COMMIT that is lost leaves it unknown whether it applied. Raises what ``work`` raises (an IdmintError as
        is; PyMySQL's mapped as :meth:`run` maps them)."""
        if not self._gate.done:
            await self.ready()
        result: T = await self._bounded(doing, limit, lambda conn: _transact(conn, work))
        return result

    async def _bounded(self, doing: str, limit: float | None, work: Callable[[Any], Awaitable[Any]]) -> Any:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + (limit or self.limit)
        try:
            conn = await self._acquire(give_up)
        except (pymysql.err.MySQLError, OSError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError):
                raise BackendUnavailableError(
                    f"MySQL at {self.where} did not accept a connection in time (while {doing})"
                ) from None
            raise map_error(exc, doing, self.where, self._secret) from None
        late = f"MySQL at {self.where} did not answer in time (while {doing})"
        task = await answered_in_time(work(conn), conn, give_up, abandon=_abandon, drop=self._discard, late=late)
        failure = task.exception()
        if failure is None:
            self._release(conn, reuse=True)
            return task.result()
        lost = isinstance(failure, (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError, EOFError))
        self._release(conn, reuse=not lost)
        if isinstance(failure, (pymysql.err.MySQLError, OSError, EOFError)):
            raise map_error(failure, doing, self.where, self._secret) from None
        raise failure

    async def _discard(self, conn: aiomysql.Connection) -> None:
        self._release(conn, reuse=False)

    async def ready(self) -> None:
        """Make sure the tables exist at :data:`~app.storage.mysql.sql.SCHEMA_VERSION` (creating them when absent,
        under ``GET_LOCK``). Raises BackendUnavailableError when MySQL cannot be used, or its tables are newer than
        this idmint."""
        await self._gate.ensure(
            lambda: self._bounded("reading the schema version", None, self._version),
            lambda: self._bounded("creating the tables", 2 * self.limit + self.connect_timeout, self._create),
        )

    async def _version(self, conn: aiomysql.Connection) -> int | None:
        try:
            rows = await _fetch(conn, self.sql.version, None)
        except pymysql.err.ProgrammingError as exc:
            if exc.args and exc.args[0] == 1146:  # no such table
                return None
            raise
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    async def _create(self, conn: aiomysql.Connection) -> None:
        name = f"idmint/{self.schema}/ddl"
        got = await _fetch(conn, self.sql.ddl_lock, {"name": name, "wait": max(1, math.ceil(self.limit))})
        if not got or got[0][0] != 1:
            raise BackendUnavailableError(f"MySQL at {self.where}: another node holds the table-creation lock")
        try:
            for statement in self.sql.ddl_statements:
                await _fetch(conn, statement, None)
        finally:
            await _fetch(conn, self.sql.ddl_unlock, {"name": name})


class Cursor(aiomysql.Cursor):  # type: ignore[misc]
    """aiomysql's cursor without its ``SHOW WARNINGS`` round trip after a statement with warnings: the warnings
    of these statements are expected (``INSERT IGNORE`` of a row that exists) and carry no error."""

    async def _show_warnings(self, conn: Any) -> None:
        return None


def _drop(conn: aiomysql.Connection) -> None:
    """Close ``conn`` at once (its transport aborted: nothing waits on a server that may not answer)."""
    writer = getattr(conn, "_writer", None)
    with contextlib.suppress(Exception):
        if writer is not None:
            writer.transport.abort()
    with contextlib.suppress(Exception):
        conn.close()


async def _abandon(task: asyncio.Task[Any], conn: aiomysql.Connection) -> None:
    """End ``task``'s statement on ``conn`` at once: abort the transport under it (its read fails), wait for the
    task (cancelled if the abort did not wake it)."""
    _drop(conn)
    done, _ = await asyncio.wait({task}, timeout=ABANDON_WAIT_S)
    if not done:
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)  # its error (the statement we gave up) is ours to drop


def _expand(query: str, params: Mapping[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
    """``query`` and ``params`` for PyMySQL, which binds scalars only: a list parameter ``%(name)s`` (``IN
    %(name)s``) becomes ``(%(name_0)s, %(name_1)s, ...)``, each element bound; an empty list ``(NULL)`` (no
    match)."""
    if params is None:
        return query, None
    out: dict[str, Any] = {}
    for key, value in params.items():
        if not isinstance(value, list):
            out[key] = value
            continue
        names = [f"{key}_{i}" for i in range(len(value))]
        out.update(zip(names, value, strict=True))
        query = query.replace(f"%({key})s", "(" + (", ".join(f"%({n})s" for n in names) or "NULL") + ")")
    return query, out


async def _execute(cur: Any, query: str, params: Mapping[str, Any] | None) -> None:
    await cur.execute(*_expand(query, params))


async def _fetch(conn: aiomysql.Connection, query: Statement, params: Mapping[str, Any] | None) -> list[Any]:
    """Run one statement on ``conn``: its rows; for a write, ``[(matched rows,)]``, or ``[]`` for none."""
    async with conn.cursor(Cursor) as cur:
        if isinstance(query, Script):
            for step in query.steps[:-1]:
                await _execute(cur, step, params)
                if cur.rowcount <= 0:
                    return []
            query = query.steps[-1]
        elif isinstance(query, Each):
            given = dict(params or {})
            for values in zip(*(given[name] for name in query.over), strict=True):
                await _execute(cur, query.sql, {**given, **dict(zip(query.over, values, strict=True))})
            return []
        elif isinstance(query, Rows):
            given = dict(params or {})
            rows = list(zip(*(given.pop(name) for name in query.over), strict=True))
            if not rows:
                return []
            parts = []
            for i, values in enumerate(rows):
                part = query.row
                for name, value in zip(query.over, values, strict=True):
                    part = part.replace(f"%({name})s", f"%({name}_{i})s")
                    given[f"{name}_{i}"] = value
                parts.append(part)
            await _execute(cur, query.sql.replace("{rows}", ", ".join(parts)), given)
            return [(cur.rowcount,)] if cur.rowcount > 0 else []
        elif isinstance(query, Lock):
            await _execute(cur, query.select, params)
            if not await cur.fetchall():
                await _execute(cur, query.create, params)
            return []
        await _execute(cur, query, params)
        if cur.description is None:
            return [(cur.rowcount,)] if cur.rowcount > 0 else []
        return list(await cur.fetchall())


async def _transact(conn: aiomysql.Connection, work: Callable[[Fetch], Awaitable[T]]) -> T:
    async def fetch(query: Any, params: Mapping[str, Any] | None) -> list[tuple[Any, ...]]:
        return await _fetch(conn, query, params)

    await conn.begin()
    try:
        result = await work(fetch)
    except BaseException:
        with contextlib.suppress(Exception):
            await conn.rollback()
        raise
    await conn.commit()
    return result
