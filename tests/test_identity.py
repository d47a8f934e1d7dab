"""The identity holder (app/issuing/holder.py) on a real etcd: a loss is pushed to it, and every deadline it compares is
on the backend's injected monotonic clock."""

from __future__ import annotations

import asyncio
import sys
import time
import types
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from app import __version__
from app.errors import NotReadyError
from app.issuing.issuer import no_charge
from app.issuing.node import Node
from app.metrics import Metrics
from app.schemes import schemes
from app.storage.etcd import CAPABILITIES as ETCD
from app.storage.etcd.backend import EtcdBackend
from app.storage.etcd.claim import EtcdClaim
from tests.helpers import FakeClock, make_settings, storage_of
from tests.storage.etcd.test_backend import eventually
from tests.support.etcd import EtcdServer, RawEtcd

pytestmark = pytest.mark.anyio

SCHEME = "hlc-ulid"
STATIC_ID = 42
"""IDMINT_HLC_ULID_PUBLISHER_ID: a static identity, so an overwritten claim key cannot be claimed back."""


@asynccontextmanager
async def etcd_node(
    tmp_path: Path, server: EtcdServer, namespace: str, mono: FakeClock | None = None, **overrides: Any
) -> AsyncIterator[Node]:
    """A started node serving only hlc-ulid with static publisher ID 42 on etcd; ``mono``: the backend's
    monotonic clock (seconds), else ``time.monotonic``."""
    settings = make_settings(
        tmp_path,
        etcd_endpoints=server.endpoint,
        etcd_namespace=namespace,
        etcd_connect_timeout=1.0,
        etcd_request_timeout=1.0,
        hlc_ulid_publisher_id=STATIC_ID,
        **overrides,
    )
    backend = EtcdBackend(settings, clock=mono.seconds) if mono is not None else EtcdBackend(settings)
    node = Node(settings, storage_of(backend, ETCD), Metrics(list(schemes()), __version__), only=[SCHEME])
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


def held_claim(node: Node) -> EtcdClaim:
    claims = node.issuers[SCHEME].holder.claims
    assert len(claims) == 1 and isinstance(claims[0], EtcdClaim), claims
    return claims[0]


@pytest.mark.parametrize("how", ["key overwritten", "lease revoked"])
async def test_a_lost_claim_stops_the_scheme_before_any_request_or_mark_tick(
    tmp_path: Path, etcd_server: EtcdServer, etcd_namespace: str, raw: RawEtcd, how: str
) -> None:
    # TTL 30 s: the lease deadline is 25 s away and the holder's mark tick 10 s; only a pushed event is this fast.
    async with etcd_node(tmp_path, etcd_server, etcd_namespace, etcd_lease_ttl=30, etcd_safety_margin=5) as node:
        holder = node.issuers[SCHEME].holder
        await node.issuers[SCHEME].issue(1, {}, charge=no_charge)
        claim = held_claim(node)
        assert node.backend.mark_interval == 10
        start = time.monotonic()
        if how == "key overwritten":  # someone else's put: the static identity cannot be claimed back
            await raw.put(claim.key.encode(), b"")
        else:  # etcd deletes the claim key with the lease; the keepalive would notice only 10 s later
            await raw.revoke_lease(claim.lease_id)

        # No request and no tick: the claim's watch tells the holder, which drops the claim at once.
        # The bound is half the mark tick (5 s), well before the tick or the lease deadline could have done it.
        await eventually(
            lambda: claim not in holder.claims, node.backend.mark_interval / 2, f"{how}: the holder dropped the claim"
        )
        assert time.monotonic() - start < node.backend.mark_interval / 2
        assert claim.lost and claim.lost_reason is not None
        if how == "key overwritten":
            with pytest.raises(NotReadyError) as info:  # the holder's reason: lost, or the re-claim refused
                await node.issuers[SCHEME].issue(1, {}, charge=no_charge)
            assert info.value.retry_after >= 1  # the HTTP layer answers it as 503 + Retry-After
            assert not node.readiness()[0]
        else:  # a new lease is granted and the free identity claimed again, on it
            await eventually(lambda: node.readiness()[0], 10.0, "re-claimed on a new lease")
            assert held_claim(node).lease_id != claim.lease_id


class _NoMonotonic(types.ModuleType):
    """Stands in for the ``time`` module inside app modules: everything as usual but ``monotonic``."""

    def __getattr__(self, name: str) -> Any:
        if name in ("monotonic", "monotonic_ns"):
            raise AssertionError(f"app code read time.{name}() directly; use the injected clock")
        return getattr(time, name)


