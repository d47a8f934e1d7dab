"""The claim ledger above its store: records written off the hot path, lookups in memory, retention, failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.ledger import Ledger
from app.ledger.index import REASON_BEFORE, REASON_FUTURE, REASON_NO_CLAIM
from app.storage.embedded.lease import EmbeddedBackend
from app.storage.embedded.ledger import EmbeddedLedgerStore
from app.storage.lease import Owner
from app.storage.ledger import END_LOST, END_RELEASED, NS_IN_DAY, NS_IN_S, ClaimRecord, MemoryLedgerStore
from tests.helpers import FakeClock, pool_spec

OWNER = Owner(host="h", pid=4242, version="9.9.9", started_at="2026-01-01T00:00:00Z", pod="orders-7f9c")


def ledger_on(store: MemoryLedgerStore | EmbeddedLedgerStore, clock: FakeClock, days: float = 30) -> Ledger:
    return Ledger(store, retention_days=days, clock=clock, monotonic=clock.seconds)


async def claim_one(tmp_path: Path, identity: int = 7):
    backend = EmbeddedBackend(tmp_path / "state")
    await backend.start()
    pool = pool_spec("eight-byte", static=identity)
    return backend, pool, await backend.claim(pool, OWNER)


def test_record_round_trips_json_and_rejects_non_records() -> None:
    record = ClaimRecord("1-2-3", "siq", "shard", "00", 5, 0, None, OWNER.as_dict(), "ab", 10, 20, END_LOST, "x", 3)
    assert ClaimRecord.from_json(record.to_json()) == record
    for bad in (b"{}", b"[]", b"not json", b'{"record": 1}'):
        with pytest.raises(ValueError, match="not a claim record"):
            ClaimRecord.from_json(bad)


@pytest.mark.anyio
async def test_a_claim_is_found_by_identity_and_time_and_its_end_is_kept(tmp_path: Path) -> None:
    clock = FakeClock(ms=1_800_000_000_000)
    store = MemoryLedgerStore()
    ledger = ledger_on(store, clock)
    await ledger.refresh(full=True)
    backend, pool, claim = await claim_one(tmp_path)
    clock.advance_s(1)
    ledger.claimed(claim, pool, OWNER)
    start = clock.ns
    clock.advance_s(60)
    verdict = ledger.verdict("eight-byte", 7, start + 30 * NS_IN_S)
    assert verdict.record is not None and verdict.record.owner["pid"] == 4242
    assert "issued by pod orders-7f9c, idmint 9.9.9, claim held since" in verdict.as_dict()["words"]
    ledger.ended(claim)
    await backend.release(claim, None)
    assert await ledger.flush()
    stored = next(iter(store.records.values()))
    assert stored.end == END_RELEASED and stored.ended_at_ns == clock.ns
    assert ledger.verdict("eight-byte", 7, start + 30 * NS_IN_S).record == stored
    assert ledger.verdict("eight-byte", 8, start + 30 * NS_IN_S).reason == REASON_NO_CLAIM
    assert ledger.verdict("eight-byte", 7, clock.ns + 3600 * NS_IN_S).reason == REASON_FUTURE
    assert ledger.verdict("eight-byte", 7, start - 3600 * NS_IN_S).reason == REASON_BEFORE
    assert ledger.verdict("eight-byte", 7, clock.ns + NS_IN_S).reason == REASON_NO_CLAIM  # after it ended


@pytest.mark.anyio
async def test_the_next_holder_wins_above_the_inherited_mark(tmp_path: Path) -> None:
    clock = FakeClock(ms=1_800_000_000_000)
    ledger = ledger_on(MemoryLedgerStore(), clock)
    backend, pool, first = await claim_one(tmp_path)
    ledger.claimed(first, pool, OWNER)
    clock.advance_s(10)
    last_issued = clock.ns
    ledger.ended(first)
    await backend.release(first, None)
    clock.advance_s(0.2)  # the next holder claims at once: its lookback reaches before the handover
    second = await backend.claim(pool, OWNER)
    other = Owner(host="h2", pid=99, version="9.9.9", started_at="x")
    ledger.claimed(second, pool, other, floor_ns=last_issued + 1_000_000)  # the ms after the mark
    assert ledger.verdict("eight-byte", 7, last_issued).record.owner["pid"] == 4242  # type: ignore[union-attr]
    assert ledger.verdict("eight-byte", 7, last_issued + 1_000_000).record.owner["pid"] == 99  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_failed_writes_are_retried_and_counted_and_never_raise(tmp_path: Path) -> None:
    clock = FakeClock(ms=1_800_000_000_000)
    store = MemoryLedgerStore()
    counted: list[int] = []
    ledger = Ledger(store, retention_days=30, clock=clock, failures=lambda: counted.append(1))
    backend, pool, claim = await claim_one(tmp_path)
    store.fail = 2
    ledger.claimed(claim, pool, OWNER)  # queues; never waits, never raises
    assert not await ledger.flush()
    assert not await ledger.flush()
    assert await ledger.flush()
    assert len(counted) == 2 == ledger.write_failures
    assert not ledger.pending and len(store.records) == 1


@pytest.mark.anyio
async def test_embedded_store_answers_after_a_restart_and_drops_old_records(tmp_path: Path) -> None:
    clock = FakeClock(ms=1_800_000_000_000)
    state = tmp_path / "state"
    ledger = ledger_on(EmbeddedLedgerStore(state, clock), clock, days=30)
    await ledger.start()
    await ledger.refresh(full=True)  # start() reads in the background
    backend, pool, claim = await claim_one(tmp_path)
    ledger.claimed(claim, pool, OWNER)
    t = clock.ns + NS_IN_S
    clock.advance_s(5)
    ledger.ended(claim)
    await backend.release(claim, None)
    await ledger.stop()
    answer = ledger.verdict("eight-byte", 7, t).record

    again = ledger_on(EmbeddedLedgerStore(state, clock), clock, days=30)
    await again.start()
    await again.refresh(full=True)  # start() reads in the background
    assert again.verdict("eight-byte", 7, t).record == answer is not None

    clock.ns += 31 * NS_IN_DAY  # past retention: the file of that day goes, and the ledger says it cannot reach
    await again.compact()
    await again.stop()
    assert list((state / "ledger").glob("claims-*.jsonl")) == []
    third = ledger_on(EmbeddedLedgerStore(state, clock), clock, days=30)
    await third.start()
    await third.refresh(full=True)  # start() reads in the background
    assert third.verdict("eight-byte", 7, t).reason == REASON_BEFORE
    await third.stop()


@pytest.mark.anyio
async def test_embedded_retention_keeps_a_claim_still_held(tmp_path: Path) -> None:
    clock = FakeClock(ms=1_800_000_000_000)
    state = tmp_path / "state"
    ledger = ledger_on(EmbeddedLedgerStore(state, clock), clock, days=1)
    await ledger.start()
    await ledger.refresh(full=True)  # start() reads in the background
    backend, pool, claim = await claim_one(tmp_path)
    ledger.claimed(claim, pool, OWNER)
    assert await ledger.flush()
    clock.ns += 3 * NS_IN_DAY
    await ledger.compact()
    fresh = ledger_on(EmbeddedLedgerStore(state, clock), clock, days=1)
    await fresh.refresh(full=True)
    assert [r.identity for r in fresh.live()] == [7]
    await ledger.stop()
    await backend.close()


def test_the_app_answers_the_same_issuer_after_a_restart_on_the_embedded_backend(tmp_path: Path) -> None:
    from tests.helpers import CLAIMING, running_app

    with running_app(tmp_path) as client:
        issued = {scheme: client.get(f"/v1/ids/{scheme}").json()["ids"][0] for scheme in CLAIMING}
        before = {s: client.get(f"/v1/decode/{s}/{t}").json()["issued_by"] for s, t in issued.items()}
    with running_app(tmp_path) as client:
        after = {s: client.get(f"/v1/decode/{s}/{t}").json()["issued_by"] for s, t in issued.items()}
    for scheme in CLAIMING:
        assert after[scheme]["record"] == before[scheme]["record"], scheme
        assert after[scheme]["owner"] == before[scheme]["owner"] and after[scheme]["end"] == END_RELEASED


@pytest.mark.anyio
async def test_a_reading_matches_only_claims_of_the_group_it_carries(tmp_path: Path) -> None:
    from app.ledger.view import LedgerView

    clock = FakeClock(ms=1_800_000_000_000)
    ledger = ledger_on(MemoryLedgerStore(), clock)
    backend = EmbeddedBackend(tmp_path / "state")
    await backend.start()
    for cluster, pid in ((1, 11), (2, 22)):  # two cluster IDs in one fleet: generator ID 7 held in each
        pool = pool_spec("eight-byte", static=7, group=str(cluster))
        owner = Owner(host="h", pid=pid, version="9", started_at="x")
        ledger.claimed(await backend.claim(pool, owner), pool, owner)
    clock.advance_s(1)
    stamp = "2027-01-15T08:00:01.000Z"  # FakeClock(ms=1_800_000_000_000) + 1 s
    view = LedgerView(ledger, {"eight-byte": pool_spec("eight-byte")}, {})
    for cluster, pid in ((1, 11), (2, 22)):
        reading = {"scheme": "eight-byte", "timestamp": stamp, "fields": {"generator_id": 7, "cluster_id": cluster}}
        [annotated] = view.annotate([reading])
        assert annotated["issued_by"]["owner"]["pid"] == pid, annotated
    await backend.close()
