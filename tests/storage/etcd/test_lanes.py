"""The etcd client's lanes, against a real etcd: the stores' calls holding every connection of their lane leave the
lease's keepalives their own connections; and the etcd backend's lease calls are on the lease's lane."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from app.settings import load_settings
from app.storage.etcd.backend import EtcdBackend
from app.storage.etcd.client import LANE_LIMITS, LEASE_LANE, STORES_LANE, EtcdCallError, EtcdClient, Event
from tests.support.etcd import EtcdServer

pytestmark = [pytest.mark.anyio, pytest.mark.integration]  # a real etcd


@pytest.fixture
async def client(etcd_server: EtcdServer) -> AsyncIterator[EtcdClient]:
    etcd_server.start()
    c = EtcdClient([etcd_server.endpoint], timeout=2.0, budget=2.0, connect_timeout=2.0)
    try:
        yield c
    finally:
        await c.close()


async def _hold(client: EtcdClient, key: bytes, created: asyncio.Event) -> None:
    """A watch that never ends: it holds one connection of ``client``'s lane until cancelled."""
    stream = client.watch(key, 0, created)
    events: list[list[Event]] = [batch async for batch in stream]
    raise AssertionError(f"the watch ended: {events}")


async def test_store_calls_holding_every_connection_never_delay_a_keepalive(
    client: EtcdClient, etcd_namespace: str
) -> None:
    assert client.lane == STORES_LANE
    lease = client.limited(timeout=2.0, budget=2.0, lane=LEASE_LANE)
    lease_id, _ = await lease.grant(10)
    slots = LANE_LIMITS.max_connections
    assert slots is not None
    created = [asyncio.Event() for _ in range(slots)]
    holders = [
        asyncio.create_task(_hold(client, f"{etcd_namespace}held/{i}".encode(), created[i])) for i in range(slots)
    ]
    try:
        deadline = time.monotonic() + 60
        while not all(event.is_set() for event in created):
            assert time.monotonic() < deadline, "not within 60 s: every connection of the stores' lane held"
            await asyncio.sleep(0.05)
        with pytest.raises(EtcdCallError, match="no answer in time"):  # the stores' lane is full
            await client.limited(timeout=0.5, budget=0.5).range(f"{etcd_namespace}x".encode())
        for _ in range(3):  # the lease's lane is not
            assert await lease.keepalive(lease_id) > 0
        await lease.revoke(lease_id)
    finally:
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, return_exceptions=True)


async def test_the_backend_keeps_its_lease_on_the_lease_lane(etcd_server: EtcdServer, etcd_namespace: str) -> None:
    etcd_server.start()
    settings = load_settings(etcd_endpoints=[etcd_server.endpoint], etcd_namespace=etcd_namespace)
    shared = EtcdClient([etcd_server.endpoint], timeout=2.0, budget=2.0, connect_timeout=2.0)
    backend = EtcdBackend(settings, client=shared)
    try:
        assert backend._client.lane == LEASE_LANE and backend._revoking.lane == LEASE_LANE
        assert shared.lane == STORES_LANE
    finally:
        await backend.close()
        await shared.close()
