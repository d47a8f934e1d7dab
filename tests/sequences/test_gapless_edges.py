"""Gapless sequences at the edges, through the service on every store (the memory fake, a state directory, a real
etcd and a real PostgreSQL) with one fake clock: DELETE with reservations open (refused naming them; ``force``
voids them, audited), ``reserve`` into an ended period within its grace window (refilling its holes only), and the
auditor's report of a period's holes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app import __version__
from app.errors import InvalidOptionError, SequenceConflictError, UnknownSequenceError
from app.issuing.issuer import no_charge
from app.metrics import Metrics
from app.sequences.points import DELETE_REASON, Who
from app.sequences.service import SequenceService
from app.sequences.spec import PERIOD_GRACE_DEFAULT_S, PERIOD_GRACE_MAX_S, SequenceSpec
from app.settings import Settings
from app.storage.embedded.sequences import EmbeddedSequenceStore
from app.storage.etcd.sequences import EtcdSequenceStore
from app.storage.mysql.client import Database as MysqlDatabase
from app.storage.postgres.client import Database
from app.storage.postgres.sequences import PostgresSequenceStore
from app.storage.sequences import MemorySequenceStore, SequenceStore
from app.storage.tables.sequences import TableSequenceStore
from tests.helpers import FakeClock

pytestmark = pytest.mark.anyio

BACKENDS = [
    "memory",
    "embedded",
    pytest.param("etcd", marks=pytest.mark.integration),
    pytest.param("postgres", marks=pytest.mark.integration),
    pytest.param("mysql", marks=pytest.mark.integration),
]
WHO = Who("till-3", "test", "192.0.2.7")
DAY_S = 86_400


def utc(text: str) -> FakeClock:
    return FakeClock.from_ns(int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()) * 10**9)


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SequenceStore]:
    made: SequenceStore
    if request.param == "memory":
        made = MemorySequenceStore()
    elif request.param == "embedded":
        made = EmbeddedSequenceStore(tmp_path)
    elif request.param == "postgres":
        url = request.getfixturevalue("postgres_db")
        made = PostgresSequenceStore(
            Database(Settings(postgres_url=url, postgres_statement_timeout=5.0, postgres_connect_timeout=5.0)), 1000
        )
    elif request.param == "mysql":
        url = request.getfixturevalue("mysql_database").url
        made = TableSequenceStore(MysqlDatabase(Settings(mysql_url=url, mysql_statement_timeout=5.0)), 1000)
    else:
        etcd = request.getfixturevalue("etcd_server")
        settings = Settings(
            etcd_endpoints=etcd.endpoint,
            etcd_namespace=request.getfixturevalue("etcd_namespace"),
            etcd_request_timeout=5.0,
            etcd_connect_timeout=5.0,
        )
        made = EtcdSequenceStore(settings)
    yield made
    await made.close()
    if isinstance(made, TableSequenceStore):
        await made.db.close()


def service(store: SequenceStore, clock: FakeClock) -> SequenceService:
    return SequenceService(store, Metrics([], __version__), 100_000, clock=clock, node="test", maintain=False)


async def audit_events(s: SequenceService, name: str) -> list[dict[str, object]]:
    page = await s.audit(name, limit=1000)
    return list(page["events"])


async def test_delete_with_reservations_open_is_refused_naming_them_and_force_voids_them(store: SequenceStore) -> None:
    clock = utc("2026-11-30T23:30:00")
    s = service(store, clock)
    await s.create("inv", 1, 10, SequenceSpec.build(mode="gapless", reset="monthly", template="F{yyyy}{mm}-{seq}"))
    late = await s.reserve("inv", 3600, WHO, charge=no_charge)  # November's, still open after the month ends
    clock.advance_s(3600 - 60)  # 00:29 on 1 December
    december = [await s.reserve("inv", 600, WHO, charge=no_charge) for _ in range(2)]
    await s.settle("inv", december[0]["reservation"], "committed", WHO)

    with pytest.raises(SequenceConflictError) as refused:
        await s.remove("inv", who=WHO)
    detail = str(refused.value)
    assert "2 reservation(s) open" in detail and late["reservation"] in detail, detail
    assert "integer 1 of period 2026-11-01" in detail and "force=true" in detail, detail
    assert (await s.describe("inv"))["name"] == "inv"  # nothing deleted

    answer = await s.remove("inv", force=True, who=WHO)
    assert answer["deleted"] is True and answer["voided"] == 2
    with pytest.raises(UnknownSequenceError):
        await s.describe("inv")
    voids = [e for e in await audit_events(s, "inv") if e["event"] == "void"]
    assert {(e["reservation"], e["value"]) for e in voids} == {
        (late["reservation"], 1),
        (december[1]["reservation"], 2),
    }
    assert all(e["reason"] == DELETE_REASON and e["key"] == "till-3" for e in voids)


async def test_a_gapless_sequence_with_nothing_open_and_a_cached_one_delete_at_once(store: SequenceStore) -> None:
    clock = utc("2026-11-27T12:00:00")
    s = service(store, clock)
    await s.create("g", 1, 10, SequenceSpec.build(mode="gapless"))
    r = await s.reserve("g", 1, WHO, charge=no_charge)
    clock.advance_s(5)  # the reservation is overdue: DELETE expires it in the same step
    assert (await s.remove("g")) == {"name": "g", "deleted": True, "generation": 1, "next": 1, "voided": 0}
    assert [e["event"] for e in await audit_events(s, "g")] == ["reserve", "expire"]
    assert r["value"] == 1
    await s.create("c", 1, 10)
    await s.next("c", 3, charge=no_charge)
    assert (await s.remove("c"))["deleted"] is True


async def test_reserve_refills_an_ended_period_within_its_grace_window(store: SequenceStore) -> None:
    clock = utc("2026-12-31T23:00:00")
    s = service(store, clock)
    spec = SequenceSpec.build(mode="gapless", reset="yearly", template="{yyyy}-{seq:04}", period_grace_s=3 * DAY_S)
    await s.create("inv", 1, 10, spec)
    taken = [await s.reserve("inv", 3600, WHO, charge=no_charge) for _ in range(3)]
    for r in (taken[0], taken[2]):
        await s.settle("inv", r["reservation"], "committed", WHO)
    clock.advance_s(1800)  # 23:30: the year's last invoice...
    clock.advance_s(1800)  # ...is voided at midnight, after its year ended
    await s.settle("inv", taken[1]["reservation"], "voided", WHO, "customer cancelled")

    year = "2026-01-01"
    report = await s.holes("inv", year)
    assert report["state"] == "grace" and report["holes"] == [{"value": 2, "text": "2026-0002"}]
    assert report["totals"] == {"committed": 2, "holes": 1, "outstanding": 0}

    reserved = await s.reserve("inv", 60, WHO, charge=no_charge)
    assert reserved["period"] == "2027-01-01"  # no period: the clock's, as before
    refill = await s.reserve("inv", 60, WHO, period=year, charge=no_charge)
    assert (refill["value"], refill["text"], refill["period"]) == (2, "2026-0002", year)
    assert refill["reservation"].startswith(year + ".")
    assert (await s.holes("inv", year))["outstanding"][0]["reservation"] == refill["reservation"]
    await s.settle("inv", refill["reservation"], "committed", WHO)

    with pytest.raises(SequenceConflictError, match="only refills a voided integer, and none is waiting"):
        await s.reserve("inv", 60, WHO, period=year, charge=no_charge)  # an ended period gets no new integer
    report = await s.holes("inv", year)
    assert report["holes"] == [] and report["totals"] == {"committed": 3, "holes": 0, "outstanding": 0}
    assert report["next"] == 4 and report["refill_until"] == "2027-01-04T00:00:00.000Z"

    clock.advance_s(3 * DAY_S)  # the grace window closes
    with pytest.raises(SequenceConflictError, match=r"grace window \(period_grace_s 259200\) closed at 2027-01-04"):
        await s.reserve("inv", 60, WHO, period=year, charge=no_charge)
    assert (await s.holes("inv", year))["state"] == "closed"
    with pytest.raises(SequenceConflictError, match="period 2028-01-01 has not begun"):
        await s.reserve("inv", 60, WHO, period="2028-01-01", charge=no_charge)
    with pytest.raises(InvalidOptionError, match="not the first day of a yearly period"):
        await s.reserve("inv", 60, WHO, period="2027-03-01", charge=no_charge)


async def test_the_holes_of_a_closed_period_list_what_was_voided_and_what_is_still_open(store: SequenceStore) -> None:
    clock = utc("2026-11-30T23:50:00")
    s = service(store, clock)
    await s.create("m", 1, 10, SequenceSpec.build(mode="gapless", reset="monthly", period_grace_s=0))
    r = [await s.reserve("m", 3600, WHO, charge=no_charge) for _ in range(4)]
    await s.settle("m", r[3]["reservation"], "committed", WHO)
    await s.settle("m", r[0]["reservation"], "voided", WHO)
    clock.advance_s(20 * 60)  # 1 December 00:10: November is closed at once (grace 0)
    await s.settle("m", r[1]["reservation"], "voided", WHO)  # voided after its period closed: a hole for good
    report = await s.holes("m", "2026-11-01")
    assert report["state"] == "closed" and report["ends_at"] == "2026-12-01T00:00:00.000Z"
    assert [h["value"] for h in report["holes"]] == [1, 2]
    assert [(o["value"], o["reservation"]) for o in report["outstanding"]] == [(3, r[2]["reservation"])]
    assert report["totals"] == {"committed": 1, "holes": 2, "outstanding": 1}
    clock.advance_s(3600)  # the open one expires: the report (as a sweep) records it, and it is a hole too
    report = await s.holes("m", "2026-11-01")
    assert [h["value"] for h in report["holes"]] == [1, 2, 3] and report["outstanding"] == []
    assert (await s.holes("m"))["period"] == "2026-12-01"  # default: the clock's period


async def test_the_rules_of_period_and_period_grace_s(store: SequenceStore) -> None:
    s = service(store, utc("2026-11-27T12:00:00"))
    await s.create("never", 1, 10, SequenceSpec.build(mode="gapless"))
    await s.create("cached", 1, 10, SequenceSpec.build(reset="daily"))
    await s.create("daily", 1, 10, SequenceSpec.build(mode="gapless", reset="daily"))
    with pytest.raises(InvalidOptionError, match="never resets: it has no period"):
        await s.reserve("never", 60, WHO, period="2026-11-27", charge=no_charge)
    with pytest.raises(InvalidOptionError, match="never resets: it has no period"):
        await s.holes("never", "2026-11-27")
    assert (await s.holes("never"))["state"] == "never"
    with pytest.raises(SequenceConflictError, match="not gapless"):
        await s.holes("cached", "2026-11-27")
    with pytest.raises(InvalidOptionError, match="period must be a period's first day"):
        await s.holes("daily", "2026-11")
    for bad, rule in (
        ({"mode": "gapless", "reset": "daily", "period_grace_s": -1}, "must be an integer in 0..2678400"),
        ({"mode": "gapless", "reset": "daily", "period_grace_s": PERIOD_GRACE_MAX_S + 1}, "0..2678400"),
        ({"mode": "gapless", "reset": "daily", "period_grace_s": True}, "must be an integer"),
        ({"mode": "gapless", "period_grace_s": 60}, "applies to a gapless sequence that resets"),
        ({"reset": "daily", "period_grace_s": 60}, "applies to a gapless sequence that resets"),
    ):
        with pytest.raises(InvalidOptionError, match=rule):
            SequenceSpec.build(**bad)
    spec = SequenceSpec.build(mode="gapless", reset="daily")
    assert spec.period_grace_s == PERIOD_GRACE_DEFAULT_S and "period_grace_s" not in spec.stored()
    assert SequenceSpec.build(mode="gapless", reset="daily", period_grace_s=60).stored()["period_grace_s"] == 60
    assert "period_grace_s" not in SequenceSpec.build(mode="gapless").as_dict()
