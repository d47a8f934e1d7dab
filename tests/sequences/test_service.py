"""The sequence service over the memory store with the one fake clock: period rollover at midnight in time zones
whose daylight saving moves or repeats midnight, PATCH and parse across templates, delete and re-create, and what
a change made by another node does here (refresh)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app import __version__
from app.errors import InvalidIdError, InvalidOptionError, SequenceConflictError, UnknownSequenceError
from app.issuing.issuer import no_charge
from app.metrics import Metrics
from app.sequences.service import SequenceService
from app.sequences.spec import SequenceSpec
from app.storage.sequences import MemorySequenceStore
from tests.helpers import FakeClock

pytestmark = pytest.mark.anyio


def utc(text: str) -> FakeClock:
    return FakeClock.from_ns(int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()) * 10**9)


def service(store: MemorySequenceStore, clock: FakeClock) -> SequenceService:
    return SequenceService(store, Metrics([], __version__), 100_000, clock=clock, node="test", maintain=False)


def ids(issued: object) -> list[int]:
    return [first + i * step for first, count, step in issued.runs for i in range(count)]  # type: ignore[attr-defined]


async def test_rollover_where_daylight_saving_skips_midnight() -> None:
    """America/Havana, 8 March 2026: 23:59:59 is followed by 01:00:00 (05:00 UTC). The new day's numbers start
    at start, the old day's buffer hands its unused top back at once, and the texts name each number's period."""
    store = MemorySequenceStore()
    clock = utc("2026-03-08T04:59:58")  # 23:59:58 on the 7th in Havana
    s = service(store, clock)
    spec = SequenceSpec.build(reset="daily", time_zone="America/Havana", template="H{yyyy}{mm}{dd}-{seq:04}")
    await s.create("tickets", 1, 100, spec)
    before = await s.next("tickets", 3, charge=no_charge)
    assert ids(before) == [1, 2, 3] and before.period == "2026-03-07"
    clock.advance_s(1.0)  # 23:59:59 local
    assert ids(await s.next("tickets", 1, charge=no_charge)) == [4]
    clock.advance_s(1.0)  # 05:00:00 UTC: 01:00 local, the day begins at the change
    after = await s.next("tickets", 2, charge=no_charge)
    assert ids(after) == [1, 2] and after.period == "2026-03-08"
    assert after.bound is not None and after.bound.render(1) == "H20260308-0001"
    await s.stop()  # the retired buffer's hand-back has run; this one hands back too
    assert store.docs[("tickets", "period/2026-03-07")]["next"] == 5  # nothing of the 7th's range was lost
    assert store.docs[("tickets", "period/2026-03-08")]["next"] == 3


async def test_rollover_where_midnight_repeats_and_where_an_hour_repeats() -> None:
    """America/Havana, 1 November 2026: 01:00 CDT goes back to 00:00 CST, so midnight is read twice; the day
    began at the first one, and the repeated hour stays in it. Europe/Paris, 25 October 2026: 03:00 back to
    02:00, midnight untouched: a 25-hour day, one period."""
    store = MemorySequenceStore()
    clock = utc("2026-11-01T03:59:59")  # 23:59:59 CDT on 31 October
    s = service(store, clock)
    await s.create("h", 1, 10, SequenceSpec.build(reset="daily", time_zone="America/Havana"))
    assert (await s.next("h", 1, charge=no_charge)).period == "2026-10-31"
    clock.advance_s(1.0)  # the first 00:00 (CDT)
    assert ids(first := await s.next("h", 1, charge=no_charge)) == [1] and first.period == "2026-11-01"
    clock.advance_s(3600.0)  # 00:00 again (CST): the same day, no new period
    assert ids(again := await s.next("h", 1, charge=no_charge)) == [2] and again.period == "2026-11-01"

    paris = utc("2026-10-24T22:00:00")  # 00:00 CEST on the 25th
    s = service(store, paris)
    await s.create("p", 1, 10, SequenceSpec.build(reset="daily", time_zone="Europe/Paris"))
    for hours in (0, 2.5, 1.0, 21.49):  # 02:30 CEST, 02:30 CET (the repeated hour), 23:59 CET
        paris.advance_s(hours * 3600)
        assert (await s.next("p", 1, charge=no_charge)).period == "2026-10-25"
    paris.advance_s(60.0)
    assert (issued := await s.next("p", 1, charge=no_charge)).period == "2026-10-26" and ids(issued) == [1]


async def test_a_clock_stepped_back_across_midnight_never_repeats_a_number() -> None:
    store = MemorySequenceStore()
    clock = utc("2026-06-30T23:59:59")
    s = service(store, clock)
    await s.create("m", 1, 5, SequenceSpec.build(reset="monthly", template="M{yyyy}{mm}-{seq}"))
    june = ids(await s.next("m", 3, charge=no_charge))
    clock.advance_s(2.0)
    july = ids(await s.next("m", 3, charge=no_charge))
    clock.advance_s(-2.0)  # a node whose clock steps back: June again, from June's point
    june += ids(await s.next("m", 3, charge=no_charge))
    await s.stop()
    assert june == [1, 2, 3, 4, 5, 6] and july == [1, 2, 3]


async def test_range_and_describe_use_the_clock_s_period() -> None:
    store = MemorySequenceStore()
    clock = utc("2026-12-31T23:59:59")
    s = service(store, clock)
    await s.create("y", 100, 10, SequenceSpec.build(reset="yearly", increment=5, template="{yyyy}/{seq}"))
    reserved = await s.reserve_range("y", 3, charge=no_charge)
    assert (reserved.first, reserved.last, reserved.step, reserved.period) == (100, 110, 5, "2026-01-01")
    clock.advance_s(1.0)
    reserved = await s.reserve_range("y", 2, charge=no_charge)
    assert (reserved.first, reserved.last, reserved.period) == (100, 105, "2027-01-01")
    shown = await s.describe("y")
    assert (shown["next"], shown["period"], shown["increment"]) == (110, "2027-01-01", 5)
    assert [e["next"] for e in await s.list()] == [None]  # one point per period: the list shows none


async def test_patch_keeps_numbers_distinct_and_parse_reads_every_template() -> None:
    store = MemorySequenceStore()
    clock = utc("2026-11-27T12:00:00")
    s = service(store, clock)
    spec = SequenceSpec.build(reset="daily", template="INV-{yyyy}{mm}{dd}-{seq:06}{check}", check_digit="luhn")
    await s.create("inv", 1, 10, spec)
    old = (await s.next("inv", 1, charge=no_charge)).bound.render(1)  # type: ignore[union-attr]
    shown = await s.patch("inv", changes={"template": "INV-{yyyy}{mm}{dd}-{seq:08}{check}"})  # padding only
    assert shown["template"] == "INV-{yyyy}{mm}{dd}-{seq:08}{check}"
    with pytest.raises(InvalidOptionError, match="could render a number as"):
        await s.patch("inv", changes={"template": "INV-{yyyy}{mm}{dd}-{seq}7{check}"})  # INV-...-57x: old 57? new 5?
    await s.patch("inv", cache=50, changes={"template": "R{yyyy}{mm}{dd}{seq}", "check_digit": None})
    new = (await s.next("inv", 1, charge=no_charge)).bound.render(2)  # type: ignore[union-attr]
    assert new == "R202611272"
    assert (await s.parse("inv", old))["template"] == "INV-{yyyy}{mm}{dd}-{seq:06}{check}"  # a former one
    parsed = await s.parse("inv", new)
    assert parsed | {"template": None} == {
        "name": "inv", "text": new, "period": "2026-11-27", "value": 2, "check_digit": None, "template": None,
        "state": "reserved",
    }  # fmt: skip
    assert (await s.parse("inv", "R2026112799999"))["state"] == "unused"
    with pytest.raises(InvalidIdError, match="luhn check digit"):
        await s.parse("inv", old[:-1] + str((int(old[-1]) + 1) % 10))
    with pytest.raises(InvalidIdError, match="not a number of template"):
        await s.parse("inv", "X" + new)
    with pytest.raises(InvalidOptionError, match="never change|reset"):
        await s.patch("inv", changes={"reset": "monthly"})
    assert (await s.describe("inv"))["cache"] == 50
    await s.patch("inv", changes={"template": None})
    with pytest.raises(InvalidOptionError, match="could render"):  # the removed templates still bind the next one
        await s.patch("inv", changes={"template": "INV-{yyyy}{mm}{dd}-{seq}7"})


async def test_delete_and_create_again_continue_and_refuse_what_could_meet_the_old_numbers() -> None:
    store = MemorySequenceStore()
    clock = utc("2026-11-27T12:00:00")
    s = service(store, clock)
    await s.create("o", 1, 10, SequenceSpec.build(template="O-{seq}"))
    assert ids(await s.next("o", 3, charge=no_charge)) == [1, 2, 3]
    assert (await s.delete("o")) == {"name": "o", "deleted": True, "generation": 1, "next": 11}
    with pytest.raises(UnknownSequenceError):
        await s.next("o", 1, charge=no_charge)
    with pytest.raises(SequenceConflictError, match="could render a number as one of the old ones"):
        await s.create("o", 1, 10, SequenceSpec.build(template="O-{seq}7"))
    with pytest.raises(SequenceConflictError, match="must reset never too"):
        await s.create("o", 1, 10, SequenceSpec.build(reset="daily", template="O{yyyy}{mm}{dd}-{seq}"))
    record, created = await s.create("o", 1, 10, SequenceSpec.build(template="ORD-{seq}"))
    assert created and record.next == 11 and record.generation == 2
    assert ids(await s.next("o", 2, charge=no_charge)) == [11, 12]


async def test_another_node_s_patch_and_delete_apply_here_at_the_next_refresh() -> None:
    store = MemorySequenceStore()
    clock = utc("2026-11-27T12:00:00")
    here, there = service(store, clock), service(store, clock)
    await here.create("t", 1, 10, SequenceSpec.build(template="A{seq}"))
    assert (await here.next("t", 1, charge=no_charge)).bound.render(1) == "A1"  # type: ignore[union-attr]
    await there.patch("t", changes={"template": "B{seq}"})
    await here.refresh()
    assert (await here.next("t", 1, charge=no_charge)).bound.render(2) == "B2"  # type: ignore[union-attr]
    await there.delete("t")
    await here.refresh()
    assert "t" not in here.periodic and "t" not in here.entries
    with pytest.raises(UnknownSequenceError):
        await here.next("t", 1, charge=no_charge)
    await here.create("plain", 1, 10)
    assert ids(await here.next("plain", 2, charge=no_charge)) == [1, 2] and "plain" in here.buffers
    await there.patch("plain", changes={"template": "P{seq}"})  # a plain sequence gains a template
    await here.refresh()
    assert "plain" not in here.buffers and here.next_now("plain", 1, charge=no_charge) is None
    issued = await here.next("plain", 1, charge=no_charge)
    assert ids(issued) == [3] and issued.bound is not None and issued.bound.render(3) == "P3"
