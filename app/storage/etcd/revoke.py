"""Revoking a stuck claim (``POST /v1/admin/claims/{scheme}/{identity}/revoke``) without letting two nodes issue.

Deleting the claim key would free the identity at once, before its owner heard of it. Instead, in order:

1. The claim key is **overwritten** (one transaction guarded by its mod revision) with a value that begins with
   :data:`~app.storage.etcd.keys.REVOKED_MARK`, on a fresh *guard* lease of the fleet's TTL. The key still exists, so
   nobody can claim the identity (claims need ``CreateRevision == 0``). The owner's watch reports the overwrite
   (:data:`~app.storage.lease.REVOKED_REASON`): it stops issuing at once, and no longer raises the high-water mark
   (mark writes compare the claim key's mod revision, which just changed).
2. The owner's **acknowledgement** is its claim ledger record ending (written right after it stopped). Once seen,
   the guard lease is revoked, which deletes the key: the identity is free.
3. Without an acknowledgement (the owner is partitioned, wedged or gone) the guard lease **expires** after one TTL:
   by then the owner has failed closed on its own deadline (a watch it cannot confirm freezes its deadline; a
   keepalive it cannot send ends its lease), so the identity is free only once it cannot issue.

The next holder reads the mark the owner last recorded and issues above it, as after any handover.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from app.errors import NotClaimedError, RevokeRefusedError
from app.schemes.pool import IdentityPool
from app.storage.etcd import keys
from app.storage.etcd.client import EtcdCallError, EtcdClient, compare, map_error, prefix_end, put

OVERWRITE_ATTEMPTS = 5
"""Tries at overwriting the claim key: the owner's own mark writes rewrite it (so its mod revision moves) as often as
every mark interval under load; a key that changed owner is not retried."""
ACK_POLL_S = 0.05
"""How often the revoker reads the owner's ledger record while it waits for the acknowledgement."""
LEDGER_CLAIMS = "idmint/ledger/claims/"
"""Where :mod:`app.storage.etcd.ledger` keeps claim records (``<scheme>/<identity>/<record ID>``)."""


async def revoke_claim(
    client: EtcdClient, ns: str, ttl: int, pool: IdentityPool, identity: int, by: dict[str, Any]
) -> dict[str, Any]:
    """Revoke ``identity`` of ``pool`` (see the module docstring) through ``client`` under namespace ``ns``, with a
    guard lease of ``ttl`` seconds (the fleet's lease TTL); ``by``: the revoking node's owner record.

    Returns ``{"scheme", "kind", "identity", "owner", "lease", "owner_stopped", "freed", "seconds"}``: ``freed``
    False means the guard lease frees it within ``lease_ttl_s``. Raises NotClaimedError when nobody holds it,
    RevokeRefusedError when the key changed under us, NotReadyError when etcd cannot be used."""
    started = time.monotonic()
    key = keys.claim_key(ns, pool, identity).encode()
    first_lease = -1
    try:
        guard, _ = await client.grant(ttl)
        for attempt in range(OVERWRITE_ATTEMPTS):
            found, _ = await client.range(key)
            if not found:
                await client.revoke(guard)
                raise NotClaimedError(f"{pool.scheme} {pool.kind} {identity} is not claimed by any node of this fleet")
            held = found[0]
            if held.value.startswith(keys.REVOKED_MARK):
                await client.revoke(guard)
                raise RevokeRefusedError(
                    f"{pool.scheme} {pool.kind} {identity} is being revoked already; it is free in {ttl} s"
                )
            if attempt and held.lease != first_lease:
                break  # another owner since the first read: not the claim asked about
            first_lease = held.lease
            owner_lease = f"{held.lease:016x}"
            # The owner's ledger records of this claim, open now: one of them ending is its acknowledgement. (An
            # older record of the same lease and identity, ended before, must not count; none open: wait out the
            # TTL.)
            ledger_prefix = f"{ns}{LEDGER_CLAIMS}{pool.scheme}/{identity}/".encode()
            records = await _records(client, ledger_prefix)
            open_ids = {r["record"] for r in records if r.get("lease") == owner_lease and r.get("end") is None}
            value = keys.revoked_value(by, held.value, keys.now_rfc3339())
            result = await client.txn([compare(key, "MOD", held.mod_revision)], [put(key, value, guard)], [])
            if result.succeeded:
                break
            # The owner rewrote its claim key meanwhile (every high-water mark write does): read it again.
        else:
            result = None
        if result is None or not result.succeeded:
            await client.revoke(guard)
            raise RevokeRefusedError(f"{pool.scheme} {pool.kind} {identity} changed while being revoked; try again")
        stopped = bool(open_ids) and await _owner_stopped(client, ledger_prefix, open_ids, ttl)
        if stopped:
            await client.revoke(guard)  # deletes the revoked key with it: the identity is free now
        try:
            owner = json.loads(held.value).get("holder")
        except (ValueError, AttributeError):
            owner = None
        return {
            "scheme": pool.scheme,
            "kind": pool.kind,
            "identity": identity,
            "owner": owner,
            "lease": owner_lease,
            "owner_stopped": stopped,
            "freed": stopped,
            "lease_ttl_s": ttl,
            "seconds": round(time.monotonic() - started, 3),
        }
    except EtcdCallError as exc:
        raise map_error(exc, f"revoking {key.decode()}") from exc


async def _records(client: EtcdClient, prefix: bytes) -> list[dict[str, Any]]:
    """The claim ledger records under ``prefix`` (one identity's: a small range read)."""
    found, _ = await client.range(prefix, prefix_end(prefix))
    out = []
    for kv in found:
        try:
            record = json.loads(kv.value)
        except ValueError:
            continue
        if isinstance(record, dict) and "record" in record:
            out.append(record)
    return out


async def _owner_stopped(client: EtcdClient, prefix: bytes, open_ids: set[str], ttl: int) -> bool:
    """Wait (at most ``ttl`` s) for one of the owner's ledger records ``open_ids`` under ``prefix`` to end."""
    deadline = time.monotonic() + ttl
    while time.monotonic() < deadline:  # polls etcd (one small range read), bounded by the TTL
        if any(r["record"] in open_ids and r.get("end") is not None for r in await _records(client, prefix)):
            return True
        await asyncio.sleep(ACK_POLL_S)
    return False
