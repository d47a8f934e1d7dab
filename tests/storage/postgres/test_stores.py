"""The PostgreSQL sequence and claim-ledger stores against a real PostgreSQL: the atomic advance up to 2**63-1,
stores that compete, the hand-back's compare-and-set, an outage; ledger records, incremental reads, retention, a dead
owner's lease."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest

from app.errors import (
    BackendUnavailableError,
    IdmintError,
    SequenceConflictError,
    SequenceOverflowError,
    UnknownSequenceError,
)
from app.ledger import Ledger
from app.ledger.index import REASON_BEFORE
from app.settings import load_settings
from app.storage import open_storage
from app.storage.base import Storage
from app.storage.history import GuardedSequenceStore
from app.storage.ledger import END_RELEASED, NS_IN_DAY, NS_IN_S, ClaimRecord
from app.storage.postgres.ledger import PostgresLedgerStore
from app.storage.postgres.sequences import PostgresSequenceStore
from app.storage.sequences import MAX_VALUE, RECORD, Outcome
from app.storage.tables.sequences import PRUNE_BATCH
from tests.helpers import FakeClock
from tests.support.postgres import PostgresServer

pytestmark = [pytest.mark.anyio, pytest.mark.integration]  # a real PostgreSQL


@asynccontextmanager
async def storage(url: str, clock: Callable[[], int] | None = None, **overrides: object) -> AsyncIterator[Storage]:
    settings = load_settings(**{
        "postgres_url": url, "postgres_statement_timeout": 1.0, "postgres_connect_timeout": 1.0, "lease_ttl": 2,
        "lease_safety_margin": 0.5, **overrides,
    })  # fmt: skip
    opened = open_storage(settings, clock or FakeClock.running_from_now())
    try:
        yield opened
    finally:
        await opened.close()


def sequences(s: Storage) -> PostgresSequenceStore:
    assert isinstance(s.sequences, GuardedSequenceStore)  # behind the storage's history guard
    assert isinstance(s.sequences.inner, PostgresSequenceStore)
    return s.sequences.inner


async def test_create_reserve_up_to_the_last_integer(postgres_db: str, postgres_server: PostgresServer) -> None:
    async with storage(postgres_db, max_sequences=2) as s:
        store = sequences(s)
        record, created = await store.create("orders", 1, 1000)
        assert created and record.next == 1
        assert (await store.create("orders", 1, 1000))[1] is False
        with pytest.raises(SequenceConflictError, match="other settings"):
            await store.create("orders", 5, 1000)
        assert await store.reserve("orders", 10) == (1, 10, 1)
        assert await store.reserve("orders", 2**40) == (11, 2**40, 1)
        dbname = postgres_db.rsplit("/", 1)[1]
        rows = postgres_server.execute(
            "SELECT value FROM idmint.sequence_documents WHERE name = 'orders' AND doc = 'record'", dbname
        )
        assert rows == [(f'{{"start":1,"cache":1000,"next":{2**40 + 11}}}',)]  # the etcd value, byte for byte
        await store.create("edge", MAX_VALUE - 1, 1)
        with pytest.raises(SequenceConflictError, match="at most 2"):
            await store.create("third", 1, 1)
        with pytest.raises(SequenceOverflowError, match=r"2\*\*63-1"):
            await store.reserve("edge", 3)
        assert await store.reserve("edge", 3, partial=True) == (MAX_VALUE - 1, 2, 1)
        assert (await store.get("edge")).next == MAX_VALUE + 1  # 2**63: one past bigint
        with pytest.raises(SequenceOverflowError):
            await store.reserve("edge", 1, partial=True)  # nothing at all is left
        assert [r.name for r in await store.list()] == ["edge", "orders"]
        with pytest.raises(UnknownSequenceError):
            await store.reserve("nope", 1)


async def test_competing_stores_never_overlap_and_lose_nothing(postgres_db: str) -> None:
    async with storage(postgres_db) as a, storage(postgres_db) as b, storage(postgres_db) as c:
        stores = [sequences(x) for x in (a, b, c)]
        await stores[0].create("orders", 1, 10)

        async def worker(store: PostgresSequenceStore, n: int) -> list[tuple[int, int]]:
            runs = [await store.reserve("orders", 1 + (i * 7 + n) % 50) for i in range(30)]
            return [(first, first + count - 1) for first, count, _ in runs]

        got = await asyncio.gather(*(worker(s, n) for n in range(4) for s in stores))
        spans = sorted(r for rs in got for r in rs)
        assert all(x[1] < y[0] for x, y in itertools.pairwise(spans))
        assert spans[-1][1] + 1 == (await stores[1].get("orders")).next
        assert spans[0][0] == 1 and sum(y - x + 1 for x, y in spans) == spans[-1][1]  # no integer lost either


async def test_give_back_is_one_compare_of_the_document(postgres_db: str, postgres_server: PostgresServer) -> None:
    dbname = postgres_db.rsplit("/", 1)[1]
    async with storage(postgres_db) as a, storage(postgres_db) as b:
        mine, other = sequences(a), sequences(b)
        await mine.create("orders", 1, 10)
        assert await mine.reserve("orders", 100) == (1, 100, 1)
        assert await mine.give_back("orders", 41, 100, 1.0)
        assert not await mine.give_back("orders", 41, 100, 1.0)  # never twice
        assert await other.reserve("orders", 10) == (41, 10, 1)

        assert await mine.reserve("orders", 100) == (51, 100, 1)
        assert await other.reserve("orders", 5) == (151, 5, 1)  # another replica reserved since
        assert not await mine.give_back("orders", 60, 150, 1.0)

        assert await mine.reserve("orders", 10) == (156, 10, 1)
        # An operator moved the sequence on by hand: the document is no longer what the reservation wrote.
        postgres_server.execute(
            "UPDATE idmint.sequence_documents SET value = replace(value, '\"next\":166', '\"next\":200') "
            "WHERE name = 'orders' AND doc = 'record'",
            dbname,
        )
        assert not await mine.give_back("orders", 160, 165, 1.0)
        assert (await other.get("orders")).next == 200

        assert await mine.reserve("orders", 10) == (200, 10, 1)
        postgres_server.stop()
        try:
            with pytest.raises(BackendUnavailableError, match="PostgreSQL at postgresql://"):
                await mine.give_back("orders", 205, 209, 0.5)
            with pytest.raises(BackendUnavailableError):
                await other.reserve("orders", 1)
        finally:
            postgres_server.start()
        assert (await other.get("orders")).next == 210  # no answer: nothing was handed back


ORDERS_LOCK = "SELECT pg_advisory_xact_lock(hashtext('idmint/sequences'), hashtext('orders'))"
"""The lock an update of sequence ``orders`` takes (schema idmint): what another replica's update holds."""