async def test_node_on_an_injected_clock_claims_renews_and_loses_without_time_monotonic(
    tmp_path: Path, etcd_server: EtcdServer, etcd_namespace: str, raw: RawEtcd, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Far from time.monotonic(): a deadline compared with the real clock would look valid forever.
    mono = FakeClock.running_from_now()
    stub = _NoMonotonic("time")
    for name, module in list(sys.modules.items()):
        if name.startswith("app.") and getattr(module, "time", None) is time:
            monkeypatch.setattr(module, "time", stub)

    async with etcd_node(tmp_path, etcd_server, etcd_namespace, mono, etcd_lease_ttl=3, etcd_safety_margin=1) as node:
        issuer = node.issuers[SCHEME]
        # Claim.
        await issuer.issue(1, {}, charge=no_charge)
        claim = held_claim(node)
        assert claim.clock == mono.seconds and node.backend.clock == mono.seconds
        # Renew: keepalives move the deadline on the injected clock.
        first = claim.deadline
        await eventually(lambda: claim.deadline > first, 5.0, "a keepalive renewed the deadline")
        assert mono.seconds() < claim.deadline <= mono.seconds() + 3 - 1

        # Deadline passed on the injected clock only (real time did not move): fail closed at once.
        mono.ns += 10 * FakeClock.NS_IN_S
        with pytest.raises(NotReadyError, match="lease deadline passed"):
            await issuer.issue(1, {}, charge=no_charge)
        await eventually(lambda: node.readiness()[0], 10.0, "renewed and re-claimed after the deadline passed")

        # Loss: the lease revoked behind the node's back; pushed, then re-claimed on a new lease.
        lost = held_claim(node)
        await raw.revoke_lease(lost.lease_id)
        await eventually(lambda: lost not in issuer.holder.claims, 3.0, "revoked lease dropped the claim")
        await eventually(lambda: node.readiness()[0], 10.0, "re-claimed on a new lease")
        assert held_claim(node).lease_id != lost.lease_id
        await issuer.issue(1, {}, charge=no_charge)


async def test_the_marks_of_several_claims_are_recorded_at_once_and_all_must_succeed(tmp_path: Path) -> None:
    """Eight-byte holding 4 generator IDs: their 4 mark writes run together (serially, 16 fsyncs on a busy disk
    held requests up to 1.8 s), and the holder's mark moves only when every one of them was recorded."""
    from tests.helpers import new_node, started

    async with started(new_node(tmp_path, eight_byte_generators=4)) as node:
        holder = node.issuers["eight-byte"].holder
        assert len(holder.claims) == 4
        entered: list[int] = []
        everyone_in = asyncio.Event()
        fail: set[int] = set()

        def stalling(claim: Any) -> Any:
            async def record_mark(mark: int) -> None:
                entered.append(claim.identity)
                if len(entered) == len(holder.claims):
                    everyone_in.set()
                await everyone_in.wait()  # returns only once all four writes are in flight together
                if claim.identity in fail:
                    raise OSError("disk full")

            return record_mark

        for claim in holder.claims:
            claim.record_mark = stalling(claim)  # type: ignore[method-assign]
        before = holder.recorded_mark
        await asyncio.wait_for(holder.record_mark(before + 10**9), timeout=30)
        assert sorted(entered) == sorted(c.identity for c in holder.claims)
        assert holder.recorded_mark == before + 10**9

        entered.clear()
        everyone_in.clear()
        fail.add(holder.claims[2].identity)
        with pytest.raises(NotReadyError, match="disk full"):
            await asyncio.wait_for(holder.record_mark(before + 2 * 10**9), timeout=30)
        assert holder.recorded_mark == before + 10**9  # one failed write: the mark did not move
        with pytest.raises(NotReadyError, match="disk full"):
            holder.check()  # and the scheme stops issuing until a mark is recorded again


async def test_stopping_waits_for_a_mark_write_in_flight_before_the_final_mark(tmp_path: Path) -> None:
    """A mark write in flight and the final mark at a clean stop never write one claim's mark at once (on the
    embedded backend both renamed the same temporary file, and one failed: "releasing ... failed")."""
    from tests.helpers import new_node, started

    async with started(new_node(tmp_path)) as node:
        holder = node.issuers["muid"].holder
        (claim,) = holder.claims
        writing, let_go = asyncio.Event(), asyncio.Event()
        order: list[str] = []
        real_record, real_release = claim.record_mark, node.backend.release

        async def slow_record(mark: int) -> None:
            writing.set()
            await let_go.wait()
            await real_record(mark)
            order.append("mark")

        async def release(claim: Any, final_mark: int | None) -> None:
            order.append("final")
            await real_release(claim, final_mark)

        claim.record_mark = slow_record  # type: ignore[method-assign]
        node.backend.release = release  # type: ignore[method-assign]
        in_flight = asyncio.create_task(holder.record_mark(holder.recorded_mark + 10**6))
        await asyncio.wait_for(writing.wait(), timeout=30)
        stopping = asyncio.create_task(holder.stop())
        await asyncio.sleep(0)  # stop runs up to the lock
        assert order == []  # the final mark waits for the write in flight
        let_go.set()
        await asyncio.wait_for(asyncio.gather(in_flight, stopping), timeout=30)
        assert order == ["mark", "final"]
