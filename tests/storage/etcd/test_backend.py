"""The etcd lease backend alone, against a real etcd (tests/support/etcd.py): claims, marks, faults, interop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from app.errors import BackendUnavailableError, ConfigError, LeaseLostError, NotReadyError, PoolExhaustedError
from app.settings import Settings, load_settings
from app.storage.etcd.backend import EtcdBackend
from app.storage.etcd.claim import EtcdClaim
from app.storage.etcd.keys import claim_key, mark_key
from app.storage.lease import Owner
from tests.helpers import FakeClock, pool_spec
from tests.support.etcd import EtcdServer, RawEtcd, make_tls_material
from tests.support.server import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.integration]  # a real etcd

TTL_S = 2
MARGIN_S = 0.5
ROOT = Path(__file__).resolve().parents[3]

EIGHT_BYTE = pool_spec("eight-byte", minimum=0, maximum=2047, settings={"cluster_id": 0})
MUID = pool_spec("muid", minimum=0x10000000000, maximum=0x1FFFFFFFFFF, draw="random")
HLC_ULID = pool_spec("hlc-ulid", minimum=0, maximum=65535)
SIQ = pool_spec("siq", minimum=0, maximum=255, settings={"siq_domain": "example.com"})
SHARDS_RANDOM = pool_spec("siq", minimum=0, maximum=255, draw="random")


@pytest.fixture(scope="module", autouse=True)
async def one_event_loop() -> AsyncIterator[None]:
    """Keep anyio's test runner, and so one event loop, for the whole module."""
    yield


def holder(n: int) -> Owner:
    return Owner(
        host=f"replica-{n}",
        pid=1000 + n,
        version="test",
        started_at="2026-01-01T00:00:00Z",
        address=f"127.0.0.1:{8000 + n}",
    )


