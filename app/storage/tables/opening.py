"""The :class:`~app.storage.base.Storage` bundle of a table backend: the lease backend on a pool of its own, the
ledger, sequences and backfill marks on the other, so that no sequence update waiting on a lock delays a renewal."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from typing import Any

from app import __version__
from app.storage.base import Capabilities, Storage
from app.storage.lease import LeaseBackend
from app.storage.tables.backfill import TableBackfillStore
from app.storage.tables.db import Database
from app.storage.tables.ledger import TableLedgerStore
from app.storage.tables.sequences import TableSequenceStore

CAPABILITIES = Capabilities(claims_expire=True, one_host=False, can_revoke=True)


def owner_record() -> dict[str, Any]:
    """This process as a lease row's ``owner``: host, pid, idmint's version, when it started (UTC, ms)."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "version": __version__,
        "started_at": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }


def table_storage(
    backend: LeaseBackend,
    lease_db: Database,
    db: Database,
    ledger: TableLedgerStore,
    sequences: TableSequenceStore,
    backfill: TableBackfillStore,
) -> Storage:
    """The bundle: ``backend`` on ``lease_db``, ``ledger``, ``sequences`` and ``backfill`` (the backfill marks) on
    ``db``; closing closes both pools."""

    async def closing() -> None:
        await lease_db.close()
        await db.close()

    return Storage(db.store, CAPABILITIES, backend, ledger, sequences, closing=closing, backfill=backfill)
