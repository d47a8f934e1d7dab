"""The sequence store contract (app/storage/sequences.py), the same tests on every store: the memory fake, the
embedded store on a temporary state directory, etcd and PostgreSQL (real ones). The one primitive, ``update``: a
snapshot of the documents named, a pure change, writes and audit events applied together only over an unchanged
snapshot (no lost update between store objects, as between processes or replicas), ``error`` raised after the
writes; the audit log read a page at a time, by period; pruning."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from app.errors import InvalidOptionError, SequenceConflictError, UnknownSequenceError
from app.settings import Settings
from app.storage.embedded.sequences import EmbeddedSequenceStore
from app.storage.etcd.sequences import EtcdSequenceStore
from app.storage.mysql.client import Database as MysqlDatabase
from app.storage.postgres.client import Database
from app.storage.postgres.sequences import PostgresSequenceStore
from app.storage.sequences import (
    RECORD,
    TOMBSTONE,
    Docs,
    MemorySequenceStore,
    Outcome,
    SequenceStore,
    period_doc,
)
from app.storage.tables.sequences import TableSequenceStore

pytestmark = pytest.mark.anyio

BACKENDS = [
    "memory",
    "embedded",
    pytest.param("etcd", marks=pytest.mark.integration),
    pytest.param("postgres", marks=pytest.mark.integration),
    pytest.param("mysql", marks=pytest.mark.integration),
]


@pytest.fixture(params=BACKENDS)
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Callable[[], SequenceStore]]:
    """A factory of store objects sharing one storage (each object is what one process holds)."""
    made: list[SequenceStore] = []
    memory = MemorySequenceStore()

    def make() -> SequenceStore:
        store: SequenceStore
        if request.param == "memory":
            store = memory
        elif request.param == "embedded":
            store = EmbeddedSequenceStore(tmp_path)
        elif request.param == "postgres":
            own = request.getfixturevalue("postgres_schema")
            store = PostgresSequenceStore(
                Database(
                    Settings(
                        postgres_url=own.url,
                        postgres_schema=own.schema,
                        postgres_statement_timeout=2.0,
                        postgres_connect_timeout=2.0,
                    )
                ),
                1000,
            )
        elif request.param == "mysql":
            url = request.getfixturevalue("mysql_database").url
            settings = Settings(mysql_url=url, mysql_statement_timeout=2.0, mysql_connect_timeout=2.0)
            store = TableSequenceStore(MysqlDatabase(settings), 1000)
        else:
            etcd = request.getfixturevalue("etcd_server")
            namespace = request.getfixturevalue("etcd_namespace")
            store = EtcdSequenceStore(
                Settings(
                    etcd_endpoints=etcd.endpoint,
                    etcd_namespace=namespace,
                    etcd_request_timeout=2.0,
                    etcd_connect_timeout=2.0,
                )
            )
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()
        if isinstance(store, TableSequenceStore):
            await store.db.close()


def event(at_ns: int, period: str | None, n: int) -> dict[str, Any]:
    return {"id": f"{at_ns:020d}-{n:08x}", "at_ns": at_ns, "event": "reserve", "period": period, "value": n}


def bump(doc: str, events: int = 0, period: str | None = None, at_ns: int = 10**18) -> Callable[[Docs], Outcome[int]]:
    """A change adding 1 to ``doc``'s ``n`` (creating it at 1), with ``events`` audit events."""

    def change(docs: Docs) -> Outcome[int]:
        found = docs[doc]
        n = (found or {}).get("n", 0) + 1
        return Outcome(n, {doc: {"n": n}}, [event(at_ns + n * 1000 + i, period, n) for i in range(events)])

    return change


