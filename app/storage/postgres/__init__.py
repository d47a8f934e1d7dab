"""The PostgreSQL backend: node identities leased from PostgreSQL tables, for fleets that run no etcd, and the stores
beside them. It carries what the etcd backend carries, with the same fail-closed deadline.

Files: :mod:`~app.storage.postgres.sql` (every table and statement: the DDL ``idmint storage sql`` prints),
:mod:`~app.storage.postgres.client` (the process's two connection pools, statements bounded in time, the one
error table), :mod:`~app.storage.postgres.history` (the history facts). The logic above the statements (the lease
row kept alive, claims, the lost-row rule, fleet rows, revoke, the ledger, sequences, backfill marks) is shared
with MySQL in :mod:`app.storage.tables`; :mod:`~app.storage.postgres.backend`, ``claim``, ``ledger`` and
``sequences`` name it for PostgreSQL.

Modelled on the etcd backend (:mod:`app.storage.etcd`), with rows for keys:

* **a lease** is a ``leases`` row per process: a random 63-bit ID drawn by the process, its owner, its TTL
  (``IDMINT_LEASE_TTL``) and ``expires_at`` = the database's ``clock_timestamp()`` + TTL, set again by every
  renewal (every TTL/3), one conditional ``UPDATE ... WHERE lease_id = $1 AND expires_at > clock_timestamp()``. No
  row: the lease is lost, for good.
* **a claim** is a ``claims`` row per (pool key, identity), created once and never deleted, taken by one
  conditional ``UPDATE`` that passes only when the row is free (no lease; or its holder's lease expired by the
  database's clock, deleted in the same statement under its row lock so that a renewal in flight cannot revive
  it; or a revoke ran out), no revoke is pending, and the row is older than one TTL (the lost-row rule,
  :mod:`~app.storage.postgres.claimer`). Every claim bumps the row's ``generation``; mark writes and the release
  are guarded by (lease ID, generation), so only the current holder writes.
* **loss**: each renewal returns, from the same snapshot, the claim rows still on the lease; a claim whose row is
  not among them (deleted, lost in a failover, taken) or is being revoked is lost at once (pushed through its
  loss callbacks, as the etcd watch does). No LISTEN is needed: a loss is seen within TTL/3, and the deadline
  bounds the rest (docs/safety.md).
* **marks** live in the claim row (``high_water_mark``, native units): they only rise, except the exact final mark
  written by the release, which may lower our own reservation but never goes below the mark inherited at claim
  time.

The pool key is the identity pool's ``key_prefix`` (e.g. ``pool/0:``, ``idmint/muid/``); this package knows no
scheme. java-uniqueid's ``cluster-id`` key (``allowed_groups_key``) has no PostgreSQL counterpart and is not read.

Fail closed: a claim's :attr:`~app.storage.lease.Claim.deadline` is the ``clock()`` time at which the last
successful renewal (or grant) was *sent*, plus the TTL, minus ``IDMINT_LEASE_SAFETY_MARGIN``; the database cannot
expire the lease before that. A stalled database (no answer) is met by client-side limits on every statement, so
a renewal that cannot finish leaves the deadline to pass: the leased schemes stop within TTL minus margin while
sequences keep answering from their buffers. No clock but the database's decides who owns an identity.
"""

from __future__ import annotations

from app.metrics import Metrics
from app.schemes.base import Clock
from app.settings import Settings
from app.storage.base import Storage
from app.storage.postgres.backend import PostgresBackend
from app.storage.postgres.client import LEASE_POOL_SIZE, Database
from app.storage.postgres.ledger import PostgresLedgerStore
from app.storage.postgres.sequences import PostgresSequenceStore
from app.storage.tables.backfill import TableBackfillStore
from app.storage.tables.opening import CAPABILITIES, owner_record, table_storage

__all__ = ["CAPABILITIES", "open_postgres"]


def open_postgres(settings: Settings, metrics: Metrics | None, clock: Clock) -> Storage:
    """The stores on PostgreSQL (``settings.postgres_*``), closed by :meth:`Storage.close`: the lease backend on a
    pool of its own (:data:`~app.storage.postgres.client.LEASE_POOL_SIZE` connection), the ledger, sequences and
    backfill marks on the other (``IDMINT_POSTGRES_POOL_SIZE``), so that no sequence update waiting on a lock
    delays a renewal.
    ``clock``: the node's (ns since the epoch). Connects lazily, never raising for an unreachable or refusing
    database. Raises ConfigError for a URL libpq cannot parse (without quoting it)."""
    db = Database(settings)
    lease_db = Database(settings, size=LEASE_POOL_SIZE, name="idmint-lease")
    backend = PostgresBackend(settings, lease_db, metrics, owner=owner_record())
    ledger = PostgresLedgerStore(db, clock)
    sequences = PostgresSequenceStore(db, settings.max_sequences)
    return table_storage(backend, lease_db, db, ledger, sequences, TableBackfillStore(db))
