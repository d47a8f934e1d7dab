"""The PostgreSQL lease backend: :class:`~app.storage.tables.backend.TableBackend` on PostgreSQL's pool and its
history facts (see :mod:`app.storage.postgres`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from app.metrics import Metrics
from app.settings import Settings
from app.storage.postgres.claim import PostgresClaim
from app.storage.postgres.client import Database
from app.storage.postgres.history import HistoryFacts
from app.storage.tables.backend import TableBackend

__all__ = ["PostgresBackend", "PostgresClaim"]


class PostgresBackend(TableBackend):
    """PostgreSQL leases for node identities. ``db``: the lease's own pool (no sequence traffic on it); the rest as
    :class:`~app.storage.tables.backend.TableBackend`."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        owner: dict[str, Any] | None = None,
    ) -> None:
        history = HistoryFacts(db).read
        pool_size, connect_timeout = settings.postgres_pool_size, settings.postgres_connect_timeout
        super().__init__(settings, db, history, pool_size, connect_timeout, metrics, clock, owner)