async def test_create_get_list_and_an_idempotent_create(stores: Callable[[], SequenceStore]) -> None:
    store = stores()
    record, created = await store.create("orders", 5, 10)
    assert created and (record.start, record.cache, record.next) == (5, 10, 5)
    again, created = await store.create("orders", 5, 10)
    assert not created and again == record
    with pytest.raises(SequenceConflictError, match="other settings"):
        await store.create("orders", 5, 10, {"increment": 2})
    await store.create("invoices", 1, 1, {"reset": "daily", "template": "{yyyy}{mm}{dd}{seq}"})
    listed = await store.list()
    assert [r.name for r in listed] == ["invoices", "orders"]
    assert (await store.reserve("invoices", 2, period="2026-11-27")) == (1, 2, 1)
    with pytest.raises(InvalidOptionError, match="resets: its integers are reserved in a period"):
        await store.reserve("invoices", 2)
    with pytest.raises(InvalidOptionError, match="never resets"):
        await store.reserve("orders", 2, period="2026-11-27")
    assert listed[0].settings == {"reset": "daily", "template": "{yyyy}{mm}{dd}{seq}"} and listed[0].resets
    with pytest.raises(UnknownSequenceError):
        await store.get("nope")


async def test_list_is_in_the_byte_order_of_names(stores: Callable[[], SequenceStore]) -> None:
    """Every store lists names as etcd sorts its keys, byte by byte ('-' < digits < '_' < letters), so a list cut
    at IDMINT_MAX_SEQUENCES leaves out the same names on each (PostgreSQL's collation may put '_' first)."""
    store = stores()
    names = ["a_b", "ab", "a-b", "a0", "b"]
    for name in names:
        await store.create(name, 1, 1)
    assert [r.name for r in await store.list()] == sorted(names) == ["a-b", "a0", "a_b", "ab", "b"]


async def test_an_update_reads_a_snapshot_and_writes_what_the_change_decides(
    stores: Callable[[], SequenceStore],
) -> None:
    store = stores()
    seen: list[dict[str, Any]] = []

    def look(docs: Docs) -> Outcome[None]:
        seen.append(dict(docs))
        return Outcome(None)

    await store.update("orders", (RECORD, TOMBSTONE, period_doc("2026-11-27")), look)
    assert seen == [{RECORD: None, TOMBSTONE: None, "period/2026-11-27": None}]
    assert await store.update("orders", (period_doc("2026-11-27"),), bump("period/2026-11-27")) == 1
    assert await store.update("orders", (period_doc("2026-11-27"),), bump("period/2026-11-27")) == 2

    def handled(docs: Docs) -> Outcome[None]:
        found = docs["period/2026-11-27"]
        assert found is not None
        found["n"] = 999  # the change's own copy: storage is untouched
        return Outcome(None)

    await store.update("orders", (period_doc("2026-11-27"),), handled)
    assert await store.update("orders", (period_doc("2026-11-27"),), bump("period/2026-11-27")) == 3

    def delete(docs: Docs) -> Outcome[None]:
        return Outcome(None, {"period/2026-11-27": None})

    await store.update("orders", (period_doc("2026-11-27"),), delete)
    assert await store.update("orders", (period_doc("2026-11-27"),), bump("period/2026-11-27")) == 1

    def writes_unread(docs: Docs) -> Outcome[None]:
        return Outcome(None, {TOMBSTONE: {"x": 1}})

    with pytest.raises(ValueError, match="without reading it"):
        await store.update("orders", (RECORD,), writes_unread)


async def test_an_error_is_raised_after_the_writes_and_a_raised_one_writes_nothing(
    stores: Callable[[], SequenceStore],
) -> None:
    store = stores()
    doc = period_doc("2026-01-01")

    def refuse_after(docs: Docs) -> Outcome[int]:
        return Outcome(1, {doc: {"n": 41}}, error=SequenceConflictError("refused, and yet written"))

    with pytest.raises(SequenceConflictError, match="and yet written"):
        await store.update("orders", (doc,), refuse_after)
    assert await store.update("orders", (doc,), bump(doc)) == 42

    def refuse(docs: Docs) -> Outcome[int]:
        raise SequenceConflictError("nothing written")

    with pytest.raises(SequenceConflictError, match="nothing written"):
        await store.update("orders", (doc,), refuse)
    assert await store.update("orders", (doc,), bump(doc)) == 43


