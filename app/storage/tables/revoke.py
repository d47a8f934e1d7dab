"""Revoking a stuck claim (``POST /v1/admin/claims/{scheme}/{identity}/revoke``) without letting two nodes issue:
the etcd backend's procedure (:mod:`app.storage.etcd.revoke`) on a ``claims`` row.

1. The row is **marked revoked** until now + TTL (the database's clock), with who revoked it, by one ``UPDATE``
   guarded by its lease and generation. Nobody may claim it while the revoke is pending; the owner's mark writes
   are refused from then on (they require no revoke); the owner's next renewal (within TTL/3) reads the mark and
   stops issuing (:data:`~app.storage.lease.REVOKED_REASON`).
2. The owner's **acknowledgement** is its claim ledger record ending (written right after it stopped). Once seen,
   the revoker frees the row: the identity is free.
3. Without an acknowledgement (the owner is partitioned, wedged or gone) the revoke **runs out** at now + TTL and
   the row is claimable from then on: by then the owner has failed closed on its own deadline (its last renewal,
   sent before the revoke, plus the TTL minus the margin).

The next holder reads the mark the owner last recorded and issues above it, as after any handover.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from app.errors import NotClaimedError, RevokeRefusedError
from app.schemes.pool import IdentityPool
from app.storage.tables.db import Database, as_json

ACK_POLL_S = 0.05
"""How often the revoker reads the owner's ledger records while it waits for the acknowledgement."""


async def revoke_claim(db: Database, ttl: int, pool: IdentityPool, identity: int, by: dict[str, Any]) -> dict[str, Any]:
    """Revoke ``identity`` of ``pool`` (see the module docstring); ``ttl``: the fleet's lease TTL (seconds); ``by``:
    the revoking node's owner record.

    Returns ``{"scheme", "kind", "identity", "owner", "lease", "owner_stopped", "freed", "lease_ttl_s",
    "seconds"}``: ``freed`` False means the revoke frees it by itself within ``lease_ttl_s``. Raises
    NotClaimedError when nobody holds it, RevokeRefusedError when a revoke is pending already or the row changed
    under us, NotReadyError when the database cannot be used."""
    started = time.monotonic()
    sql = db.sql
    where = {"pool": pool.key_prefix, "identity": identity}
    name = f"{pool.scheme} {pool.kind} {identity}"
    rows = await db.run(f"reading {name}", sql.revoke_read, where)
    if not rows or not rows[0][3]:
        raise NotClaimedError(f"{name} is not claimed by any node of this fleet")
    lease_id, generation, owner, _, pending_s = rows[0]
    if pending_s > 0:
        raise RevokeRefusedError(f"{name} is being revoked already; it is free in {int(pending_s) + 1} s")
    lease_hex = f"{lease_id:016x}"
    # The owner's ledger records of this claim, open now: one of them ending is its acknowledgement (none open:
    # wait out the TTL).
    records = await db.run(
        f"reading the ledger of {name}",
        sql.open_records,
        {"scheme": pool.scheme, "identity": identity, "lease": lease_hex},
    )
    open_ids = [str(r[0]) for r in records]
    marked = await db.run(
        f"revoking {name}",
        sql.revoke_mark,
        {**where, "lease": lease_id, "generation": generation, "by": json.dumps(by), "ttl": ttl},
    )
    if not marked:
        raise RevokeRefusedError(f"{name} changed while being revoked; try again")
    stopped = bool(open_ids) and await _owner_stopped(db, open_ids, ttl)
    if stopped:
        await db.run(f"freeing {name}", sql.revoke_free, {**where, "generation": generation})
    holder = as_json(owner)
    holder = holder if isinstance(holder, dict) else None
    return {
        "scheme": pool.scheme,
        "kind": pool.kind,
        "identity": identity,
        "owner": holder,
        "lease": lease_hex,
        "owner_stopped": stopped,
        "freed": stopped,
        "lease_ttl_s": ttl,
        "seconds": round(time.monotonic() - started, 3),
    }


async def _owner_stopped(db: Database, open_ids: list[str], ttl: int) -> bool:
    """Wait (at most ``ttl`` s) for one of the owner's ledger records ``open_ids`` to end."""
    deadline = time.monotonic() + ttl
    while time.monotonic() < deadline:  # polls one indexed row per record, bounded by the TTL
        rows = await db.run("reading the owner's ledger records", db.sql.ended_records, {"records": open_ids})
        if rows and rows[0][0]:
            return True
        await asyncio.sleep(ACK_POLL_S)
    return False
