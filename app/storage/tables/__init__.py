"""Backends on SQL tables (PostgreSQL, MySQL/MariaDB): the leases, claims, fleet rows, claim ledger and sequences
written once over a :class:`~app.storage.tables.db.Database`, each dialect supplying only its connection pool and
its statements (``app/storage/postgres/sql.py``, ``app/storage/mysql/sql.py``).

Files: :mod:`~app.storage.tables.db` (what a dialect's database provides), :mod:`~app.storage.tables.session`
(one lease row kept alive), :mod:`~app.storage.tables.claim` (one claim row: its generation, loss and mark
writes), :mod:`~app.storage.tables.claimer` (the pool read, the draw, the claiming ``UPDATE``, the lost-row rule),
:mod:`~app.storage.tables.records` (registrations, the fleet ID, fleet records, a peer's lease, the held counts),
:mod:`~app.storage.tables.backend` (the lease's upkeep on :mod:`app.storage.expiring`),
:mod:`~app.storage.tables.revoke` (revoking another node's claim), :mod:`~app.storage.tables.ledger` (the claim ledger),
:mod:`~app.storage.tables.sequences` (sequences), :mod:`~app.storage.tables.backfill` (backfill marks),
:mod:`~app.storage.tables.opening` (the :class:`Storage` bundle).

The tables and the safety argument are the PostgreSQL backend's docstring (:mod:`app.storage.postgres`); a dialect
keeps every rule stated there, in its own SQL.
"""
