"""The etcd sequence store against a real etcd: key layout, guarded advances, conflicts between stores, outage."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from app.errors import BackendUnavailableError, SequenceConflictError, SequenceOverflowError, UnknownSequenceError
from app.settings import Settings
from app.storage.etcd.sequences import EtcdSequenceStore
from app.storage.sequences import MAX_VALUE, Run, run_last
from tests.support.etcd import EtcdServer

pytestmark = [pytest.mark.anyio, pytest.mark.integration]  # a real etcd


def span(run: Run) -> tuple[int, int]:
    """(first, last) of a run of increment 1."""
    assert run[2] == 1
    return run[0], run_last(run)


def store_for(endpoint: str, namespace: str, **overrides: object) -> EtcdSequenceStore:
    """A store on ``endpoint`` with 5 s for a connection or a request: these tests are about what is stored, and a
    loaded machine's etcd has missed 1 s (a stopped etcd refuses at once, so the outage test does not wait)."""
    settings = Settings(
        etcd_endpoints=endpoint,
        etcd_namespace=namespace,
        etcd_request_timeout=5.0,
        etcd_connect_timeout=5.0,
        **overrides,
    )
    return EtcdSequenceStore(settings)


async def test_create_reserve_and_the_stored_key(etcd_server: EtcdServer, etcd_namespace: str) -> None:
    store = store_for(etcd_server.endpoint, etcd_namespace, max_sequences=2)
    try:
        record, created = await store.create("orders", 1, 1000)
        assert created and record.next == 1
        assert (await store.create("orders", 1, 1000))[1] is False
        with pytest.raises(SequenceConflictError, match="other settings"):
            await store.create("orders", 5, 1000)
        assert span(await store.reserve("orders", 10)) == (1, 10)
        assert span(await store.reserve("orders", 2**40)) == (11, 2**40 + 10)
        value = etcd_server.etcdctl("get", f"{etcd_namespace}idmint/sequences/orders", "--print-value-only")
        assert json.loads(value) == {"start": 1, "cache": 1000, "next": 2**40 + 11}
        await store.create("edge", MAX_VALUE - 1, 1)
        with pytest.raises(SequenceConflictError, match="at most 2"):
            await store.create("third", 1, 1)
        with pytest.raises(SequenceOverflowError, match=r"2\*\*63-1"):
            await store.reserve("edge", 3)
        assert span(await store.reserve("edge", 3, partial=True)) == (MAX_VALUE - 1, MAX_VALUE)
        assert [r.name for r in await store.list()] == ["edge", "orders"]
        with pytest.raises(UnknownSequenceError):
            await store.reserve("nope", 1)
    finally:
        await store.close()


async def test_competing_stores_never_overlap(etcd_server: EtcdServer, etcd_namespace: str) -> None:
    stores = [store_for(etcd_server.endpoint, etcd_namespace) for _ in range(3)]
    try:
        await stores[0].create("orders", 1, 10)

        async def worker(store: EtcdSequenceStore, n: int) -> list[tuple[int, int]]:
            return [span(await store.reserve("orders", 1 + (i * 7 + n) % 50)) for i in range(30)]

        got = await asyncio.gather(*(worker(s, n) for n in range(4) for s in stores))
        spans = sorted(r for rs in got for r in rs)
        assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
        assert spans[-1][1] + 1 == (await stores[1].get("orders")).next
        assert spans[0][0] == 1 and sum(b - a + 1 for a, b in spans) == spans[-1][1]  # no integer lost either
    finally:
        for s in stores:
            await s.close()


async def test_an_outage_is_a_503_and_a_value_written_by_someone_else_is_respected(
    etcd_server: EtcdServer, etcd_namespace: str
) -> None:
    store = store_for(etcd_server.endpoint, etcd_namespace)
    try:
        await store.create("orders", 1, 10)
        assert span(await store.reserve("orders", 5)) == (1, 5)
        # An operator moves the allocation point on: our cached revision is stale, the guarded write sees it.
        etcd_server.etcdctl(
            "put", f"{etcd_namespace}idmint/sequences/orders", json.dumps({"start": 1, "cache": 10, "next": 1000})
        )
        assert span(await store.reserve("orders", 5)) == (1000, 1004)
        etcd_server.stop()
        with pytest.raises(BackendUnavailableError, match="etcd"):
            await store.reserve("orders", 5)
        etcd_server.start()
        assert span(await store.reserve("orders", 5)) == (1005, 1009)
    finally:
        await store.close()


async def test_give_back_is_one_guarded_transaction(etcd_server: EtcdServer, etcd_namespace: str) -> None:
    mine, other = (store_for(etcd_server.endpoint, etcd_namespace) for _ in range(2))
    key = f"{etcd_namespace}idmint/sequences/orders"
    try:
        await mine.create("orders", 1, 10)
        assert span(await mine.reserve("orders", 100)) == (1, 100)
        assert await mine.give_back("orders", 41, 100, 1.0)
        assert json.loads(etcd_server.etcdctl("get", key, "--print-value-only"))["next"] == 41
        assert not await mine.give_back("orders", 41, 100, 1.0)  # never twice
        assert span(await other.reserve("orders", 10)) == (41, 50)

        assert span(await mine.reserve("orders", 100)) == (51, 150)
        assert span(await other.reserve("orders", 5)) == (151, 155)  # another replica reserved since
        assert not await mine.give_back("orders", 60, 150, 1.0)
        assert span(await other.reserve("orders", 1)) == (156, 156)

        assert span(await mine.reserve("orders", 10)) == (157, 166)
        # The same value written again by someone else (a new mod revision): the compare fails, the change is applied
        # to the value read back, and that value is still what our reservation wrote, so nobody reserved since: the
        # hand-back applies (as on the embedded backend, where the value is all there is to compare).
        value = etcd_server.etcdctl("get", key, "--print-value-only").strip()
        etcd_server.etcdctl("put", key, value)
        assert await mine.give_back("orders", 160, 166, 1.0)
        assert json.loads(etcd_server.etcdctl("get", key, "--print-value-only"))["next"] == 160
        # A record rewritten with another value (an operator's PATCH of the cache): nothing goes back.
        assert span(await mine.reserve("orders", 10)) == (160, 169)
        record = json.loads(etcd_server.etcdctl("get", key, "--print-value-only"))
        etcd_server.etcdctl("put", key, json.dumps({**record, "cache": 11}))
        assert not await mine.give_back("orders", 165, 169, 1.0)
        assert json.loads(etcd_server.etcdctl("get", key, "--print-value-only"))["next"] == 170

        assert span(await mine.reserve("orders", 10)) == (170, 179)
        etcd_server.stop()
        try:
            with pytest.raises(BackendUnavailableError):
                await mine.give_back("orders", 175, 179, 0.5)
        finally:
            etcd_server.start()
        assert (await other.get("orders")).next == 180  # no answer: nothing was handed back
    finally:
        await mine.close()
        await other.close()
