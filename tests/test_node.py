"""The node above the lease interface: high-water marks across restarts, clock set back, refused identities.

These use the embedded backend (the interface's local implementation) and real generators with an injected clock.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import anyio
import pytest

from app.errors import NotReadyError
from app.issuing.issuer import no_charge
from app.issuing.node import Node
from app.schemes import get_scheme
from tests.helpers import CLAIMING, TIMESTAMP_FIELD, FakeClock, new_node, started

pytestmark = pytest.mark.anyio


def node_at(state: Path, offset_s: float = 0.0, **overrides: object) -> Node:
    """A node whose clock runs ``offset_s`` seconds off the wall clock (set back when negative)."""
    return new_node(state, FakeClock.running_from_now(offset_s), **overrides)


def crash(node: Node) -> None:
    """The OS drops the locks; no final mark is written, only the reservations already recorded."""
    for issuer in node.issuers.values():
        for claim in issuer.holder.claims:
            claim.close()  # type: ignore[attr-defined]
    for task in node._tasks:
        task.cancel()


async def issue_values(node: Node, scheme: str, n: int) -> list[int]:
    return (await node.issuer(scheme).issue(n, {}, charge=no_charge)).values()


def timestamps(scheme: str, values: list[int]) -> list[int]:
    s = get_scheme(scheme)
    key = TIMESTAMP_FIELD[scheme]
    return [s.fields(v)[key] for v in values]


async def test_clean_restart_with_clock_set_back_issues_above_every_earlier_id(tmp_path: Path) -> None:
    async with started(node_at(tmp_path)) as first:
        before = {name: await issue_values(first, name, 500) for name in CLAIMING}
        ids_before = {name: first.issuers[name].holder.claims[0].identity for name in before}

    async with started(node_at(tmp_path, offset_s=-0.3)) as again:  # clock set back 0.3 s: within max_clock_wait
        for name, old in before.items():
            assert again.issuers[name].holder.claims[0].identity == ids_before[name]  # same identity reused
            new = await issue_values(again, name, 500)
            assert min(timestamps(name, new)) > max(timestamps(name, old)) or name == "siq", name
            assert set(new).isdisjoint(old)


async def test_crash_then_clock_set_back_never_repeats(tmp_path: Path) -> None:
    first = node_at(tmp_path)
    try:
        await first.start()
        # Not siq: its timestamps are whole seconds, so a restart within the second shares them (disjointness is
        # what the clean-restart test checks for it).
        old = {name: await issue_values(first, name, 2000) for name in CLAIMING if name != "siq"}
    finally:
        crash(first)  # its stop(): no final mark, only the reservations already recorded

    async with started(node_at(tmp_path, offset_s=-0.5)) as nxt:
        # Up to 1.5 s of wait for the inherited marks: not ready (503) while it is over a second, then issuing.
        deadline = time.monotonic() + 5
        while not nxt.readiness()[0]:
            assert time.monotonic() < deadline, nxt.readiness()
            await anyio.sleep(0.05)
        for name, values in old.items():
            new = await issue_values(nxt, name, 2000)
            assert min(timestamps(name, new)) > max(timestamps(name, values)), name


async def test_identity_with_mark_far_ahead_is_refused_and_another_claimed(tmp_path: Path) -> None:
    async with started(node_at(tmp_path, offset_s=3600)) as first:  # a node whose clock ran an hour ahead
        await issue_values(first, "hlc-ulid", 10)
        held = first.issuers["hlc-ulid"].holder.claims[0].identity

    async with started(node_at(tmp_path, max_clock_wait=5.0)) as nxt:
        issuer = nxt.issuers["hlc-ulid"]
        assert issuer.holder.claims[0].identity != held
        assert held in issuer.holder.ahead  # not claimed again before this node's clock reaches its mark
        await issue_values(nxt, "hlc-ulid", 10)


async def test_a_pool_refused_whole_for_a_mark_ahead_is_claimed_again_once_the_clock_caught_up(tmp_path: Path) -> None:
    """One generator ID, its mark 60 s ahead of the next node's clock: not ready, naming the refusal and when it
    ends (not "held by another process": nothing holds it), then claimed once that clock has caught up."""
    async with started(node_at(tmp_path, offset_s=60, eight_byte_pool="5-5")) as first:
        before = await issue_values(first, "eight-byte", 100)
    clock = FakeClock.running_from_now()
    async with started(new_node(tmp_path, clock, max_clock_wait=5.0, eight_byte_pool="5-5")) as nxt:
        ready, detail = nxt.readiness()
        reason = detail["eight-byte"]["reason"]
        assert not ready and "refused by this node" in reason and "claimable again in" in reason, reason
        clock.ns += 60 * 10**9  # the node's clock has caught up with the mark
        issuer = nxt.issuers["eight-byte"]
        deadline = time.monotonic() + 30  # a guard against a node that never retries, not a budget
        while issuer.generator is None:
            assert time.monotonic() < deadline, nxt.readiness()
            await anyio.sleep(0.05)
        after = await issue_values(nxt, "eight-byte", 100)
        assert min(timestamps("eight-byte", after)) > max(timestamps("eight-byte", before))


async def test_static_identity_with_mark_far_ahead_is_not_ready(tmp_path: Path) -> None:
    async with started(node_at(tmp_path, offset_s=3600, siq_shard=4)) as first:
        await issue_values(first, "siq", 10)
    async with started(node_at(tmp_path, siq_shard=4)) as nxt:
        ready, detail = nxt.readiness()
        assert not ready and "static shard 4" in detail["siq"]["reason"]


async def test_several_eight_byte_generator_ids(tmp_path: Path) -> None:
    async with started(node_at(tmp_path, eight_byte_generators=3)) as node:
        issuer = node.issuers["eight-byte"]
        held = {c.identity for c in issuer.holder.claims}
        assert len(held) == 3 and all(0 <= g <= 2047 for g in held)
        values = await issue_values(node, "eight-byte", 1000)
        gens = {get_scheme("eight-byte").fields(v)["generator_id"] for v in values}
        assert gens == held and len(set(values)) == 1000


async def test_a_request_waiting_on_the_clock_through_a_new_claim_is_refused_not_mixed(tmp_path: Path) -> None:
    """A batch that waits for the clock (eight-byte: 64 IDs per ms) while the node re-claims its identity is a 503,
    never IDs of two identities in one answer (the recorded mark covers the current identity only)."""
    async with started(node_at(tmp_path)) as node:
        issuer = node.issuers["eight-byte"]
        holder = issuer.holder
        task = asyncio.create_task(issuer.issue(60_000, {}, charge=no_charge))  # about 0.9 s of the cap
        await asyncio.sleep(0.1)
        assert not task.done()
        held = [c.identity for c in holder.claims]
        holder.generator = holder.factory(held, holder.recorded_mark)  # as a re-claim leaves it: a new generator
        with pytest.raises(NotReadyError, match="claimed another identity while the request waited"):
            await task
