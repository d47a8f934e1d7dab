"""The lease contract (app/storage/lease.py), the same tests on every lease backend: embedded on a temporary state
directory, etcd and PostgreSQL (real ones, started by the tests). Several backend objects on one store stand for
several processes or replicas: claims are exclusive, a released identity goes to the next claimer with the exact
final mark, marks only rise until then, and fleet records are created once and replaced only by compare-and-set.
A new backend passes these before anything else (docs/development.md, "Adding a storage backend")."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest

from app.errors import BackendUnavailableError, NotReadyError, PoolExhaustedError
from app.schemes.pool import IdentityPool
from app.settings import load_settings
from app.storage.embedded.lease import EmbeddedBackend
from app.storage.etcd.backend import EtcdBackend
from app.storage.lease import Claim, LeaseBackend, Owner
from app.storage.mysql.backend import mysql_backend
from app.storage.mysql.client import Database as MysqlDatabase
from app.storage.postgres.backend import PostgresBackend
from app.storage.postgres.client import Database
from tests.helpers import pool_spec

pytestmark = pytest.mark.anyio

BACKENDS = [
    "embedded",
    pytest.param("etcd", marks=pytest.mark.integration),
    pytest.param("postgres", marks=pytest.mark.integration),
    pytest.param("mysql", marks=pytest.mark.integration),
]
TTL_S = 2
POOL = pool_spec("eight-byte", minimum=0, maximum=2, settings={"cluster_id": 0})
ONE = pool_spec("eight-byte", minimum=0, maximum=0, settings={"cluster_id": 0})
HOLDER = Owner(host="contract", pid=1, version="test", started_at="2026-01-01T00:00:00Z")
READY_GUARD_S = 30.0
"""A guard for :func:`claim`, not a budget: PostgreSQL makes a fresh row claimable one TTL after creating it."""

Backends = Callable[[], Awaitable[LeaseBackend]]


@pytest.fixture(params=BACKENDS)
async def backends(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backends]:
    """A factory of started lease backends on one store (each is what one process holds); closed at the end, before
    the store's own fixtures (taken here first, so they are torn down after)."""
    place: Any = None
    if request.param == "etcd":
        place = (request.getfixturevalue("etcd_server"), request.getfixturevalue("etcd_namespace"))
    elif request.param == "postgres":
        place = request.getfixturevalue("postgres_schema")
    elif request.param == "mysql":
        place = request.getfixturevalue("mysql_database")
    async with AsyncExitStack() as stack:

        async def make() -> LeaseBackend:
            backend: LeaseBackend
            if request.param == "embedded":
                backend = EmbeddedBackend(tmp_path)
            elif request.param == "etcd":
                etcd, namespace = place
                settings = load_settings(
                    etcd_endpoints=etcd.endpoint,
                    etcd_namespace=namespace,
                    lease_ttl=TTL_S,
                    lease_safety_margin=0.5,
                )
                backend = EtcdBackend(settings)
            elif request.param == "mysql":
                settings = load_settings(mysql_url=place.url, lease_ttl=TTL_S, lease_safety_margin=0.5)
                lease_db = MysqlDatabase(settings, size=1)
                stack.push_async_callback(lease_db.close)
                backend = mysql_backend(settings, lease_db, owner={"host": "contract"})
            else:
                own = place
                settings = load_settings(
                    postgres_url=own.url, postgres_schema=own.schema, lease_ttl=TTL_S, lease_safety_margin=0.5
                )
                database = Database(settings)
                stack.push_async_callback(database.close)
                backend = PostgresBackend(settings, database, owner={"host": "contract"})
            await backend.start()
            stack.push_async_callback(backend.close)
            return backend

        yield make


async def claim(backend: LeaseBackend, pool: IdentityPool = POOL) -> Claim:
    """One claim of ``pool``, waiting out a backend's "not claimable yet" (NotReadyError) by condition."""
    deadline = time.monotonic() + READY_GUARD_S
    while True:
        try:
            return await backend.claim(pool, HOLDER)
        except NotReadyError as exc:
            if isinstance(exc, PoolExhaustedError | BackendUnavailableError) or time.monotonic() > deadline:
                raise
            await anyio.sleep(0.05)


async def test_claims_are_exclusive_and_the_next_holder_inherits_the_exact_final_mark(backends: Backends) -> None:
    one, two = await backends(), await backends()
    held = [await claim(one), await claim(two), await claim(one)]
    assert sorted(c.identity for c in held) == [0, 1, 2]
    assert all(c.valid() for c in held)
    with pytest.raises(PoolExhaustedError):
        await two.claim(POOL, HOLDER)
    await one.release(held[0], 123)
    heir = await claim(two)
    assert heir.identity == held[0].identity and heir.high_water_mark == 123


async def test_marks_only_rise_until_the_release(backends: Backends) -> None:
    one = await backends()
    first = await claim(one, ONE)
    await first.record_mark(500)
    await first.record_mark(400)  # a lower reservation never lowers the stored mark
    await one.release(first, None)
    again = await claim(await backends(), ONE)
    assert again.high_water_mark == 500


async def test_a_released_claim_is_not_valid_and_calls_no_loss_callback(backends: Backends) -> None:
    one = await backends()
    held = await claim(one)
    told: list[str] = []
    held.on_lost(lambda _claim, reason: told.append(reason))
    await one.release(held, None)
    assert not held.valid() and told == []


async def test_fleet_records_are_created_once_and_replaced_only_by_compare_and_set(backends: Backends) -> None:
    one, two = await backends(), await backends()
    assert await one.read_record("contract") is None
    assert await one.swap_record("contract", None, {"layout": "a"})
    assert not await two.swap_record("contract", None, {"layout": "b"})
    assert not await two.swap_record("contract", {"layout": "b"}, {"layout": "c"})
    assert await two.swap_record("contract", {"layout": "a"}, {"layout": "c"})
    assert await one.read_record("contract") == {"layout": "c"}
    assert await one.fleet_id() == await two.fleet_id()


async def test_a_member_token_is_confirmed_while_its_process_lives_and_claims_are_counted(backends: Backends) -> None:
    one, two = await backends(), await backends()
    token = one.member_token()
    assert token is not None
    assert await two.has_member(token) is True
    assert await two.has_member("0" * len(token)) is False
    held = [await claim(one), await claim(two)]
    assert await one.count_held(POOL) == len(held)
    await one.close()
    assert await two.has_member(token) is False
