"""Storage: every backend idmint keeps state in, one folder each, behind one interface family.

The interfaces (what the code above storage may import):

* :mod:`app.storage.base` -- the :class:`~app.storage.base.Storage` bundle :func:`open_storage` returns, and
  :class:`~app.storage.base.Capabilities` (what a backend can do: asked instead of its name);
* :mod:`app.storage.lease` -- claims of node identities (:class:`~app.storage.lease.LeaseBackend`), their
  high-water marks, the fleet ID and member tokens, revoke; :mod:`app.storage.draw` -- the identity draw every
  backend uses;
* :mod:`app.storage.ledger` -- the claim ledger's records and their store (:class:`~app.storage.ledger.LedgerStore`);
* :mod:`app.storage.sequences` -- sequence records and their store (:class:`~app.storage.sequences.SequenceStore`);
* :mod:`app.storage.history` -- the identity of the store's history, checked before it is trusted
  (:class:`~app.storage.history.HistoryGuard`); :mod:`app.storage.fence` -- what ``idmint storage fence`` does.

The backends (imported only here, by :func:`open_storage`):

* :mod:`app.storage.embedded` -- one machine: file locks and files under the state directory;
* :mod:`app.storage.etcd` -- any number of replicas: etcd's v3 JSON gateway (its client included);
* :mod:`app.storage.postgres` -- any number of replicas: PostgreSQL tables (psycopg 3, one connection pool).
* :mod:`app.storage.mysql` -- any number of replicas: MySQL 8 / MariaDB tables (aiomysql), the same logic
  (:mod:`app.storage.tables`).
"""

from __future__ import annotations

from app.metrics import Metrics
from app.schemes.base import Clock
from app.settings import Settings
from app.storage.base import Capabilities, Storage

__all__ = ["Capabilities", "Storage", "mysql_ddl", "open_storage", "postgres_ddl"]


def open_storage(settings: Settings, clock: Clock, metrics: Metrics | None = None) -> Storage:
    """The stores of the one backend ``settings`` name (:func:`_open_backend`), its history guarded
    (:class:`~app.storage.history.HistoryGuard` as :attr:`Storage.history`; the sequence store behind it)."""
    from app.storage.history import TIMELINE, GuardedSequenceStore, HistoryGuard

    storage = _open_backend(settings, clock, metrics)
    accept = frozenset({TIMELINE}) if settings.storage_accept_timeline_change else frozenset()
    storage.history = HistoryGuard(storage.leases, accept, interval=settings.history_check_interval)
    storage.sequences = GuardedSequenceStore(storage.sequences, storage.history)
    return storage


def _open_backend(settings: Settings, clock: Clock, metrics: Metrics | None) -> Storage:
    """The stores of the one backend ``settings`` name: etcd when ``IDMINT_ETCD_ENDPOINTS`` is set, PostgreSQL when
    ``IDMINT_POSTGRES_URL`` is, MySQL when ``IDMINT_MYSQL_URL`` is (the settings refuse two), else the embedded
    backend in ``IDMINT_STATE_DIR``.
    ``clock``: the node's clock (ns since the epoch; the ledger dates records with it); ``metrics``: lease
    renewals and deadlines are counted there. Connects lazily (each store when started).
    Raises ConfigError for unusable settings."""
    if settings.etcd_endpoints:
        from app.storage.etcd import open_etcd

        return open_etcd(settings, metrics, clock)
    if settings.postgres_url is not None:
        from app.storage.postgres import open_postgres

        return open_postgres(settings, metrics, clock)
    if settings.mysql_url is not None:
        from app.storage.mysql import open_mysql

        return open_mysql(settings, metrics, clock)
    from app.storage.embedded import open_embedded

    return open_embedded(settings, clock)


def mysql_ddl(database: str) -> str:
    """The SQL that creates the MySQL/MariaDB backend's tables in ``database`` (``idmint storage sql --dialect
    mysql``)."""
    from app.storage.mysql.sql import ddl

    return ddl(database)


def postgres_ddl(schema: str) -> str:
    """The SQL that creates the PostgreSQL backend's tables in ``schema`` (``idmint storage sql``): what the
    backend runs itself at start when they are absent, for teams whose DDL goes through review."""
    from app.storage.postgres.sql import ddl

    return ddl(schema)
