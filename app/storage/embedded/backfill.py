"""Backfill marks on one machine: a SQLite database in the state directory (:mod:`app.storage.backfill`).

``<state dir>/backfill.sqlite3``, table ``marks (space, identity, tick, high)``; each update is one ``BEGIN
IMMEDIATE`` transaction (SQLite's write lock: every process on the machine sharing the state directory queues on
it), with ``synchronous=FULL`` so a mark is on disk before the IDs above it leave the process. SQLite (the standard
library's ``sqlite3``) runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from app.errors import BackendUnavailableError
from app.storage.backfill import BackfillStore, MarkChange

T = TypeVar("T")

DATABASE_NAME = "backfill.sqlite3"
BUSY_TIMEOUT_S = 10.0
"""How long an update waits on another process's write lock before giving up (503)."""
SETUP_RETRY_S = 0.01
"""Pause between tries of opening the database while another connection holds it (only while opening)."""
SCHEMA = """
CREATE TABLE IF NOT EXISTS marks (
    space     TEXT NOT NULL,
    identity  INTEGER NOT NULL,
    tick      INTEGER NOT NULL,
    high      INTEGER NOT NULL,
    PRIMARY KEY (space, identity, tick)
) WITHOUT ROWID
"""


class EmbeddedBackfillStore(BackfillStore):
    """Marks in ``state_dir/backfill.sqlite3``."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / DATABASE_NAME
        self._local = threading.local()

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            give_up = time.monotonic() + BUSY_TIMEOUT_S
            while True:  # switching to WAL is not retried by SQLite's busy handler: another opener holds the lock
                try:
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute("PRAGMA synchronous=FULL")
                    conn.execute(SCHEMA)
                    break
                except sqlite3.OperationalError as exc:
                    if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > give_up:
                        conn.close()
                        raise
                    time.sleep(SETUP_RETRY_S)
            self._local.conn = conn
        return conn

    def _update(self, space: str, identity: int, ticks: Sequence[int], change: MarkChange[T]) -> T:
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            snapshot: dict[int, int] = {}
            for start in range(0, len(ticks), 500):
                part = list(ticks[start : start + 500])
                marks = ",".join("?" * len(part))
                rows = conn.execute(
                    f"SELECT tick, high FROM marks WHERE space = ? AND identity = ? AND tick IN ({marks})",
                    (space, identity, *part),
                ).fetchall()
                snapshot.update((int(tick), int(high)) for tick, high in rows)
            writes, result = change(snapshot)
            conn.executemany(
                "INSERT INTO marks (space, identity, tick, high) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (space, identity, tick) DO UPDATE SET high = max(high, excluded.high)",
                [(space, identity, tick, high) for tick, high in writes.items()],
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result

    async def update(self, space: str, identity: int, ticks: Sequence[int], change: MarkChange[T]) -> T:
        try:
            return await asyncio.to_thread(self._update, space, identity, ticks, change)
        except sqlite3.Error as exc:
            raise BackendUnavailableError(
                f"backfill marks in {self.path} cannot be used: {exc}", retry_after=2
            ) from exc
