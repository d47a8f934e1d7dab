"""The PostgreSQL lease backend alone, against a real PostgreSQL (tests/support/postgres.py): claims, the lost-row
rule, marks, loss pushed by renewals, revoke, faults at start and while running, the URL never shown."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from app.errors import BackendUnavailableError, NotClaimedError, NotReadyError, PoolExhaustedError, RevokeRefusedError
from app.settings import Settings, load_settings
from app.storage import open_storage
from app.storage.lease import REVOKED_REASON, Claim, Owner
from app.storage.postgres.backend import PostgresBackend
from app.storage.postgres.claim import PostgresClaim
from app.storage.postgres.client import Database
from tests.helpers import pool_spec
from tests.support.postgres import PASSWORD, PASSWORD_ROLE, PostgresServer
from tests.support.server import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.integration]  # a real PostgreSQL

TTL_S = 2
MARGIN_S = 0.5

EIGHT_BYTE = pool_spec("eight-byte", minimum=0, maximum=3, settings={"cluster_id": 0})
ONE = pool_spec("eight-byte", minimum=0, maximum=0, settings={"cluster_id": 0})
MUID = pool_spec("muid", minimum=0x10000000000, maximum=0x1FFFFFFFFFF, draw="random")


def holder(n: int) -> Owner:
    return Owner(host=f"replica-{n}", pid=1000 + n, version="test", started_at="2026-01-01T00:00:00Z")


def pg_settings(url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = dict(
        postgres_url=url,
        lease_ttl=TTL_S,
        lease_safety_margin=MARGIN_S,
        postgres_connect_timeout=1.0,
        postgres_statement_timeout=1.0,
    )
    values.update(overrides)
    return load_settings(**values)


@asynccontextmanager
async def backend(
    url: str, clock: Callable[[], float] = time.monotonic, **overrides: Any
) -> AsyncIterator[PostgresBackend]:
    """A PostgresBackend on ``url``, started; closed (and its pool) on exit."""
    db = Database(pg_settings(url, **overrides))
    b = PostgresBackend(pg_settings(url, **overrides), db, clock=clock, owner={"host": "test"})
    try:
        await b.start()
        yield b
    finally:
        await b.close()
        await db.close()


async def until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await anyio.sleep(0.02)


async def claim_when_ready(b: PostgresBackend, pool: Any, owner: Owner, timeout: float = 10.0) -> PostgresClaim:
    """Claim, waiting out the lost-row rule (NotReadyError) by condition."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            claim = await b.claim(pool, owner)
            assert isinstance(claim, PostgresClaim)
            return claim
        except NotReadyError as exc:
            if isinstance(exc, (PoolExhaustedError, BackendUnavailableError)) or time.monotonic() > deadline:
                raise
            await anyio.sleep(0.05)


async def test_a_fresh_row_is_claimable_one_ttl_after_it_was_created_then_claims_are_exclusive(
    postgres_db: str,
) -> None:
    async with backend(postgres_db) as a, backend(postgres_db) as b:
        t0 = time.monotonic()
        with pytest.raises(NotReadyError, match=r"created now, claimable in 2 s") as caught:
            await a.claim(ONE, holder(1))
        assert caught.value.retry_after == TTL_S
        with pytest.raises(NotReadyError, match=r"claimable in \d\.\d s"):
            await b.claim(ONE, holder(2))  # the row exists, waiting: no second row is made
        first = await claim_when_ready(a, ONE, holder(1))
        assert time.monotonic() - t0 >= TTL_S - 0.2  # by the database's clock; ours may differ by a little
        assert (first.identity, first.high_water_mark, first.generation) == (0, -1, 1)
        with pytest.raises(PoolExhaustedError, match="1 of 1 held"):
            await b.claim(ONE, holder(2))
        await first.record_mark(500)
        await first.record_mark(400)  # marks only rise
        await a.release(first, 450)  # the exact final mark: may lower our own reservation...
        second = await b.claim(ONE, holder(2))  # free at once
        assert (second.high_water_mark, second.generation) == (450, 2)
        await b.release(second, 10)  # ...but never below the inherited mark
        third = await a.claim(ONE, holder(1))
        assert third.high_water_mark == 450


async def test_many_replicas_claim_distinct_identities_and_prefer_existing_rows(postgres_db: str) -> None:
    async with backend(postgres_db) as a, backend(postgres_db) as b, backend(postgres_db) as c:
        pool = pool_spec("eight-byte", minimum=0, maximum=3, settings={"cluster_id": 0}, claims=2)
        with pytest.raises(NotReadyError, match="created now"):
            await a.claim(pool, holder(1))  # two rows made at once: the pool's claims per node
        claims = [await claim_when_ready(x, pool, holder(n)) for n, x in enumerate((a, b, c))]
        assert len({c.identity for c in claims}) == 3
        rows = await a.db.run("count", f"SELECT count(*) FROM {a.db.schema}.claims")
        assert rows[0][0] == 4  # two more made by the third claim, which found none free
        assert await a.count_held(pool) == 3