def etcd_settings(endpoint: str, namespace: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = dict(
        etcd_endpoints=endpoint,
        etcd_namespace=namespace,
        etcd_lease_ttl=TTL_S,
        etcd_safety_margin=MARGIN_S,
        etcd_connect_timeout=1.0,
        etcd_request_timeout=1.0,
    )
    values.update(overrides)
    return load_settings(**values)


CALM: dict[str, Any] = {"etcd_lease_ttl": 10, "etcd_connect_timeout": 5.0, "etcd_request_timeout": 5.0}
"""Settings for the tests whose subject is not time: 10 s leases (a claim's deadline is 1.5 s after the last
keepalive on TTL_S's) and 5 s for a connection or a request (1 s in :func:`etcd_settings`, which a loaded machine's
etcd has missed: rehearsal s4, four busy loops, a record_mark's connection timed out). The tests of deadlines,
outages and refusals keep :func:`etcd_settings`' own."""


@asynccontextmanager
async def backend(
    server: EtcdServer, namespace: str, clock: Callable[[], float] = time.monotonic, **overrides: Any
) -> AsyncIterator[EtcdBackend]:
    """An EtcdBackend on ``server`` (deadlines on ``clock``, monotonic seconds), started; closed on exit."""
    b = EtcdBackend(etcd_settings(server.endpoint, namespace, **overrides), clock=clock)
    try:
        await b.start()
        yield b
    finally:
        await b.close()


async def eventually(predicate: Callable[[], bool | Awaitable[bool]], timeout: float, what: str) -> float:
    """Poll until ``predicate`` is true; returns the seconds it took."""
    start = time.monotonic()
    while True:
        result = predicate()
        if not isinstance(result, bool):
            result = await result
        if result:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        await anyio.sleep(0.05)


async def keys_under(raw: RawEtcd, prefix: str) -> dict[str, tuple[dict[str, Any] | bytes, int]]:
    """key -> (value as JSON when it is JSON, lease ID)."""
    out: dict[str, tuple[dict[str, Any] | bytes, int]] = {}
    for kv in await raw.get_prefix(prefix.encode()):
        try:
            value: dict[str, Any] | bytes = json.loads(kv.value)
        except ValueError:
            value = kv.value
        out[kv.key.decode()] = (value, kv.lease)
    return out


# -- claims -------------------------------------------------------------------------------------------------------
async def test_three_backends_claim_distinct_identities_visible_with_holders(
    etcd_server: EtcdServer, etcd_namespace: str, raw: RawEtcd
) -> None:
    ns = etcd_namespace
    # CALM: the claims' validity below is about the claims, not about keepalives a loaded machine sends late
    # (TTL_S's deadline is 1.5 s after the last one sent, and fifteen claims are made in between).
    async with (
        backend(etcd_server, ns, **CALM) as a,
        backend(etcd_server, ns, **CALM) as b,
        backend(etcd_server, ns, **CALM) as c,
    ):
        claims: dict[str, list[EtcdClaim]] = {}
        for pool in (EIGHT_BYTE, MUID, HLC_ULID, SIQ, SHARDS_RANDOM):
            got = [await be.claim(pool, holder(n)) for n, be in enumerate((a, b, c))]
            assert len({cl.identity for cl in got}) == 3, pool
            assert all(pool.minimum <= cl.identity <= pool.maximum and cl.valid() for cl in got)
            assert all(cl.high_water_mark == -1 for cl in got)
            claims[f"{pool.scheme}/{pool.draw}"] = got
        await a.register("wiji", "0abcdef012345", {"holder": holder(0).as_dict()})

        # Scans start at a random free identity (not the lowest: another fleet would start on the same one); the
        # key layout is exactly the documented one.
        scanned = [cl.identity for cl in claims["eight-byte/scan"]]
        assert scanned != [0, 1, 2] or claims["hlc-ulid/scan"][0].identity != 0  # lowest-first: chance ~2**-27
        assert [cl.key for cl in claims["eight-byte/scan"]] == [f"{ns}pool/0:{g}" for g in scanned]
        hlc = [cl.identity for cl in claims["hlc-ulid/scan"]]
        assert [cl.key for cl in claims["hlc-ulid/scan"]] == [f"{ns}idmint/hlc-ulid/{p}" for p in hlc]
        shards = [cl.identity for cl in claims["siq/scan"]]
        assert [cl.key for cl in claims["siq/scan"]] == [f"{ns}idmint/siq/86ce1947/{s}" for s in shards]
        assert [cl.key for cl in claims["muid/random"]] == [
            f"{ns}idmint/muid/{cl.identity:011X}" for cl in claims["muid/random"]
        ]

        found = await keys_under(raw, ns)
        every = [cl for got in claims.values() for cl in got]
        assert set(found) == {cl.key for cl in every} | {f"{ns}idmint/wiji/0abcdef012345"}
        leases = {be: be._session.lease_id for be in (a, b, c)}  # type: ignore[union-attr]
        for got in claims.values():
            for n, (cl, be) in enumerate(zip(got, (a, b, c))):
                value, lease = found[cl.key]
                assert lease == leases[be] and lease == cl.lease_id
                assert isinstance(value, dict)
                assert value["holder"] == holder(n).as_dict()
                assert value["identity"] == cl.identity and value["scheme"] == cl.scheme
                assert value["lease"] == f"{lease:016x}" and value["high_water_mark"] == -1
        wiji_value, wiji_lease = found[f"{ns}idmint/wiji/0abcdef012345"]
        assert wiji_lease == leases[a] and isinstance(wiji_value, dict)
        assert wiji_value["holder"]["host"] == "replica-0"

        status = a.status()
        assert status["backend"] == "etcd" and status["healthy"]
        assert 0 < status["deadline_in_s"] <= CALM["etcd_lease_ttl"]

    # close() revoked every lease: claim and registration keys are gone.
    assert await keys_under(raw, ns) == {}


async def test_pool_exhaustion_and_release(etcd_server: EtcdServer, etcd_namespace: str) -> None:
    two = pool_spec("eight-byte", minimum=0, maximum=1, settings={"cluster_id": 0})
    async with backend(etcd_server, etcd_namespace, **CALM) as a, backend(etcd_server, etcd_namespace, **CALM) as b:
        first = await a.claim(two, holder(0))
        await b.claim(two, holder(1))
        with pytest.raises(PoolExhaustedError, match=r"no free generator_id in cluster 0: 2 of 2 held"):
            await b.claim(two, holder(1))
        random_two = pool_spec("eight-byte", minimum=0, maximum=1, draw="random", settings={"cluster_id": 0})
        with pytest.raises(PoolExhaustedError):
            await b.claim(random_two, holder(1))
        await a.release(first, None)
        assert first.lost and not first.valid()
        again = await b.claim(two, holder(1))
        assert again.identity == first.identity
        static = pool_spec("eight-byte", minimum=0, maximum=2047, settings={"cluster_id": 0}, static=again.identity)
        with pytest.raises(
            PoolExhaustedError,
            match=rf"static generator_id in cluster 0 unavailable: "
            rf"{again.identity} is held by replica-1 pid 1001",
        ):
            await a.claim(static, holder(0))
        four = pool_spec("eight-byte", minimum=0, maximum=3, settings={"cluster_id": 0})
        assert (await a.claim(four, holder(0), exclude=frozenset({2}))).identity == 3


async def test_java_uniqueid_keys_are_respected(etcd_server: EtcdServer, etcd_namespace: str, raw: RawEtcd) -> None:
    # java-uniqueid's ResourceClaim: Put(pool/<cluster>:<generator>, "", lease) -- here a plain put, no lease.
    ns = etcd_namespace
    for generator in (0, 1, 3):
        await raw.put(f"{ns}pool/0:{generator}".encode(), b"")
    await raw.put(f"{ns}pool/1:2".encode(), b"")  # another cluster ID: not ours to skip
    async with backend(etcd_server, ns, **CALM) as a:
        six = pool_spec("eight-byte", minimum=0, maximum=5, settings={"cluster_id": 0})
        got = [(await a.claim(six, holder(0))).identity for _ in range(3)]
        assert sorted(got) == [2, 4, 5]
        static = pool_spec("eight-byte", minimum=0, maximum=2047, settings={"cluster_id": 0}, static=3)
        with pytest.raises(PoolExhaustedError, match="java-uniqueid writes an empty value"):
            await a.claim(static, holder(0))
        cluster1 = pool_spec("eight-byte", minimum=0, maximum=0, settings={"cluster_id": 1})
        assert (await a.claim(cluster1, holder(0))).identity == 0
        found = await keys_under(raw, f"{ns}pool/")
        assert found[f"{ns}pool/0:3"] == (b"", 0)  # untouched
        assert set(found) == {f"{ns}pool/0:{g}" for g in range(6)} | {f"{ns}pool/1:0", f"{ns}pool/1:2"}


async def test_cluster_id_key_lists_allowed_cluster_ids(
    etcd_server: EtcdServer, etcd_namespace: str, raw: RawEtcd
) -> None:
    ns = etcd_namespace
    cluster3 = pool_spec("eight-byte", minimum=0, maximum=0, settings={"cluster_id": 3})
    async with backend(etcd_server, ns, **CALM) as a:
        await raw.put(f"{ns}cluster-id".encode(), b"1, 3")  # as java-uniqueid's TestHelper writes it
        with pytest.raises(
            NotReadyError, match=r"cluster ID 0 is not listed in etcd key .*cluster-id \('1, 3'\)"
        ) as info:
            await a.claim(EIGHT_BYTE, holder(0))
        assert not isinstance(info.value, PoolExhaustedError | BackendUnavailableError)
        assert (await a.claim(cluster3, holder(0))).key == f"{ns}pool/3:0"
        await raw.put(f"{ns}cluster-id".encode(), b"three")
        with pytest.raises(NotReadyError, match="not a comma-separated list"):
            await a.claim(cluster3, holder(0))
        # Other schemes do not care about the key.
        assert (await a.claim(pool_spec("hlc-ulid", minimum=0, maximum=0), holder(0))).identity == 0


async def test_key_left_on_our_lease_by_an_unfinished_claim_is_given_back(
    etcd_server: EtcdServer, etcd_namespace: str, raw: RawEtcd
) -> None:
    # A claim transaction that committed but whose answer never arrived (timeout) leaves a key on our lease. (CALM:
    # the claim's validity is about the key, not about a keepalive sent late.)
    async with backend(etcd_server, etcd_namespace, **CALM) as a:
        assert a._session is not None
        await raw.put(f"{etcd_namespace}idmint/hlc-ulid/0".encode(), b"", lease=a._session.lease_id)
        claim = await a.claim(pool_spec("hlc-ulid", minimum=0, maximum=0), holder(0))
        assert claim.identity == 0 and claim.valid()


# -- high-water marks -----------------------------------------------------------------------------------------
async def test_marks_rise_survive_the_holder_and_return_to_the_next_claimer(
    etcd_server: EtcdServer, etcd_namespace: str, raw: RawEtcd
) -> None:
    ns = etcd_namespace
    pool = pool_spec("siq", minimum=0, maximum=0, settings={"siq_domain": "example.com"})
    async with backend(etcd_server, ns, **CALM) as a, backend(etcd_server, ns, **CALM) as b:
        claim = await a.claim(pool, holder(0))
        assert claim.high_water_mark == -1
        await claim.record_mark(1_000)
        await claim.record_mark(500)  # never lowered
        value = json.loads((await raw.get(claim.key.encode())).value)  # type: ignore[union-attr]
        assert value["high_water_mark"] == 1_000
        mark = await raw.get(mark_key(ns, pool, 0).encode())
        assert mark is not None and mark.lease == 0 and mark.key.decode() == f"{ns}idmint/marks/siq/86ce1947/0"
        assert json.loads(mark.value)["high_water_mark"] == 1_000

        await a.release(claim, 900)  # the exact final mark may lower the reservation
        with pytest.raises(LeaseLostError):
            await claim.record_mark(2_000)
        second = await b.claim(pool, holder(1))
        assert second.identity == 0 and second.high_water_mark == 900
        await second.record_mark(5_000)
        await b.release(second, 100)  # ...but never below the mark it inherited
        third = await a.claim(pool, holder(0))
        assert third.high_water_mark == 900
        assert claim_key(ns, pool, 0) == third.key
    # Marks are on no lease: they outlive every holder.
    assert list(await keys_under(raw, ns)) == [f"{ns}idmint/marks/siq/86ce1947/0"]


HOLDER_SCRIPT = textwrap.dedent("""
    import asyncio, os, sys, time
    from app.storage.lease import Owner
    from app.storage.etcd.backend import EtcdBackend
    from app.settings import load_settings
    from tests.helpers import pool_spec

    async def main():
        settings = load_settings(etcd_endpoints=sys.argv[1], etcd_namespace=sys.argv[2],
                                 etcd_lease_ttl=int(sys.argv[3]),
                                 etcd_safety_margin=0.5, etcd_connect_timeout=1, etcd_request_timeout=1)
        backend = EtcdBackend(settings)
        await backend.start()
        pool = pool_spec("eight-byte", minimum=0, maximum=2047, settings={"cluster_id": 0},
                        static=7)
        holder = Owner(host="doomed", pid=os.getpid(), version="test", started_at="2026-01-01T00:00:00Z")
        claim = await backend.claim(pool, holder)
        await claim.record_mark(123_456)
        print("claimed", claim.identity, flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
""")


async def test_identity_of_a_killed_holder_is_claimable_only_after_its_lease_expires(
    etcd_server: EtcdServer, etcd_namespace: str, raw: RawEtcd
) -> None:
    ns = etcd_namespace
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER_SCRIPT, etcd_server.endpoint, ns, str(TTL_S)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = await anyio.to_thread.run_sync(proc.stdout.readline)
        assert line.strip() == "claimed 7", proc.stderr.read() if proc.stderr else ""
        held = await raw.get(f"{ns}pool/0:7".encode())
        assert held is not None and held.lease
        value = json.loads(held.value)
        assert value["holder"]["host"] == "doomed" and value["holder"]["pid"] == proc.pid
        assert await raw.time_to_live(held.lease) > 0
        await anyio.sleep(0.5)  # let it refresh at least once more
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    killed_at = time.monotonic()

    static7 = pool_spec("eight-byte", minimum=0, maximum=2047, settings={"cluster_id": 0}, static=7)
    async with backend(etcd_server, ns) as b:
        refused = 0
        while True:
            try:
                claim = await b.claim(static7, holder(1))
                break
            except PoolExhaustedError as exc:
                assert "held by doomed pid" in exc.reason
                refused += 1
                # Real etcd expiry (the holder was a killed process): generous for a loaded machine.
                assert time.monotonic() - killed_at < TTL_S + 5, "lease of the killed holder never expired"
                await anyio.sleep(0.1)
        waited = time.monotonic() - killed_at
        # Refused while the killed holder's lease lived; claimed once etcd had expired it (its key went with it).
        # How long after the kill that was depends on when the holder last refreshed, which a loaded machine may
        # have done late (it refreshes every TTL/3): so the lease is asked, and only the upper bound is in time,
        # about one TTL, generous for a loaded machine.
        assert refused > 0 and waited <= TTL_S + 5, waited
        assert await raw.time_to_live(held.lease) == -1
        assert claim.high_water_mark == 123_456


async def test_holder_that_stops_refreshing_fails_closed_before_another_can_claim(
    etcd_server: EtcdServer, etcd_namespace: str
) -> None:
    ns = etcd_namespace
    static = pool_spec("hlc-ulid", minimum=0, maximum=65535, static=42)
    clock = FakeClock.running_from_now()  # the backend's deadlines are on this clock, and so are ours below
    async with backend(etcd_server, ns, clock=clock.seconds) as a, backend(etcd_server, ns) as b:
        claim = await a.claim(static, holder(0))
        session = a._session
        assert session is not None
        await session.stop()  # the keepalive stops: as if the process hung
        stopped = clock.seconds()
        # Fail closed TTL - margin after the last refresh was sent (before the stop), on the injected clock.
        assert session.deadline <= stopped + TTL_S - MARGIN_S
        # Real time passes until the clock reaches the deadline; generous for a loaded machine.
        await eventually(lambda: not claim.valid(), TTL_S + 5, "claim invalid after keepalive stopped")
        assert clock.seconds() >= session.deadline and not claim.lost  # unconfirmed, not known lost
        while True:
            try:
                await b.claim(static, holder(1))
                break
            except PoolExhaustedError:
                await anyio.sleep(0.05)
            # Real etcd expiry: the lease ends TTL after the last keepalive etcd received; generous bound.
            assert clock.seconds() - stopped < TTL_S + 5, "the lease of the stopped holder never expired"
        # The holder stopped issuing before the lease could expire and the identity move: etcd received the
        # last keepalive after it was sent, so it expired the lease at least the margin after our deadline.
        assert clock.seconds() >= session.deadline + MARGIN_S


# -- losing the claim -----------------------------------------------------------------------------------------
async def test_deleted_or_overwritten_claim_key_makes_the_claim_lost(
    etcd_server: EtcdServer, etcd_namespace: str, raw: RawEtcd
) -> None:
    # CALM: the claims' validity below is about their keys, not about keepalives a loaded machine sends late
    # (TTL_S's deadline is 1.5 s after the last one sent); only the watch tells a key's loss.
    async with backend(etcd_server, etcd_namespace, **CALM) as a:
        deleted = await a.claim(HLC_ULID, holder(0))
        overwritten = await a.claim(HLC_ULID, holder(0))
        await deleted.record_mark(10)  # our own writes do not count as a loss
        await anyio.sleep(0.2)
        assert deleted.valid() and overwritten.valid()

        await raw.delete(deleted.key.encode())
        await eventually(lambda: deleted.lost, 10, "deleted claim key noticed")
        assert not deleted.valid() and "deleted" in (deleted.lost_reason or "")
        with pytest.raises(LeaseLostError, match="claim key deleted"):
            await deleted.record_mark(20)

        await raw.put(overwritten.key.encode(), b"mine now")
        await eventually(lambda: overwritten.lost, 10, "overwritten claim key noticed")
        assert "overwritten" in (overwritten.lost_reason or "")
        await a.release(overwritten, 30)  # never raises for a lost claim
        assert (await raw.get(overwritten.key.encode())).value == b"mine now"  # type: ignore[union-attr]
        # The lease itself is fine: new claims work at once.
        assert (await a.claim(HLC_ULID, holder(0))).valid()


async def test_revoked_lease_loses_claims_and_a_new_lease_is_granted(
    etcd_server: EtcdServer, etcd_namespace: str, raw: RawEtcd
) -> None:
    async with backend(etcd_server, etcd_namespace, **CALM) as a:  # validity is not about keepalives here
        claim = await a.claim(SIQ, holder(0))
        old_lease = claim.lease_id
        await raw.revoke_lease(old_lease)
        await eventually(lambda: claim.lost, 10, "revoked lease noticed")  # generous: a loaded machine
        again = await a.claim(SIQ, holder(0))
        assert again.valid() and again.lease_id != old_lease and again.identity == claim.identity
        with pytest.raises(LeaseLostError):
            await claim.record_mark(1)


# -- etcd faults ----------------------------------------------------------------------------------------------
async def test_etcd_stopped_fails_closed_and_recovers_after_restart(
    etcd_server: EtcdServer, etcd_namespace: str
) -> None:
    clock = FakeClock.running_from_now()  # the backend's deadlines are on this clock, and so are ours below
    async with backend(etcd_server, etcd_namespace, clock=clock.seconds) as a:
        claim = await a.claim(EIGHT_BYTE, holder(0))
        await claim.record_mark(1)
        session = a._session
        assert session is not None
        await anyio.to_thread.run_sync(etcd_server.stop)
        stopped = clock.seconds()
        # No refresh can reach etcd now: fail closed TTL - margin after the last one sent, on the injected clock.
        assert session.deadline <= stopped + TTL_S - MARGIN_S
        await eventually(lambda: not claim.valid(), TTL_S + 5, "claim invalid while etcd is down")  # generous
        # The failed refresh is reported once its retry budget is spent, which can come after the deadline: wait
        # for it, so that the error below can name etcd rather than only the passed deadline.
        await eventually(lambda: not a.status()["healthy"], TTL_S + 5, "etcd reported unreachable")
        with pytest.raises(BackendUnavailableError, match=r"etcd at http://127\.0\.0\.1:\d+ .*") as info:
            await a.claim(EIGHT_BYTE, holder(0))
        assert info.value.retry_after >= 1
        with pytest.raises(NotReadyError):
            await claim.record_mark(2)
        await anyio.sleep(max(0.0, TTL_S + 0.5 - (clock.seconds() - stopped)))  # down for longer than the TTL
        assert not a.status()["healthy"]

        await anyio.to_thread.run_sync(etcd_server.start)
        # Same backend object: a new claim works once etcd answers again.
        new_claim = None

        async def claimed() -> bool:
            nonlocal new_claim
            try:
                new_claim = await a.claim(EIGHT_BYTE, holder(0))
            except NotReadyError:
                return False
            return True

        await eventually(claimed, 10, "claim after etcd restart")
        assert new_claim is not None and new_claim.valid()
        # etcd restores leases with a fresh TTL on restart, so the old claim was never lost: once its key is
        # verified and watched again it is valid again, and the new claim took a different generator ID.
        await eventually(claim.valid, 5, "old claim valid again")
        assert new_claim.identity != claim.identity
        await claim.record_mark(3)


async def test_start_never_raises_for_an_unreachable_etcd(etcd_namespace: str) -> None:
    settings = etcd_settings(f"http://127.0.0.1:{free_port()}", etcd_namespace)
    b = EtcdBackend(settings)
    try:
        started = time.monotonic()
        await b.start()
        # Real time: start() meets a closed port (the refusal is at once), not a clock the backend reads.
        assert time.monotonic() - started < 5
        with pytest.raises(BackendUnavailableError, match=r"etcd at http://127\.0\.0\.1:\d+ "):
            await b.claim(EIGHT_BYTE, holder(0))
        status = b.status()
        assert not status["healthy"] and status["reason"]
        with pytest.raises(BackendUnavailableError):
            await b.register("wiji", "0abc", {})
    finally:
        closing = time.monotonic()
        await b.close()
        assert time.monotonic() - closing < TTL_S  # real time: the revoke's timeout is at most the TTL


async def test_user_and_password_auth(etcd_factory: Callable[..., EtcdServer]) -> None:
    server = etcd_factory()
    server.etcdctl("user", "add", "root:rootpw")
    server.etcdctl("user", "add", "idmint:s3cret")
    server.etcdctl("role", "add", "idmint")
    server.etcdctl("role", "grant-permission", "idmint", "--prefix=true", "readwrite", "auth/")
    server.etcdctl("user", "grant-role", "idmint", "idmint")
    server.etcdctl("auth", "enable")

    async with backend(server, "auth/", etcd_user="idmint", etcd_password="s3cret") as good:
        claim = await good.claim(HLC_ULID, holder(0))
        await claim.record_mark(7)
        assert claim.key == f"auth/idmint/hlc-ulid/{claim.identity}"
        # etcd forgets auth tokens when it restarts: the backend authenticates again by itself.
        await anyio.to_thread.run_sync(server.stop)
        await anyio.to_thread.run_sync(server.start)
        await eventually(claim.valid, 10, "claim valid again after etcd restart with auth")
        await claim.record_mark(8)

    async with backend(server, "auth/", etcd_user="idmint", etcd_password="wrong") as bad:
        with pytest.raises(BackendUnavailableError, match="rejected our credentials"):
            await bad.claim(HLC_ULID, holder(0))
    async with backend(server, "other/", etcd_user="idmint", etcd_password="s3cret") as denied:
        with pytest.raises(BackendUnavailableError, match="permission denied"):
            await denied.claim(HLC_ULID, holder(0))


async def test_tls_with_client_certificates(etcd_factory: Callable[..., EtcdServer], tmp_path: Path) -> None:
    tls = make_tls_material(tmp_path / "tls")
    server = etcd_factory(tls=tls)
    assert server.endpoint.startswith("https://")
    async with backend(
        server, "tls/", etcd_ca_cert=tls.ca_cert, etcd_cert_cert=tls.client_cert, etcd_cert_key=tls.client_key
    ) as secure:
        claim = await secure.claim(SIQ, holder(0))
        await claim.record_mark(1)
        assert claim.key == f"tls/idmint/siq/86ce1947/{claim.identity}"
    # Without the client certificate etcd refuses the connection: a clear reason, no exception from start().
    async with backend(server, "tls/", etcd_ca_cert=tls.ca_cert, etcd_connect_timeout=0.5) as refused:
        with pytest.raises(BackendUnavailableError, match=r"etcd at https://127\.0\.0\.1:\d+"):
            await refused.claim(SIQ, holder(0))


async def test_tls_files_need_https_endpoints(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="need https:// etcd_endpoints"):
        EtcdBackend(etcd_settings("http://127.0.0.1:2379", "x/", etcd_ca_cert=tmp_path / "ca.pem"))
    with pytest.raises(ConfigError, match="etcd_ca_cert .* cannot be read"):
        EtcdBackend(etcd_settings("https://127.0.0.1:2379", "x/", etcd_ca_cert=tmp_path / "missing.pem"))


async def test_fleet_records_are_compared_and_set(etcd_server: EtcdServer, etcd_namespace: str, raw: RawEtcd) -> None:
    """One create-if-absent and compare-and-set transaction per write: two backends on one namespace agree."""
    async with backend(etcd_server, etcd_namespace, **CALM) as one, backend(etcd_server, etcd_namespace, **CALM) as two:
        assert await one.read_record("scheme.snowflake") is None
        assert await one.swap_record("scheme.snowflake", None, {"layout": "a", "regions": 1})
        assert not await two.swap_record("scheme.snowflake", None, {"layout": "b"})
        assert await two.read_record("scheme.snowflake") == {"layout": "a", "regions": 1}
        assert not await two.swap_record("scheme.snowflake", {"layout": "b"}, {"layout": "c"})
        assert await two.swap_record("scheme.snowflake", {"regions": 1, "layout": "a"}, {"layout": "c"})
        assert await one.read_record("scheme.snowflake") == {"layout": "c"}
        await raw.put(f"{etcd_namespace}idmint/records/broken".encode(), b"[1]")
        with pytest.raises(NotReadyError, match="not a JSON object"):
            await one.read_record("broken")
