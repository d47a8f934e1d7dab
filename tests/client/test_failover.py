"""Failover across two real replicas leasing their identities from a real etcd (so their IDs never collide).

SIGKILL one replica under 8 drawing threads (no exception, no duplicate, the survivor serves); stop both (one
clear error naming both); restart one (the client recovers); a 1,000,000-ID stream whose replica is killed
half-way completes from the other.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from idmint_client import AsyncClient, Client, NoReplicaAvailableError

from tests.client.conftest import issued_total, replica_on
from tests.support.server import Server
from tests.test_replicas import etcd_env

pytestmark = pytest.mark.anyio

SCHEME = "hlc-ulid"
"""A scheme whose node identity (publisher ID) is leased, so two replicas' IDs differ by construction."""


def two_replicas(tmp_path: Path, env: dict[str, str]) -> tuple[Server, Server]:
    """Two ready replicas holding different identities; both stopped when they do not get there."""
    a, b = replica_on(tmp_path, env), replica_on(tmp_path, env)
    try:
        a.wait("/readyz")
        b.wait("/readyz")
        held = [
            {s["name"]: s["node"].get("identities") for s in r.get("/v1/schemes").json()["schemes"]} for r in (a, b)
        ]
        assert held[0][SCHEME] != held[1][SCHEME], held
    except BaseException:
        a.stop()
        b.stop()
        raise
    return a, b


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll ``condition`` until it holds (a condition, not a time: generous for a loaded machine)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.05)


def test_sigkill_under_eight_threads_then_both_down_then_one_back(
    tmp_path: Path, etcd_server, etcd_namespace: str
) -> None:
    env = etcd_env(etcd_server, etcd_namespace)
    a, b = two_replicas(tmp_path, env)
    restarted: Server | None = None
    stop = threading.Event()
    results: list[list[str]] = [[] for _ in range(8)]
    errors: list[BaseException] = []
    try:
        with Client([a.url, b.url], max_age=1.0, min_refill=100, timeout=5) as client:

            def draw(out: list[str]) -> None:
                try:
                    while not stop.is_set():
                        for _ in range(50):
                            out.append(client.new_id(SCHEME))
                        time.sleep(0.005)
                except BaseException as exc:  # the test asserts there is none
                    errors.append(exc)

            threads = [threading.Thread(target=draw, args=(r,)) for r in results]
            for t in threads:
                t.start()
            # Load measured in work done, not in seconds (a loaded machine draws more slowly): the kill comes once
            # the threads are drawing, and they stop once 1,000 more were drawn and the survivor served 1,000 more.
            wait_until(lambda: sum(map(len, results)) > 1000 or bool(errors), "the threads draw")
            served_by_b = issued_total(b, SCHEME)
            drawn_before_kill = sum(map(len, results))
            a.kill()

            def drawn_from_the_survivor() -> bool:
                drawn = sum(map(len, results)) > drawn_before_kill + 1000
                return bool(errors) or (drawn and issued_total(b, SCHEME) > served_by_b + 1000)

            wait_until(drawn_from_the_survivor, "1,000 IDs drawn after the kill, served by the survivor")
            stop.set()
            for t in threads:
                t.join(30)
            assert not errors, errors
            everything = [i for r in results for i in r]
            assert len(everything) > drawn_before_kill + 1000, "drawing stopped at the kill"
            assert len(set(everything)) == len(everything), "duplicate IDs"
            assert issued_total(b, SCHEME) > served_by_b + 1000, "the survivor was not used"

            b.stop()
            deadline = time.monotonic() + 10
            with pytest.raises(NoReplicaAvailableError) as caught:
                while time.monotonic() < deadline:  # the buffer may still hold fresh IDs for up to max_age
                    client.new_id(SCHEME)
            assert set(caught.value.reasons) == {a.url, b.url}
            assert a.url in str(caught.value) and b.url in str(caught.value)

            restarted = replica_on(tmp_path, env, port=b.port)
            restarted.wait("/readyz")
            after = [client.new_id(SCHEME) for _ in range(1000)]
            assert len(set(after)) == 1000 and set(after).isdisjoint(everything)
            assert len(client.ids(SCHEME, 10)) == 10
    finally:
        stop.set()
        for r in (a, b, restarted):
            if r is not None:
                r.stop()