async def test_muid_medallions_reuse_free_rows(postgres_db: str) -> None:
    async with backend(postgres_db) as a:
        first = await claim_when_ready(a, MUID, holder(1))
        await a.release(first, None)
        again = await a.claim(MUID, holder(1))  # its free row, not a fresh random medallion waiting a TTL
        assert again.identity == first.identity


async def test_a_deleted_row_is_lost_at_the_next_renewal_and_claimable_only_one_ttl_later(
    postgres_db: str, postgres_server: PostgresServer
) -> None:
    async with backend(postgres_db) as a, backend(postgres_db) as b:
        claim = await claim_when_ready(a, ONE, holder(1))
        session = a._session
        assert session is not None
        lost: list[str] = []
        renewed_before: list[float] = []

        def on_lost(c: object, reason: str) -> None:
            lost.append(reason)
            renewed_before.append(session.last_sent)  # the last renewal that still found the row: when it was sent

        claim.on_lost(on_lost)
        postgres_server.execute("DELETE FROM idmint.claims", postgres_db.rsplit("/", 1)[1])
        deleted = time.monotonic()
        # Generous for a loaded machine (renewals are TTL/3 apart when it is not): "the next renewal" is judged
        # below by which renewal saw it, not by a time.
        await until(lambda: lost, 30, "the owner's renewal sees its row gone")
        assert "no longer on our lease" in lost[0] and claim.lost
        # No renewal sent after the delete found the row: the first one to read it saw it gone.
        assert renewed_before[0] <= deleted, (renewed_before, deleted)
        with pytest.raises(NotReadyError, match="created now"):
            await b.claim(ONE, holder(2))
        taken = await claim_when_ready(b, ONE, holder(2))
        assert time.monotonic() - deleted >= TTL_S - 0.2
        assert taken.high_water_mark == -1  # the mark went with the row: the next holder waits out nothing


async def test_a_lease_that_is_not_renewed_frees_its_claims_only_after_it_expires(postgres_db: str) -> None:
    async with backend(postgres_db) as a, backend(postgres_db) as b:
        claim = await claim_when_ready(a, ONE, holder(1))
        assert a._session is not None
        await a._session.stop()  # renewals stop: the lease runs out
        stopped = time.monotonic()
        with pytest.raises(PoolExhaustedError):
            await b.claim(ONE, holder(2))
        await until(lambda: time.monotonic() >= claim.deadline, TTL_S, "the owner's deadline passes")
        assert not claim.valid()
        taken = await until_claimed(b, ONE, holder(2), TTL_S * 3)
        assert time.monotonic() - stopped >= TTL_S - 1.0  # the lease ran out, by the database's clock
        assert taken.generation == claim.generation + 1
        with pytest.raises(NotReadyError):
            await claim.record_mark(10**12)  # refused: another generation holds the row


async def until_claimed(b: PostgresBackend, pool: Any, owner: Owner, timeout: float) -> PostgresClaim:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await claim_when_ready(b, pool, owner)
        except NotReadyError:
            assert time.monotonic() < deadline, "never claimable"
            await anyio.sleep(0.05)


async def test_revoke_stops_the_owner_refuses_its_marks_and_frees_the_row_on_acknowledgement(postgres_db: str) -> None:
    async with backend(postgres_db) as a, backend(postgres_db) as b:
        claim = await claim_when_ready(a, ONE, holder(1))
        reasons: list[str] = []
        claim.on_lost(lambda c, reason: reasons.append(reason))
        with pytest.raises(NotClaimedError):
            await b.revoke(pool_spec("eight-byte", minimum=1, maximum=1, settings={"cluster_id": 0}), 1, {})
        answer = await b.revoke(ONE, 0, holder(2).as_dict())  # no ledger record: not acknowledged
        assert answer["owner"] == {
            "host": "replica-1",
            "pid": 1001,
            "version": "test",
            "started_at": "2026-01-01T00:00:00Z",
            "address": "",
        }
        assert answer["lease"] == claim.lease_name and not answer["owner_stopped"] and not answer["freed"]
        await until(lambda: reasons, TTL_S, "the owner's next renewal sees the revoke")
        assert reasons == [REVOKED_REASON]
        with pytest.raises(NotReadyError):
            await claim.record_mark(10**12)
        taken = await until_claimed(b, ONE, holder(2), TTL_S * 3)  # the revoke ran out (one TTL)
        assert taken.generation == claim.generation + 1


async def test_revoke_twice_is_refused(postgres_db: str) -> None:
    async with backend(postgres_db) as a, backend(postgres_db) as b:
        await claim_when_ready(a, ONE, holder(1))
        first = await b.revoke(ONE, 0, {})  # no ledger record: not acknowledged, pending until it runs out
        assert not first["freed"]
        with pytest.raises(RevokeRefusedError, match="being revoked already"):
            await b.revoke(ONE, 0, {})


