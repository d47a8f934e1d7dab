"""The MySQL/MariaDB backend: node identities leased from tables in a MySQL 8 or MariaDB 10.6+ database, for fleets
whose state lives there (teams leaving Meituan Leaf or Didi Tinyid), and the stores beside them. It carries what
the PostgreSQL backend carries, with the same tables, rules and fail-closed deadline: the logic is shared
(:mod:`app.storage.tables`), and this package gives only the dialect.

Files: :mod:`~app.storage.mysql.sql` (every table and statement: the DDL ``idmint storage sql --dialect mysql``
prints), :mod:`~app.storage.mysql.client` (the two bounded pools on aiomysql, statements bounded in time, the one
error table), :mod:`~app.storage.mysql.history` (the history facts), :mod:`~app.storage.mysql.backend` (the lease
backend), :mod:`~app.storage.mysql.leaf` (the importer of Leaf's ``leaf_alloc``).

Times: every expiry is the database's ``UTC_TIMESTAMP(6)`` plus the TTL, compared with the database's clock; no
node's clock decides who owns an identity. Writes whose result a caller needs run as a guarded ``UPDATE`` and a
``SELECT`` in one transaction (MySQL has no ``RETURNING``). A sequence update locks its name's row in
``sequence_locks`` (``SELECT ... FOR UPDATE``) for its READ COMMITTED transaction.

Driver: aiomysql (aio-libs), on PyMySQL: pure Python (one wheel for every platform), PyMySQL's parameter quoting
with named parameters (``%(name)s``, the style the shared statements use), and its asyncio transport, which the
client aborts under a stalled statement.
"""

from __future__ import annotations

from app.metrics import Metrics
from app.schemes.base import Clock
from app.settings import Settings
from app.storage.base import Storage
from app.storage.mysql.backend import mysql_backend
from app.storage.mysql.client import LEASE_POOL_SIZE, Database
from app.storage.tables.backfill import TableBackfillStore
from app.storage.tables.ledger import TableLedgerStore
from app.storage.tables.opening import owner_record, table_storage
from app.storage.tables.sequences import TableSequenceStore

__all__ = ["open_mysql"]


def open_mysql(settings: Settings, metrics: Metrics | None, clock: Clock) -> Storage:
    """The stores on MySQL/MariaDB (``settings.mysql_*``), closed by :meth:`Storage.close`: the lease backend on a
    pool of its own (:data:`~app.storage.mysql.client.LEASE_POOL_SIZE` connection), the ledger, sequences and
    backfill marks on the other (``IDMINT_MYSQL_POOL_SIZE``). ``clock``: the node's (ns since the epoch).
    Connects on demand, never raising for an unreachable or refusing server. Raises ConfigError for a URL that is not ``mysql://...``."""
    db = Database(settings)
    lease_db = Database(settings, size=LEASE_POOL_SIZE)
    backend = mysql_backend(settings, lease_db, metrics, owner_record())
    stores = (TableLedgerStore(db, clock), TableSequenceStore(db, settings.max_sequences), TableBackfillStore(db))
    return table_storage(backend, lease_db, db, *stores)
