"""The backfill mark store contract (app/storage/backfill.py), the same tests on every store: the memory double, the
embedded store (SQLite in a temporary state directory), etcd, PostgreSQL and MariaDB (real ones). Each store object
is what one process holds: takes by several objects into one (identity, tick) never overlap, a new object (a restart)
continues above what the others took, a full tick is left out, and a mark never goes down.
On the SQL tables, a database at version 1 (before ``backfill_marks``) gains the table at the next start."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from app.settings import Settings
from app.storage.backfill import BackfillStore, MemoryBackfillStore, grant
from app.storage.embedded.backfill import EmbeddedBackfillStore
from app.storage.etcd.backfill import EtcdBackfillStore
from app.storage.etcd.calls import open_client
from app.storage.mysql.client import Database as MysqlDatabase
from app.storage.postgres.client import Database as PostgresDatabase
from app.storage.tables.backfill import TableBackfillStore

pytestmark = pytest.mark.anyio

BACKENDS = [
    "memory",
    "embedded",
    pytest.param("etcd", marks=pytest.mark.integration),
    pytest.param("postgres", marks=pytest.mark.integration),
    pytest.param("mysql", marks=pytest.mark.integration),
]
SPACE = "snowflake/twitter"


def table_database(request: pytest.FixtureRequest, dialect: str) -> PostgresDatabase | MysqlDatabase:
    """A pool on the test's own schema (PostgreSQL) or database (MariaDB)."""
    if dialect == "postgres":
        own = request.getfixturevalue("postgres_schema")
        return PostgresDatabase(
            Settings(
                postgres_url=own.url,
                postgres_schema=own.schema,
                postgres_statement_timeout=5.0,
                postgres_connect_timeout=5.0,
            )
        )
    database = request.getfixturevalue("mysql_database")
    return MysqlDatabase(Settings(mysql_url=database.url, mysql_statement_timeout=5.0, mysql_connect_timeout=5.0))


@pytest.fixture(params=BACKENDS)
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Callable[[], BackfillStore]]:
    """A factory of store objects sharing one storage (each object is what one process holds)."""
    closers: list[Callable[[], object]] = []
    memory = MemoryBackfillStore()

    def make() -> BackfillStore:
        if request.param == "memory":
            return memory
        if request.param == "embedded":
            return EmbeddedBackfillStore(tmp_path)
        if request.param in ("postgres", "mysql"):
            db = table_database(request, request.param)
            closers.append(db.close)
            return TableBackfillStore(db)
        etcd = request.getfixturevalue("etcd_server")
        namespace = request.getfixturevalue("etcd_namespace")
        settings = Settings(
            etcd_endpoints=etcd.endpoint, etcd_namespace=namespace, etcd_request_timeout=5.0, etcd_connect_timeout=5.0
        )
        client = open_client(settings)
        closers.append(client.close)
        return EtcdBackfillStore(settings, client)

    yield make
    for close in closers:
        await close()  # type: ignore[misc]


def test_grant_takes_above_each_mark_and_leaves_full_ticks_out() -> None:
    writes, granted = grant({10: 5, 11: 62, 13: 63}, {10: 3, 11: 2, 12: 100, 13: 1}, 64)
    assert granted == {10: (6, 3), 11: (63, 1), 12: (0, 64)}
    assert writes == {10: 8, 11: 63, 12: 63}
    assert grant({10: 63}, {10: 1}, 64) == ({}, {})


async def test_takes_continue_above_earlier_ones_and_a_new_store_object_sees_them(stores) -> None:
    first = stores()
    assert await first.take(SPACE, 7, {100: 3, 101: 1}, 4096) == {100: (0, 3), 101: (0, 1)}
    assert await first.take(SPACE, 7, {100: 2}, 4096) == {100: (3, 2)}
    restarted = stores()  # another process, or this one after a restart
    assert await restarted.take(SPACE, 7, {100: 1, 101: 1}, 4096) == {100: (5, 1), 101: (1, 1)}
    assert await restarted.marks(SPACE, 7, [100, 101, 102]) == {100: 5, 101: 1}
    # other identities and spaces are apart
    assert await restarted.take(SPACE, 8, {100: 1}, 4096) == {100: (0, 1)}
    assert await restarted.take("eight-byte/0", 7, {100: 1}, 64) == {100: (0, 1)}


async def test_concurrent_takes_into_one_tick_by_several_store_objects_are_disjoint(stores) -> None:
    objects = [stores() for _ in range(3)]
    tick = 1_614_834_367_890

    async def job(store: BackfillStore) -> list[tuple[int, int]]:
        got = []
        for _ in range(10):
            granted = await store.take(SPACE, 3, {tick: 7, tick + 1: 1}, 4096)
            got.append(granted[tick])
        return got

    runs = [run for found in await asyncio.gather(*(job(s) for s in objects)) for run in found]
    taken = [first + i for first, count in runs for i in range(count)]
    assert len(taken) == 3 * 10 * 7
    assert len(set(taken)) == len(taken), "a sequence was handed out twice"
    assert await objects[0].marks(SPACE, 3, [tick, tick + 1]) == {tick: max(taken), tick + 1: 29}


async def test_a_full_tick_is_left_out_and_a_short_one_cut(stores) -> None:
    store = stores()
    assert await store.take(SPACE, 1, {5: 60}, 64) == {5: (0, 60)}
    assert await store.take(SPACE, 1, {5: 10, 6: 2}, 64) == {5: (60, 4), 6: (0, 2)}
    assert await store.take(SPACE, 1, {5: 1}, 64) == {}
    assert await store.marks(SPACE, 1, [5]) == {5: 63}


async def test_many_ticks_in_one_take_span_several_updates(stores) -> None:
    store = stores()
    wants = {tick: 2 for tick in range(1_000, 1_000 + 700)}
    granted = await store.take(SPACE, 2, wants, 4096)
    assert granted == {tick: (0, 2) for tick in wants}
    again = await stores().take(SPACE, 2, wants, 4096)
    assert again == {tick: (2, 2) for tick in wants}


@pytest.mark.integration
@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
async def test_tables_at_version_1_gain_backfill_marks_at_the_next_start(
    request: pytest.FixtureRequest, dialect: str
) -> None:
    first = table_database(request, dialect)
    try:
        await first.ready()
        s = first.sql.version.split(" FROM ")[1].rsplit(".", 1)[0]  # the quoted schema or database
        to_version_1 = [
            f"DROP TABLE {s}.backfill_marks",
            f"DELETE FROM {s}.schema_version",
            f"INSERT INTO {s}.schema_version (version, applied_at) VALUES (1, CURRENT_TIMESTAMP)",
        ]
        if dialect == "postgres":  # the superuser's URL: the pool itself may drop
            for statement in to_version_1:
                await first.run("making version 1", statement)
        else:  # the app account may not drop: root does
            request.getfixturevalue("mysql_database").server.execute("; ".join(to_version_1))
        assert int((await first.run("reading the version", first.sql.version))[0][0]) == 1
    finally:
        await first.close()
    restarted = table_database(request, dialect)  # a new idmint's first start on those tables
    try:
        store = TableBackfillStore(restarted)
        assert await store.take(SPACE, 1, {5: 2}, 64) == {5: (0, 2)}
        assert int((await restarted.run("reading the version", restarted.sql.version))[0][0]) == 2
    finally:
        await restarted.close()