async def test_fleet_id_records_member_tokens(postgres_db: str) -> None:
    async with backend(postgres_db) as a, backend(postgres_db) as b:
        await until(lambda: a.member_token() and b.member_token(), 5, "both leases granted")
        assert await a.fleet_id() == await b.fleet_id()
        token = a.member_token()
        assert token is not None and await b.has_member(token) is True
        assert await b.has_member("0" * 16) is False and await b.has_member("nope") is False
        assert await a.read_record("layout") is None
        assert await a.swap_record("layout", None, {"bits": 10})
        assert not await b.swap_record("layout", None, {"bits": 12})
        assert not await b.swap_record("layout", {"bits": 11}, {"bits": 12})
        assert await b.swap_record("layout", {"bits": 10}, {"bits": 12})
        assert await a.read_record("layout") == {"bits": 12}
        await a.register("wiji", "random-part", {"holder": "x"})


@pytest.mark.parametrize("fault", ["wrong password", "unreachable", "no such database"])
async def test_a_bad_database_at_start_is_a_reason_not_a_crash(postgres_server: PostgresServer, fault: str) -> None:
    url = {
        "wrong password": postgres_server.url("postgres", PASSWORD_ROLE, "wrong-" + PASSWORD),
        "unreachable": f"postgresql://idmint:hunter2@127.0.0.1:{free_port()}/idmint",
        "no such database": postgres_server.url("no_such_db"),
    }[fault]
    async with backend(url) as b:
        with pytest.raises(BackendUnavailableError) as caught:
            await b.claim(ONE, holder(1))
        status = b.status()
    reason = status["reason"]
    expected = {  # libpq's words, after ours
        "wrong password": 'password authentication failed for user "idmint_pw"',
        "unreachable": "Connection refused",
        "no such database": 'database "no_such_db" does not exist',
    }[fault]
    assert "is unreachable or refused the connection (while " in reason
    assert expected in reason and expected in caught.value.reason, reason
    for shown in (reason, caught.value.reason, repr(status)):
        assert PASSWORD not in shown and "hunter2" not in shown
    assert status["database"].startswith("postgresql://") and ":" + PASSWORD not in status["database"]


async def test_the_right_password_works_and_is_never_shown(postgres_server: PostgresServer) -> None:
    url = postgres_server.url("postgres", PASSWORD_ROLE, PASSWORD)
    settings = pg_settings(url, postgres_schema="pwtest")
    storage = open_storage(settings, time.time_ns)
    try:
        await storage.leases.start()
        await until(lambda: storage.leases.member_token(), 5, "a lease granted")
        assert PASSWORD not in repr(storage.status()) and PASSWORD not in repr(storage.sequences.status())
        assert storage.status()["backend"] == "postgres"
        assert storage.capabilities.as_dict() == {"claims_expire": True, "one_host": False, "can_revoke": True}
    finally:
        await storage.leases.close()
        await storage.close()


async def test_a_stalled_database_fails_closed_at_the_deadline_and_recovers(
    postgres_db: str, postgres_server: PostgresServer
) -> None:
    async with backend(postgres_db, postgres_statement_timeout=0.5) as a:
        claim: Claim = await claim_when_ready(a, ONE, holder(1))
        postgres_server.pause()
        paused = time.monotonic()
        try:
            await until(lambda: not claim.valid(), TTL_S * 3, "the claim fails closed")
            closed = time.monotonic() - paused
            print("failed closed after", closed, a.status())
            # At its deadline (unconfirmed, not known lost), which no renewal moved after the pause: the last one
            # confirmed was sent before it. (When the poll above saw it is up to the machine's load.)
            assert claim.clock() >= claim.deadline and not claim.lost
            assert claim.deadline <= paused + TTL_S - MARGIN_S, (claim.deadline - paused, closed)
            t0 = time.monotonic()
            with pytest.raises(BackendUnavailableError):
                await claim.record_mark(10**12)  # bounded on our side: a stalled server never answers
            assert time.monotonic() - t0 < 2.0
            assert "did not answer in time" in a.status().get("reason", ""), a.status()
        finally:
            postgres_server.resume()
        await until(lambda: a.status()["healthy"], 15, "renewals resume")
        # The lease expired while the database was stalled (its clock ran on): the claim is lost for good.
        await until(lambda: claim.lost, 5, "the claim is known lost")


async def test_a_stopped_database_fails_closed_and_a_restart_brings_a_new_lease(
    postgres_db: str, postgres_server: PostgresServer
) -> None:
    async with backend(postgres_db) as a:
        claim = await claim_when_ready(a, ONE, holder(1))
        postgres_server.stop()
        stopped = time.monotonic()
        try:
            await until(lambda: not claim.valid(), TTL_S + 1, "the claim fails closed")
            # At its deadline, which no renewal moved after the stop (when the poll saw it is up to the load).
            assert claim.clock() >= claim.deadline and not claim.lost
            assert claim.deadline <= stopped + TTL_S - MARGIN_S, claim.deadline - stopped
        finally:
            postgres_server.start()
        # Back: the lease renewed in time (a quick restart) keeps the claim; one that expired meanwhile is lost
        # for good, and the identity is claimed again, at the next generation.
        await until(lambda: claim.valid() or claim.lost, 30, "the claim is usable again or known lost")
        if claim.lost:
            again = await until_claimed(a, ONE, holder(1), 20)
            assert again.generation == claim.generation + 1