def test_stream_of_a_million_carries_on_from_the_other_replica_when_killed_half_way(
    tmp_path: Path, etcd_server, etcd_namespace: str
) -> None:
    a, b = two_replicas(tmp_path, etcd_env(etcd_server, etcd_namespace))
    total = 1_000_000
    try:
        with Client([a.url, b.url], timeout=10) as client:
            seen: set[str] = set()
            count = 0
            for one in client.stream(SCHEME, total):  # the first call goes to the first replica, a
                seen.add(one)
                count += 1
                if count == total // 2:
                    assert issued_total(b, SCHEME) == 0
                    a.kill()
            assert count == total and len(seen) == total
            from_b = issued_total(b, SCHEME)
            assert 0 < from_b < total, from_b
    finally:
        a.stop()
        b.stop()


async def test_async_stream_and_new_id_survive_a_killed_replica(
    tmp_path: Path, etcd_server, etcd_namespace: str
) -> None:
    a, b = two_replicas(tmp_path, etcd_env(etcd_server, etcd_namespace))
    total = 300_000
    try:
        async with AsyncClient([a.url, b.url], timeout=10, max_age=0.5) as client:
            seen: list[str] = [await client.new_id(SCHEME) for _ in range(1000)]
            count = 0
            async for one in client.stream(SCHEME, total):
                seen.append(one)
                count += 1
                if count == total // 3:
                    a.kill()
            assert count == total
            await asyncio.sleep(0.6)  # the buffer's batch (maybe from a) expires; refills go to b
            seen.extend(await asyncio.gather(*(client.new_id(SCHEME) for _ in range(5000))))
            assert len(set(seen)) == len(seen)
    finally:
        a.stop()
        b.stop()


def test_a_real_503_moves_on_and_keeps_that_replica_out_for_that_scheme_only(
    tmp_path: Path, etcd_server, etcd_namespace: str
) -> None:
    env = etcd_env(etcd_server, etcd_namespace, IDMINT_EIGHT_BYTE_POOL="0-0")  # one generator ID for two replicas
    holder = replica_on(tmp_path, env)
    refuser: Server | None = None
    try:
        holder.wait("/readyz")
        refuser = replica_on(tmp_path, env)
        refuser.wait("/healthz")
        # Start-up claims run in the background: the refuser serves hlc-ulid once it holds a publisher ID.
        deadline = time.monotonic() + 60
        while not refuser.get("/readyz").json()["schemes"]["hlc-ulid"]["ready"]:
            assert time.monotonic() < deadline, refuser.log_tail()
            time.sleep(0.05)
        assert refuser.get("/v1/ids/eight-byte").status_code == 503
        with Client([refuser.url, holder.url]) as client:
            started = time.monotonic()
            got = [i for _ in range(20) for i in client.ids("eight-byte", 100)]
            elapsed = time.monotonic() - started
            assert len(set(got)) == 2000
            assert issued_total(refuser, "eight-byte") == 0 and issued_total(holder, "eight-byte") == 2000
            refused = [
                line
                for line in refuser.get("/metrics").text.splitlines()
                if line.startswith("idmint_requests_total{") and 'status="503"' in line and "/v1/ids/" in line
            ]
            # the test's own probe, then the client's one ask; then kept out for its Retry-After (1 s here)
            assert sum(float(line.rsplit(" ", 1)[1]) for line in refused) <= 2 + elapsed // 1
            for _ in range(10):  # the refuser still serves the schemes it can issue
                client.ids("hlc-ulid", 10)
            assert issued_total(refuser, "hlc-ulid") > 0 and issued_total(holder, "hlc-ulid") > 0
    finally:
        if refuser is not None:
            refuser.stop()
        holder.stop()
