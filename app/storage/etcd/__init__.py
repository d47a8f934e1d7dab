"""The etcd backend: node identities leased from etcd, for any number of replicas, and the stores beside them.

Files: :mod:`~app.storage.etcd.session` (one lease kept alive; its done event and status),
:mod:`~app.storage.etcd.claim` (one claim: its revisions, mark writes and re-arming), :mod:`~app.storage.etcd.watch`
(a claim key's watch), :mod:`~app.storage.etcd.keys` (key layout and values, pure), :mod:`~app.storage.etcd.claimer`
(the pool scan, draw and claiming transaction; deleting released keys), :mod:`~app.storage.etcd.records`
(registrations, the fleet's keys), :mod:`~app.storage.etcd.backend` (the lease's upkeep, health, release, revoke),
:mod:`~app.storage.etcd.revoke` (revoking another node's claim), :mod:`~app.storage.etcd.ledger` (the claim ledger),
:mod:`~app.storage.etcd.sequences` (sequences); every etcd call goes through the process's one client
(:mod:`~app.storage.etcd.client`: the gateway, the error table; :mod:`~app.storage.etcd.calls`: the client's one
factory and calls bounded in time).

Modelled on etcd's Go ``concurrency.Session``: one lease per process (TTL ``settings.lease_ttl``), refreshed
by a background task every TTL/3; every claim is one key bound to that lease, created by one transaction
``If(CreateRevision(key) == 0) Then Put(key, value, lease)``. When the lease expires (the process died or lost
etcd for longer than the TTL) etcd deletes its keys and the identities return to the pool.

Key layout under ``settings.etcd_namespace`` (default ``unique-id-generator/``), as the node fills each pool's
``key_prefix`` / ``mark_prefix`` / ``key_format`` / ``allowed_groups_key`` (this package knows no scheme)::

    cluster-id                               "3" or "1, 3, 4": allowed eight-byte cluster IDs (java-uniqueid);
                                             absent = any; never written by idmint
    pool/<cluster>:<generator>               eight-byte generator ID claim, on the lease (java-uniqueid layout)
    idmint/muid/<medallion, 11 hex digits>   Muid medallion claim, on the lease (uppercase, as in the Muid text)
    idmint/hlc-ulid/<publisher id>           HLC-ULID publisher ID claim, on the lease (decimal)
    idmint/siq/<domain hash, 8 hex>/<shard>  SIQ shard claim per domain, on the lease (decimal shard)
    idmint/wiji/<random part hex>            Wiji random part of a replica, on the lease (no exclusivity)
    idmint/marks/<scheme>/<rest of claim>    high-water mark of an identity, on NO lease: it outlives holders
                                             (e.g. idmint/marks/eight-byte/3/17, idmint/marks/siq/86ce1947/7)
    idmint/ledger/claims/<scheme>/<id>/<rec> claim ledger record, on NO lease (app.storage.etcd.ledger; kept
                                             IDMINT_LEDGER_DAYS after the claim ended)

Claim value (JSON, UTF-8)::

    {"holder": {"host", "pid", "version", "started_at", "address"}, "scheme": <IdentityPool.scheme>,
     "kind": "generator_id", "identity": 17, "lease": "694d8b2c1f3e0a11", "claimed_at": "2025-...Z",
     "high_water_mark": <last mark this holder recorded, native units; -1 until its first record>}

Mark value (JSON): ``{"high_water_mark": <native units>, "holder": {...}, "lease": "<hex>"}``. Marks only rise
(:meth:`EtcdClaim.record_mark`), except the exact final mark written by :meth:`EtcdBackend.release`, which may
lower our own reservation but never goes below the mark inherited at claim time. Every mark write is one
transaction guarded by the mod revisions of the claim key and the mark key, so only the current holder writes.

java-uniqueid (``uniqueid-etcd``, ``ResourceClaim``) claims ``pool/<cluster>:<generator>`` with ``Version(key) == 0
-> Put(key, "", lease)``, reads the pool with a keys-only range read and never reads values, so the JSON value
is ignored by Java clients, and keys it holds (with an empty value) are skipped here. Our marks live outside
``pool/`` so its pool count is not disturbed.

Fail closed: a claim's :attr:`~app.storage.lease.Claim.deadline` is the ``clock()`` time at which the last
successful refresh (or grant) was *sent*, plus the TTL, minus ``settings.lease_safety_margin``; etcd cannot expire
the lease before that. A refresh answering TTL <= 0 (lease expired or revoked), a write refused with "lease not
found" (gRPC NOT_FOUND), or a watch event showing the claim key deleted or overwritten makes the claim lost. A lost
lease is re-granted automatically; the node
re-claims on it.

Member loss: each process shuffles ``settings.etcd_endpoints``; a request that fails or stalls on one member
moves to the next at once (:mod:`app.storage.etcd.client`), and watches follow the client to the member that
answers, re-armed by verifying the key (same lease, same create revision) and watching from the verified
revision on. A broken watch freezes the claim's deadline at the lease deadline of the moment it broke (no later
refresh extends it) until it is re-armed; the identity is kept as long as the lease is valid.

A released claim whose key cannot be deleted (etcd unreachable) is remembered and deleted once etcd answers:
it sits on our live lease and would otherwise stay held for as long as this process runs.
"""

from __future__ import annotations

from app.metrics import Metrics
from app.schemes.base import Clock
from app.settings import Settings
from app.storage.base import Capabilities, Storage
from app.storage.etcd.backend import EtcdBackend
from app.storage.etcd.backfill import EtcdBackfillStore
from app.storage.etcd.calls import open_client
from app.storage.etcd.ledger import EtcdLedgerStore
from app.storage.etcd.sequences import EtcdSequenceStore

CAPABILITIES = Capabilities(claims_expire=True, one_host=False, can_revoke=True)


def open_etcd(settings: Settings, metrics: Metrics | None, clock: Clock) -> Storage:
    """The stores on etcd (``settings.etcd_*``), all on one client (:func:`~app.storage.etcd.calls.open_client`),
    closed by :meth:`Storage.close`; ``clock``: the node's (ns since the epoch). Connects lazily. Raises
    ConfigError for unusable settings (unreadable TLS files)."""
    client = open_client(settings)
    return Storage(
        "etcd",
        CAPABILITIES,
        EtcdBackend(settings, metrics, client=client),
        EtcdLedgerStore(settings, clock, client),
        EtcdSequenceStore(settings, client),
        closing=client.close,
        backfill=EtcdBackfillStore(settings, client),
    )
