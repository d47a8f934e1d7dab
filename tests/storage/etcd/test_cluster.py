"""The etcd backend against a real 3-member etcd cluster: a member killed or stalled is invisible to claims.

Also: the endpoint order differs between backends (shuffled), and auth tokens that expire are re-obtained.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from app.settings import load_settings
from app.storage.etcd.backend import EtcdBackend
from app.storage.etcd.claim import EtcdClaim
from app.storage.etcd.client import EtcdClient
from tests.storage.etcd.test_backend import HLC_ULID, SIQ, eventually, holder
from tests.support.etcd import EtcdCluster, EtcdServer

pytestmark = [pytest.mark.anyio, pytest.mark.integration]  # a real etcd

TTL_S = 6
MARGIN_S = 1.0
"""A refresh is due every 2 s and the claims fail closed 5 s after the last one: 3 s for a leader election
(etcd's worst case with its default election timeout is 2 s) and the retries after it."""


@asynccontextmanager
async def backend(endpoints: str, namespace: str, **overrides: Any) -> AsyncIterator[EtcdBackend]:
    settings = load_settings(
        etcd_endpoints=endpoints,
        etcd_namespace=namespace,
        etcd_lease_ttl=TTL_S,
        etcd_safety_margin=MARGIN_S,
        etcd_connect_timeout=1.0,
        etcd_request_timeout=1.0,
        **overrides,
    )
    b = EtcdBackend(settings)
    await b.start()
    try:
        yield b
    finally:
        await b.close()


async def watch_validity(claims: list[EtcdClaim], seconds: float) -> list[str]:
    """Check every 20 ms for ``seconds`` that each claim stays valid; the moments it did not."""
    gaps = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for claim in claims:
            if not claim.valid():
                gaps.append(f"{time.monotonic():.2f}: {claim.key} invalid (lost: {claim.lost_reason})")
        await anyio.sleep(0.02)
    return gaps


@pytest.mark.parametrize("fault", ["kill", "pause"])
async def test_losing_the_member_in_use_keeps_every_claim_valid(etcd_cluster: EtcdCluster, fault: str) -> None:
    async with backend(etcd_cluster.endpoints, f"cluster-{fault}/") as a:
        claims = [await a.claim(HLC_ULID, holder(0)), await a.claim(SIQ, holder(0))]
        held = [c.identity for c in claims]
        await claims[0].record_mark(1)
        for round_ in range(2):  # the member in use, then the one it moved to
            in_use = a._client.endpoint
            member = next(m for m in etcd_cluster.members if m.endpoint == in_use)
            before = [c.watch.endpoint for c in claims]
            assert before == [in_use, in_use]
            if fault == "kill":
                await anyio.to_thread.run_sync(member.kill)
            else:
                member.pause()
            try:
                gaps = await watch_validity(claims, 5.0 if fault == "pause" else 2 * TTL_S / 3 + 1)
                assert not gaps, gaps
                # The client moved on, the watches followed it, and marks record on another member.
                assert a._client.endpoint != in_use
                assert all(c.watch.endpoint == a._client.endpoint and c.watch.task for c in claims)
                await claims[0].record_mark(10 + round_)
            finally:
                if fault == "kill":
                    await anyio.to_thread.run_sync(member.start)
                else:
                    member.resume()
            assert [c.valid() for c in claims] == [True, True] and a.status()["healthy"]
        assert [c.identity for c in claims] == held and not any(c.lost for c in claims)


async def test_endpoint_order_differs_between_backends(etcd_cluster: EtcdCluster) -> None:
    firsts = set()
    for n in range(12):
        async with backend(etcd_cluster.endpoints, f"order-{n}/") as b:
            firsts.add(b._client.endpoint)
            assert sorted(b._client.endpoints) == sorted(etcd_cluster.endpoints.split(","))
    assert len(firsts) >= 2, firsts  # 12 backends all on one member: (1/3)**11 by chance


async def test_expired_auth_token_is_obtained_again(etcd_factory: Callable[..., EtcdServer]) -> None:
    server = etcd_factory("--auth-token", "simple", "--auth-token-ttl", "1")
    server.etcdctl("user", "add", "root:rootpw")
    server.etcdctl("auth", "enable")
    async with backend(server.endpoint, "auth-ttl/", etcd_user="root", etcd_password="rootpw") as b:
        claim = await b.claim(HLC_ULID, holder(0))
        first_token = b._client._link.token
        assert first_token
        # Simple tokens live --auth-token-ttl seconds without use; every request after that is refused with
        # UNAUTHENTICATED until the client authenticates again -- which it does by itself.
        for mark in range(1, 4):
            await anyio.sleep(2.5)
            await claim.record_mark(mark)
        assert b._client._link.token != first_token
        await eventually(claim.valid, 1, "claim valid with a new token")
        assert not claim.lost and b.status()["healthy"]


async def test_a_keepalive_sent_to_a_stalled_member_is_answered_by_another_without_waiting_out_its_timeout(
    etcd_cluster: EtcdCluster,
) -> None:
    """The keepalive is hedged: the member in use is stalled (SIGSTOP) and the attempt's timeout is two minutes, yet
    the next member, asked once the first has not answered within ``hedge_after``, renews the lease and becomes the
    member in use. Without the hedge the keepalive would wait out those two minutes (so the bound below, half of
    them, is not a speed budget: it only tells a hedge from none)."""
    client = EtcdClient(etcd_cluster.endpoints.split(","), timeout=120, budget=120, connect_timeout=1)
    try:
        lease_id, _ = await client.grant(30)
        stalled = next(m for m in etcd_cluster.members if m.endpoint == client.endpoint)
        stalled.pause()
        try:
            with anyio.fail_after(60):
                ttl = await client.keepalive(lease_id, timeout=120, hedge_after=0.05)
            assert ttl > 0
            assert client.endpoint != stalled.endpoint
            with anyio.fail_after(60):  # the next one goes to the member that answered, at once
                assert await client.keepalive(lease_id, timeout=120, hedge_after=60) > 0
        finally:
            stalled.resume()
        await client.revoke(lease_id)
    finally:
        await client.close()
