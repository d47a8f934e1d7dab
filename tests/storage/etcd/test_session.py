"""The etcd client and session on their own, against a real etcd; deadlines driven by an injected clock."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import anyio
import pytest

from app.errors import BackendUnavailableError, LeaseLostError
from app.storage.etcd.client import ERRORS, EtcdCallError, EtcdClient, map_error
from app.storage.etcd.session import Session
from tests.helpers import FakeClock
from tests.support.etcd import EtcdServer
from tests.support.server import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.integration]  # a real etcd


@pytest.fixture
async def client(etcd_server: EtcdServer) -> AsyncIterator[EtcdClient]:
    etcd_server.start()
    c = EtcdClient([etcd_server.endpoint], timeout=1.0, budget=1.0, connect_timeout=1.0)
    try:
        yield c
    finally:
        await c.close()


async def test_deadline_counts_from_when_the_refresh_was_sent(client: EtcdClient) -> None:
    clock = FakeClock.from_s(1000)  # monotonic seconds (clock.seconds) that move only when the test says so
    session = await Session.grant(client, 6, 1.0, clock.seconds, 1.0)
    try:
        await session.stop()  # refreshes driven by hand below
        assert session.ttl == 6 and session.deadline == 1000.0 + 6 - 1.0
        clock.set_s(1003.5)
        await session.refresh()
        assert session.deadline == 1003.5 + 6 - 1.0 and not session.lost
        clock.set_s(1001.0)  # a refresh never moves the deadline back
        await session.refresh()
        assert session.deadline == 1008.5
        await client.revoke(session.lease_id)
        with pytest.raises(LeaseLostError):
            await session.refresh()
        assert session.lost and session.lost_event.is_set()
    finally:
        await session.close(1.0)


async def test_close_revokes_the_lease(client: EtcdClient) -> None:
    session = await Session.grant(client, 30, 1.0, FakeClock.from_s(1000).seconds, 1.0)
    try:
        assert await client.time_to_live(session.lease_id) > 0
    finally:
        await session.close(1.0)
    assert session.lost and await client.time_to_live(session.lease_id) == -1


async def test_errors_map_by_code_never_by_text(client: EtcdClient) -> None:
    with pytest.raises(EtcdCallError) as info:
        await client.revoke(0x7FFF_FFFF_FFFF)
    assert info.value.code == 5
    assert isinstance(map_error(info.value, "revoking"), LeaseLostError)
    # The same text with another code means something else: only the code counts.
    assert isinstance(map_error(EtcdCallError(7, info.value.detail, "http://x"), "x"), BackendUnavailableError)
    assert all(code is None or 0 < code < 17 for code in ERRORS)


async def test_a_dead_endpoint_is_passed_over_at_once(etcd_server: EtcdServer) -> None:
    class InOrder(random.Random):
        def shuffle(self, x: list[str]) -> None:  # type: ignore[override]
            """Keep the given order: the dead endpoint first."""

    dead = f"http://127.0.0.1:{free_port()}"
    c = EtcdClient([dead, etcd_server.endpoint], timeout=1.0, budget=1.0, connect_timeout=1.0, rng=InOrder())
    try:
        assert c.endpoint == dead
        for _ in range(3):
            await c.put(b"test/session/dead-endpoint", b"1")
        assert c.endpoint == etcd_server.endpoint
        kvs, revision = await c.range(b"test/session/dead-endpoint")
        assert kvs[0].value == b"1" and revision >= kvs[0].mod_revision
    finally:
        await c.close()


async def test_a_closed_client_refuses_calls_and_opens_no_connection(etcd_server: EtcdServer) -> None:
    """A task that outlives close() (a keepalive waking late) gets an error at once, not a new connection that
    nothing would close."""
    etcd_server.start()
    c = EtcdClient([etcd_server.endpoint], timeout=1.0, budget=5.0, connect_timeout=1.0)
    await c.put(b"test/session/closed", b"1")
    await c.close()
    with pytest.raises(EtcdCallError) as info:
        await c.put(b"test/session/closed", b"2")
    assert info.value.code == 1 and "closed" in info.value.detail
    assert not c._link.http


async def test_a_session_lost_while_asleep_ends_its_keepalive_without_a_call(client: EtcdClient) -> None:
    clock = FakeClock.from_s(1000)
    outcomes: list[str] = []
    session = await Session.grant(client, 3, 0.5, clock.seconds, 1.0, lambda _s, outcome, _e: outcomes.append(outcome))
    try:
        await anyio.sleep(0.1)  # the keepalive task is now asleep until its next refresh
        session.set_lost("a watch saw the lease go")
        clock.advance_s(1.0)  # its sleep ends; it must notice the loss rather than refresh
        task = session._task
        assert task is not None
        with anyio.fail_after(5):
            await task
        assert session.lost_reason == "a watch saw the lease go"
        assert outcomes == []  # no keepalive was sent for a lease known lost
    finally:
        await session.close(1.0)