async def until_waiting_on_the_lock(conn: psycopg.AsyncConnection[Any], waiting: int = 1) -> None:
    """Return once ``waiting`` sessions wait for an advisory lock (pg_locks, not granted)."""
    for _ in range(2000):
        cursor = await conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        row = await cursor.fetchone()
        if row is not None and row[0] >= waiting:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{waiting} sessions never waited on the advisory lock")


@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
async def test_an_update_reads_after_the_lock_whatever_the_default_isolation(
    postgres_db: str, postgres_server: PostgresServer, level: str
) -> None:
    """A DBA's default_transaction_isolation must not move an update's snapshot before its lock: at REPEATABLE READ
    the snapshot would be taken at the lock statement, so a sequence another replica created while we waited read
    as unknown (a 404), and replicas taking turns on one sequence failed with serialization errors (503s)."""
    dbname = postgres_db.rsplit("/", 1)[1]
    postgres_server.execute(f"ALTER DATABASE {dbname} SET default_transaction_isolation = '{level}'")
    async with storage(postgres_db) as a, storage(postgres_db) as b:
        mine, other = sequences(a), sequences(b)
        assert await mine.list() == []  # the tables exist
        async with await psycopg.AsyncConnection.connect(postgres_db, autocommit=True) as replica:
            async with replica.transaction():  # another replica's update, creating the sequence under its lock
                await replica.execute(ORDERS_LOCK)
                reserving = asyncio.ensure_future(mine.reserve("orders", 3))
                await until_waiting_on_the_lock(replica)
                await replica.execute(
                    "INSERT INTO idmint.sequence_documents (name, doc, value) "
                    """VALUES ('orders', 'record', '{"start":1,"cache":10,"next":1}')"""
                )
            assert await reserving == (1, 3, 1)

        async def worker(store: PostgresSequenceStore) -> list[int]:
            return [(await store.reserve("orders", 2))[0] for _ in range(20)]

        got = await asyncio.gather(*(worker(s) for s in (mine, other, mine, other)))
        assert sorted(first for firsts in got for first in firsts) == list(range(4, 4 + 80 * 2, 2))


