"""The claim ledger on a real etcd: records on no lease, incremental reads, retention, owners' lease expiry."""

from __future__ import annotations

import asyncio

import pytest

from app.ledger import Ledger
from app.ledger.index import REASON_BEFORE
from app.settings import Settings
from app.storage.etcd.ledger import EtcdLedgerStore
from app.storage.ledger import END_RELEASED, NS_IN_DAY, NS_IN_S, ClaimRecord
from tests.helpers import FakeClock

pytestmark = pytest.mark.anyio


def record(identity: int, claimed_ns: int, ended_ns: int | None, lease: str | None = None) -> ClaimRecord:
    owner = {"host": "h", "pid": 1, "version": "9", "started_at": "x", "address": ""}
    r = ClaimRecord(ClaimRecord.new_id(claimed_ns, 1), "siq", "shard", "0", identity, 0, None, owner, lease, claimed_ns)
    return r if ended_ns is None else r.ended(END_RELEASED, ended_ns)


async def test_records_outlive_retention_only_while_open(etcd_server, etcd_namespace: str) -> None:
    clock = FakeClock(ms=1_800_000_000_000)
    settings = Settings(etcd_endpoints=[etcd_server.endpoint], etcd_namespace=etcd_namespace)
    ledger = Ledger(EtcdLedgerStore(settings, clock), retention_days=30, clock=clock)
    await ledger.start()
    await ledger.refresh(full=True)  # start() reads in the background
    old, held = record(1, clock.ns, clock.ns + NS_IN_S), record(2, clock.ns, None)
    for r in (old, held):
        ledger._queue(r)
    assert await ledger.flush()

    other = Ledger(EtcdLedgerStore(settings, clock), retention_days=30, clock=clock)
    await other.refresh(full=True)  # a second node (no background task here) reads both, then only what is new
    assert other.verdict("siq", 1, clock.ns).record == old
    newer = record(3, clock.ns + 5 * NS_IN_S, None)
    ledger._queue(newer)
    assert await ledger.flush()
    assert await other.store.read(False) == [newer]

    clock.ns += 31 * NS_IN_DAY
    await other.refresh(full=True)
    await other.compact()
    await ledger.refresh(full=True)
    assert sorted(r.identity for r in ledger.index.records.values()) == [2, 3]
    assert ledger.verdict("siq", 1, old.claimed_at_ns).reason == REASON_BEFORE
    await ledger.stop()
    await other.stop()


async def dead_owner(etcd_server, etcd_namespace: str, identity: int) -> tuple[Ledger, FakeClock, ClaimRecord, int]:
    """A started ledger holding the open claim of ``identity`` by an owner whose lease (TTL 2 s) nobody keeps
    alive, swept once while the lease lives (the expiry etcd would apply is noted, in whole seconds). Returns the
    ledger, its clock, the claim and the lease's TTL in seconds."""
    settings = Settings(etcd_endpoints=[etcd_server.endpoint], etcd_namespace=etcd_namespace)
    store = EtcdLedgerStore(settings, FakeClock.running_from_now())
    lease_id, ttl = await store._client.grant(2)
    clock = FakeClock.running_from_now()
    ledger = Ledger(store, retention_days=30, clock=clock)
    await ledger.start()
    await ledger.refresh(full=True)  # start() reads in the background
    gone = record(identity, clock(), None, f"{lease_id:016x}")
    ledger._queue(gone)
    assert await ledger.flush()
    await ledger.sweep()
    return ledger, clock, gone, ttl


async def swept_until_ended(ledger: Ledger, clock: FakeClock, claim: ClaimRecord, deadline_ns: int) -> ClaimRecord:
    """Sweep until ``claim`` is closed (each sweep asks etcd once; the lease expires within its TTL), then flush;
    the claim's record as ended."""
    while ledger.index.records[claim.record].open:
        assert clock() < deadline_ns, "the dead owner's claim was not closed"
        await ledger.sweep()
        await asyncio.sleep(0.1)
    assert await ledger.flush()
    return ledger.index.records[claim.record]


async def test_a_dead_owners_claim_ends_at_its_lease_expiry(etcd_server, etcd_namespace: str) -> None:
    ledger, clock, gone, ttl = await dead_owner(etcd_server, etcd_namespace, 4)
    expected = clock() + ttl * NS_IN_S
    ended = await swept_until_ended(ledger, clock, gone, expected + 5 * NS_IN_S)
    assert ended.end == "lost" and ended.ended_at_ns is not None
    assert abs(ended.ended_at_ns - expected) < 1.5 * NS_IN_S  # etcd answers the time left in whole seconds
    await ledger.stop()


async def test_a_dead_owners_claim_ends_no_later_than_the_next_claim_of_its_identity(
    etcd_server, etcd_namespace: str
) -> None:
    ledger, clock, gone, _ = await dead_owner(etcd_server, etcd_namespace, 5)  # its expiry noted, up to 1 s late
    heir = record(5, clock() + NS_IN_S // 10, clock() + NS_IN_S)  # the next holder, claimed before that expiry
    other = record(6, clock() + NS_IN_S // 20, clock() + NS_IN_S)  # another identity: no bound on this one
    for r in (heir, other):
        ledger._queue(r)
    assert await ledger.flush()
    ended = await swept_until_ended(ledger, clock, gone, clock() + 10 * NS_IN_S)
    assert ended.end == "lost" and ended.ended_at_ns == heir.claimed_at_ns
    await ledger.stop()