async def test_store_objects_sharing_storage_never_lose_an_update(stores: Callable[[], SequenceStore]) -> None:
    objects = [stores() for _ in range(3)]
    doc = period_doc("2026-01-01")
    for store in objects:  # each object reads (and an etcd store caches) the document before the others write
        await store.update("orders", (doc,), lambda docs: Outcome(None))

    async def worker(store: SequenceStore) -> list[int]:
        return [await store.update("orders", (RECORD, doc), bump(doc)) for _ in range(25)]

    got = await asyncio.gather(*(worker(s) for s in objects for _ in range(2)))
    assert sorted(n for ns in got for n in ns) == list(range(1, 151))  # every result once: none lost, none twice


async def test_events_are_appended_with_their_change_and_read_a_page_at_a_time(
    stores: Callable[[], SequenceStore],
) -> None:
    store = stores()
    for d, day in enumerate(("2026-11-27", "2026-11-28")):
        doc = period_doc(day)
        for _ in range(5):
            await store.update("orders", (doc,), bump(doc, events=3, period=day, at_ns=10**18 + d * 10**9))
    await store.update("orders", (RECORD,), bump(RECORD, events=2, period=None, at_ns=10**18 + 2 * 10**9))
    every: list[dict[str, Any]] = []
    after = None
    while True:
        page, after = await store.audit("orders", after, 4)
        assert len(page) <= 4
        every += page
        if after is None:
            break
    assert len(every) == 32 and len({e["id"] for e in every}) == 32
    assert [e["id"] for e in every] == sorted(e["id"] for e in every)
    of_day, _ = await store.audit("orders", None, 100, "2026-11-28")
    assert len(of_day) == 15 and {e["period"] for e in of_day} == {"2026-11-28"}
    never, cursor = await store.audit("orders", None, 100, "never")
    assert len(never) == 2 and cursor is None and never[0]["period"] is None
    assert await store.audit("nope", None, 10) == ([], None)


async def test_prune_drops_old_events_and_old_periods(stores: Callable[[], SequenceStore]) -> None:
    store = stores()
    day_ns = 86_400 * 10**9
    old, new = 1_700_000_000 * 10**9, 1_700_000_000 * 10**9 + 3 * day_ns
    for at, day in ((old, "2023-01-01"), (new, "2026-01-01")):
        doc = period_doc(day)
        await store.update("orders", (RECORD, doc), bump(doc, events=2, period=day, at_ns=at))
    await store.create("orders", 1, 1)
    assert await store.prune(new - day_ns, "2024-01-01") >= 2
    events, _ = await store.audit("orders", None, 100)
    assert {e["period"] for e in events} == {"2026-01-01"}
    assert await store.update("orders", (period_doc("2023-01-01"),), bump("period/2023-01-01")) == 1  # it was gone
    assert await store.update("orders", (period_doc("2026-01-01"),), bump("period/2026-01-01")) == 2  # it stayed


async def test_a_refusal_is_never_decided_on_an_old_snapshot(stores: Callable[[], SequenceStore]) -> None:
    """A store object that deleted a sequence (and so remembers it absent) must find it once another object
    created it again: an unknown-sequence refusal is confirmed against storage before it is believed."""
    mine, other = stores(), stores()
    await mine.create("orders", 1, 1)
    assert (await mine.reserve("orders", 5))[0] == 1

    def delete(docs: Docs) -> Outcome[None]:
        return Outcome(None, {RECORD: None, TOMBSTONE: {**(docs[RECORD] or {}), "deleted_at_ns": 1}})

    await mine.update("orders", (RECORD, TOMBSTONE), delete)
    with pytest.raises(UnknownSequenceError):
        await mine.reserve("orders", 1)
    record, created = await other.create("orders", 1, 1)
    assert created and record.next == 6 and record.generation == 2
    assert (await mine.reserve("orders", 1))[0] == 6