@pytest.mark.parametrize("pool_size", [1, 3])
async def test_reservations_cancelled_at_any_point_never_fail_the_others(postgres_db: str, pool_size: int) -> None:
    """Clients that go away mid-request (their reservations cancelled at random points, the answer to COMMIT
    included) must cost only their own integers: every reservation not cancelled succeeds, no integer is given
    twice, and the pool keeps serving. A connection whose socket was shut down under a cancelled caller must never
    go back to the pool looking idle (the next caller's statement failed with 'unreachable': a 503)."""
    rng = random.Random(7)
    limits = {"postgres_pool_size": pool_size, "postgres_statement_timeout": 5.0}
    async with storage(postgres_db, **limits) as a, storage(postgres_db, **limits) as b:
        stores = [sequences(a), sequences(b)]
        await stores[0].create("orders", 1, 10)
        firsts: list[int] = []
        failed: list[BaseException] = []

        async def reserve(store: PostgresSequenceStore) -> None:
            try:
                firsts.append((await store.reserve("orders", 1))[0])
            except IdmintError as exc:
                failed.append(exc)

        cancelled = 0
        while cancelled < 200:
            tasks = [asyncio.ensure_future(reserve(store)) for store in stores for _ in range(4)]
            await asyncio.sleep(rng.uniform(0, 0.01))
            for task in tasks:
                if rng.random() < 0.5 and task.cancel():
                    cancelled += 1
            await asyncio.gather(*tasks, return_exceptions=True)
        assert failed == [] and len(firsts) == len(set(firsts)) and firsts
        for store in stores:  # the pools serve again at once, every connection of them
            assert [await store.reserve("orders", 1) for _ in range(pool_size + 1)]


async def test_a_backlog_of_audit_events_is_pruned_within_the_statement_timeout(
    postgres_db: str, postgres_server: PostgresServer
) -> None:
    """Pruning a backlog (IDMINT_LEDGER_DAYS lowered, maintenance that could not run for a while) must not be one
    DELETE that outlives the statement timeout: it was rolled back every hour and never made progress, the table
    growing for ever. 300,000 old events take PostgreSQL about 0.7 s to delete at once on a busy 2-core machine;
    the prune deletes them in statements of at most PRUNE_BATCH rows, each far below the statement timeout. Which
    statements ran is what is checked: a timeout tight enough to refuse the whole DELETE on one machine (0.25 s
    was) leaves a batch too little room on a loaded one, and too loose a one passes the whole DELETE on a fast
    one."""
    dbname = postgres_db.rsplit("/", 1)[1]
    async with storage(postgres_db) as s:
        await sequences(s).update("orders", (RECORD,), lambda docs: Outcome(None))  # the tables exist
    postgres_server.execute(
        "INSERT INTO idmint.sequence_events (name, id, period, body) "
        "SELECT 'orders', lpad((10::bigint ^ 18 + i * 1000)::bigint::text, 20, '0') || '-0a1b2c3d', 'never', '{}' "
        "FROM generate_series(1, 300000) i",
        dbname,
    )
    async with storage(postgres_db) as s:
        store = sequences(s)
        run = store.db.run
        pruned: list[int] = []  # rows each pruning statement removed

        async def counted(
            doing: str, query: Any, params: Mapping[str, Any] | None = None, limit: float | None = None
        ) -> list[tuple[Any, ...]]:
            rows = await run(doing, query, params, limit)
            if doing.startswith("pruning"):
                pruned.append(int(rows[0][0]) if rows else 0)
            return rows

        store.db.run = counted  # type: ignore[method-assign]
        assert await store.prune(2 * 10**18, "2000-01-01") == 300_000
    assert sum(pruned) == 300_000 and max(pruned) <= PRUNE_BATCH, (len(pruned), max(pruned))
    # Read back at the default timeout: the first read after a mass delete walks the 300,000 dead entries of the
    # (name, id) index until vacuum or that read marks them dead, which took over 0.25 s on a busy CI machine. That
    # is PostgreSQL's cost after any large DELETE, not the batching this test is about.
    async with storage(postgres_db) as s:
        assert await sequences(s).audit("orders", None, 10) == ([], None)


