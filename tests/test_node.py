"""The node above the lease interface: high-water marks across restarts, clock set back, refused identities.

These use the embedded backend (the interface's local implementation) and real generators with an injected clock.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from app import __version__
from app.lease.embedded import EmbeddedBackend
from app.metrics import Metrics
from app.node import Node
from app.schemes import get_scheme
from tests.helpers import SCHEMES, make_settings


def shifted(offset_s: float):  # noqa: ANN201
    offset = int(offset_s * 1e9)
    return lambda: time.time_ns() + offset


def new_node(state: Path, offset_s: float = 0.0, **overrides: object) -> Node:
    settings = make_settings(state, **overrides)
    return Node(settings, EmbeddedBackend(state), Metrics(list(SCHEMES), __version__), clock=shifted(offset_s))


async def issue_values(node: Node, scheme: str, n: int) -> list[int]:
    return (await node.issuer(scheme).issue(n, {})).values()


def timestamps(scheme: str, values: list[int]) -> list[int]:
    s = get_scheme(scheme)
    key = {"muid": "timestamp_us", "eight-byte": "timestamp_ms", "hlc-ulid": "timestamp_ms",
           "siq": "seconds", "wiji": "timestamp_us", "uuidv7": "timestamp_ms", "ulid": "timestamp_ms",
           "typeid": "timestamp_ms", "ksuid": "timestamp_s", "snowflake": "timestamp_ms"}[scheme]
    return [s.fields(v)[key] for v in values]


def test_clean_restart_with_clock_set_back_issues_above_every_earlier_id(tmp_path: Path) -> None:
    async def scenario() -> None:
        first = new_node(tmp_path)
        await first.start()
        before = {name: await issue_values(first, name, 500) for name in ("muid", "hlc-ulid", "eight-byte", "siq")}
        ids_before = {name: first.issuers[name].identity.claims[0].identity for name in before}
        await first.stop()

        again = new_node(tmp_path, offset_s=-0.3)  # clock set back 0.3 s: within max_clock_wait
        await again.start()
        for name, old in before.items():
            assert again.issuers[name].identity.claims[0].identity == ids_before[name]  # same identity reused
            new = await issue_values(again, name, 500)
            assert min(timestamps(name, new)) > max(timestamps(name, old)) or name == "siq", name
            assert set(new).isdisjoint(old)
        await again.stop()

    asyncio.run(scenario())


def test_crash_then_clock_set_back_never_repeats(tmp_path: Path) -> None:
    async def scenario() -> None:
        first = new_node(tmp_path)
        await first.start()
        old = {name: await issue_values(first, name, 2000) for name in ("hlc-ulid", "eight-byte", "muid")}
        # Crash: the OS drops the locks; no final mark is written, only the reservations already recorded.
        for issuer in first.issuers.values():
            for claim in issuer.identity.claims:
                claim.close()  # type: ignore[attr-defined]
        for task in first._tasks:
            task.cancel()

        nxt = new_node(tmp_path, offset_s=-0.5)
        await nxt.start()
        # Up to 1.5 s of wait for the inherited marks: not ready (503) while it is over a second, then issuing.
        deadline = time.monotonic() + 5
        while not nxt.readiness()[0]:
            assert time.monotonic() < deadline, nxt.readiness()
            await asyncio.sleep(0.05)
        for name, values in old.items():
            new = await issue_values(nxt, name, 2000)
            assert min(timestamps(name, new)) > max(timestamps(name, values)), name
        await nxt.stop()

    asyncio.run(scenario())


def test_identity_with_mark_far_ahead_is_refused_and_another_claimed(tmp_path: Path) -> None:
    async def scenario() -> None:
        first = new_node(tmp_path, offset_s=3600)  # a node whose clock ran an hour ahead
        await first.start()
        await issue_values(first, "hlc-ulid", 10)
        held = first.issuers["hlc-ulid"].identity.claims[0].identity
        await first.stop()

        nxt = new_node(tmp_path, max_clock_wait=5.0)
        await nxt.start()
        issuer = nxt.issuers["hlc-ulid"]
        assert issuer.identity.claims[0].identity != held
        assert held in issuer.identity.excluded
        await issue_values(nxt, "hlc-ulid", 10)
        await nxt.stop()

    asyncio.run(scenario())


def test_static_identity_with_mark_far_ahead_is_not_ready(tmp_path: Path) -> None:
    async def scenario() -> None:
        first = new_node(tmp_path, offset_s=3600, siq_shard=4)
        await first.start()
        await issue_values(first, "siq", 10)
        await first.stop()
        nxt = new_node(tmp_path, siq_shard=4)
        await nxt.start()
        ready, detail = nxt.readiness()
        assert not ready and "static shard 4" in detail["siq"]["reason"]
        await nxt.stop()

    asyncio.run(scenario())


def test_several_eight_byte_generator_ids(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = new_node(tmp_path, eight_byte_generators=3)
        await node.start()
        issuer = node.issuers["eight-byte"]
        assert sorted(c.identity for c in issuer.identity.claims) == [0, 1, 2]
        values = await issue_values(node, "eight-byte", 1000)
        gens = {get_scheme("eight-byte").fields(v)["generator_id"] for v in values}
        assert gens == {0, 1, 2} and len(set(values)) == 1000
        await node.stop()

    asyncio.run(scenario())
