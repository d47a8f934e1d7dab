"""What a SQL dialect's database gives the table backends (:mod:`app.storage.tables`).

Rows: every statement returns a list of tuples. A statement that returns rows (``SELECT``, or PostgreSQL's
``RETURNING``) returns them; a guarded write that changed (or, on MySQL, matched) no row returns ``[]``, so a
caller asks ``if rows`` whichever dialect ran it. A count a caller reads is ``rows[0][0]`` when ``rows`` is not
empty, 0 otherwise.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

Fetch = Callable[[Any, "Mapping[str, Any] | None"], Awaitable[list[tuple[Any, ...]]]]
"""Run one statement inside a transaction: ``await fetch(statement, params)`` -> its rows."""


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
