"""The MySQL/MariaDB lease backend: :class:`~app.storage.tables.backend.TableBackend` on MySQL's lease pool and its
history facts (see :mod:`app.storage.mysql`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from app.metrics import Metrics
from app.settings import Settings
from app.storage.mysql.client import Database
from app.storage.mysql.history import HistoryFacts
from app.storage.tables.backend import TableBackend
from app.storage.tables.claim import TableClaim as MysqlClaim

__all__ = ["MysqlBackend", "MysqlClaim"]


class MysqlBackend(TableBackend):
    """MySQL/MariaDB leases for node identities; ``db`` is the lease's own pool."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        owner: dict[str, Any] | None = None,
    ) -> None:
        facts = HistoryFacts(db).read
        sizes = (settings.mysql_pool_size, settings.mysql_connect_timeout)
        super().__init__(settings, db, facts, *sizes, metrics, clock, owner)
