"""The MySQL/MariaDB lease backend: :class:`~app.storage.tables.backend.TableBackend` on MySQL's lease pool and its
history facts (see :mod:`app.storage.mysql`)."""

from __future__ import annotations

from typing import Any

from app.metrics import Metrics
from app.settings import Settings
from app.storage.mysql.client import Database
from app.storage.mysql.history import HistoryFacts
from app.storage.tables.backend import TableBackend

__all__ = ["mysql_backend"]


def mysql_backend(
    settings: Settings, db: Database, metrics: Metrics | None = None, owner: dict[str, Any] | None = None
) -> TableBackend:
    """MySQL/MariaDB leases for node identities: ``db`` is the lease's own pool (no sequence traffic on it);
    ``owner``: this process, as written in its lease row. Start it with ``await backend.start()``."""
    facts = HistoryFacts(db).read
    return TableBackend(
        settings, db, facts, settings.mysql_pool_size, settings.mysql_connect_timeout, metrics, owner=owner
    )