def record(identity: int, claimed_ns: int, ended_ns: int | None, lease: str | None = None) -> ClaimRecord:
    owner = {"host": "h", "pid": 1, "version": "9", "started_at": "x", "address": ""}
    r = ClaimRecord(ClaimRecord.new_id(claimed_ns, 1), "siq", "shard", "0", identity, 0, None, owner, lease, claimed_ns)
    return r if ended_ns is None else r.ended(END_RELEASED, ended_ns)


async def test_ledger_records_outlive_retention_only_while_open(postgres_db: str) -> None:
    clock = FakeClock(ms=1_800_000_000_000)
    async with storage(postgres_db, clock) as a, storage(postgres_db, clock) as b:
        ledger = Ledger(a.ledger, retention_days=30, clock=clock)
        await ledger.start()
        await ledger.refresh(full=True)
        old, held = record(1, clock.ns, clock.ns + NS_IN_S), record(2, clock.ns, None)
        for r in (old, held):
            ledger._queue(r)
        assert await ledger.flush()

        other = Ledger(b.ledger, retention_days=30, clock=clock)
        await other.refresh(full=True)  # a second node reads both, then what is new (and the overlap window)
        assert other.verdict("siq", 1, clock.ns).record == old
        newer = record(3, clock.ns + 5 * NS_IN_S, None)
        ledger._queue(newer)
        assert await ledger.flush()
        again = await other.store.read(False)
        assert newer in again and {r.record for r in again} <= {old.record, held.record, newer.record}

        clock.ns += 31 * NS_IN_DAY
        await other.refresh(full=True)
        await other.compact()
        await ledger.refresh(full=True)
        assert sorted(r.identity for r in ledger.index.records.values()) == [2, 3]
        assert ledger.verdict("siq", 1, old.claimed_at_ns).reason == REASON_BEFORE
        assert await a.ledger.since_ns(0) == await b.ledger.since_ns(1) > 1
        await ledger.stop()
        await other.stop()


async def test_a_dead_owners_claim_ends_at_its_lease_expiry(postgres_db: str) -> None:
    async with storage(postgres_db) as s:
        store = s.ledger
        assert isinstance(store, PostgresLedgerStore)
        await s.leases.start()
        token = s.leases.member_token()
        assert token is not None
        clock = FakeClock.running_from_now()
        ledger = Ledger(store, retention_days=30, clock=clock)
        await ledger.start()
        await ledger.refresh(full=True)
        gone = record(4, clock(), None, token)
        ledger._queue(gone)
        assert await ledger.flush()
        await ledger.sweep()  # alive: the expiry the database would apply is noted
        assert ledger.index.records[gone.record].open
        await s.leases.close()  # the lease row is deleted: the owner is gone
        while ledger.index.records[gone.record].open:
            await ledger.sweep()
            await asyncio.sleep(0.05)
        assert await ledger.flush()
        ended = ledger.index.records[gone.record]
        assert ended.end == "lost" and ended.ended_at_ns is not None
        assert ended.ended_at_ns <= clock() + 2 * NS_IN_S
        await ledger.stop()
