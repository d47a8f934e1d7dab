"""The changes of app/sequences/points.py over the memory store: gapless reserve, commit, void and expiry (the
invariant and the rules of the module, checked after every step of random runs), setval, delete, patch."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import InvalidOptionError, SequenceConflictError, SequenceOverflowError, UnknownSequenceError
from app.sequences import points
from app.sequences.points import Step, Who
from app.storage.sequences import (
    HELD_MAX,
    MAX_VALUE,
    SETTLED_MAX,
    MemorySequenceStore,
    Point,
    SequenceRecord,
    period_point,
)

pytestmark = pytest.mark.anyio

WHO = Who("billing", "node-a pid 7", "10.0.0.5")
T0 = 1_795_780_800 * 10**9  # 2026-11-27T12:00Z
S = 10**9


def texts(record: SequenceRecord, period: str | None) -> points.Render:
    return lambda value: f"G-{value}"


async def gapless(start: int = 1, increment: int = 1, reset: str = "never") -> MemorySequenceStore:
    store = MemorySequenceStore()
    settings: dict[str, Any] = {"mode": "gapless"}
    if increment != 1:
        settings["increment"] = increment
    if reset != "never":
        settings["reset"] = reset
    await store.create("g", start, 1, settings)
    return store


async def reserve(store: MemorySequenceStore, now: int, ttl_s: int = 60, period: str | None = None) -> Step:
    docs, change = points.reserve("g", period, points.new_token(), ttl_s, now, WHO, texts)
    step: Step = await store.update("g", docs, change)
    if step.refusal is not None:
        raise step.refusal
    return step


async def settle(store: MemorySequenceStore, step: Step, outcome: str, now: int, reason: str | None = None) -> Step:
    period, token = points.parse_reservation(step.reservation)
    docs, change = points.settle("g", period, token, outcome, now, WHO, texts, reason)
    settled: Step = await store.update("g", docs, change)
    if settled.refusal is not None:
        raise settled.refusal
    return settled


async def point_of(store: MemorySequenceStore, period: str | None = None) -> Point:
    docs, change = points.read_point("g", period)
    _, point = await store.update("g", docs, change)
    return point


async def test_reserve_commit_void_and_expiry_keep_the_numbers_without_holes() -> None:
    store = await gapless(start=10)
    a, b, c = [await reserve(store, T0) for _ in range(3)]
    assert [a.value, b.value, c.value] == [10, 11, 12] and a.text == "G-10"
    assert (await settle(store, b, "committed", T0)).state == "committed"
    assert (await settle(store, a, "voided", T0, "typo")).state == "voided"
    point = await point_of(store)
    assert point.free == (10,) and point.next == 13 and point.committed == 1
    d = await reserve(store, T0)
    assert d.value == 10  # a voided number is the next one reserved
    assert (await settle(store, c, "voided", T0)).state == "voided"
    point = await point_of(store)
    assert point.next == 12 and point.free == ()  # voided at the top: the point goes back instead
    e = await reserve(store, T0, ttl_s=5)
    assert e.value == 12
    await settle(store, d, "committed", T0)
    later = T0 + 6 * S
    docs, change = points.sweep("g", None, later, Who(None, "node-b pid 9", None), texts)
    swept: Step = await store.update("g", docs, change)
    assert swept.expired == 1 and swept.point.next == 12 and not swept.point.held  # expired at the top: gone
    assert [(await reserve(store, later)).value for _ in range(2)] == [12, 13]
    events = store.events["g"]
    assert [e["event"] for e in events] == [
        "reserve", "reserve", "reserve", "commit", "void", "reserve", "void", "reserve", "commit", "expire",
        "reserve", "reserve",
    ]  # fmt: skip
    assert events[4] | {"id": None, "at": None} == {
        "id": None, "at": None, "at_ns": T0, "event": "void", "period": None, "value": 10, "text": "G-10",
        "reservation": a.reservation, "key": "billing", "node": "node-a pid 7", "client": "10.0.0.5", "reason": "typo",
    }  # fmt: skip
    assert events[9]["node"] == "node-b pid 9" and events[9]["key"] is None and events[9]["value"] == 12


async def test_late_commits_and_voids_are_refused_naming_why_and_repeats_answer_the_same() -> None:
    store = await gapless()
    a = await reserve(store, T0, ttl_s=1)
    with pytest.raises(SequenceConflictError, match="expired before the commit"):
        await settle(store, a, "committed", T0 + 2 * S)  # overdue: this very commit expires it, then refuses
    assert (await point_of(store)).next == 1  # and its number came back
    b = await reserve(store, T0 + 3 * S)
    assert b.value == 1
    await settle(store, b, "voided", T0 + 3 * S)
    with pytest.raises(SequenceConflictError, match="it was voided"):
        await settle(store, b, "committed", T0 + 3 * S)
    c = await reserve(store, T0 + 4 * S)
    first = await settle(store, c, "committed", T0 + 4 * S)
    again = await settle(store, c, "committed", T0 + 5 * S)  # a client's retry
    assert (first.value, first.changed) == (again.value, not again.changed) == (1, True)
    with pytest.raises(SequenceConflictError, match="is committed, and a committed integer is final"):
        await settle(store, c, "voided", T0 + 5 * S)
    assert (await settle(store, a, "voided", T0 + 5 * S)).state == "expired"  # what came back is back
    unknown = Step(None, None, "0123456789abcdef", "held", True, None, Point(1), 0)
    with pytest.raises(SequenceConflictError, match="not outstanding"):
        await settle(store, unknown, "committed", T0)
    assert len(store.events["g"]) == 6  # reserve, expire, reserve, void, reserve, commit: refusals add nothing


async def test_a_retried_reservation_finds_itself_and_the_bounds_hold() -> None:
    store = await gapless(start=MAX_VALUE - 1)
    token = points.new_token()
    docs, change = points.reserve("g", None, token, 60, T0, WHO, texts)
    first: Step = await store.update("g", docs, change)
    again: Step = await store.update("g", docs, change)  # the same step after a lost answer: no second number
    assert (first.value, again.value, again.changed) == (MAX_VALUE - 1, MAX_VALUE - 1, False)
    assert (await reserve(store, T0)).value == MAX_VALUE
    with pytest.raises(SequenceOverflowError, match=r"2\*\*63-1"):
        await reserve(store, T0)

    store = await gapless()
    held = [await reserve(store, T0) for _ in range(HELD_MAX)]
    with pytest.raises(SequenceConflictError, match=f"{HELD_MAX} reservations are outstanding"):
        await reserve(store, T0)
    for step in held[: SETTLED_MAX + 5]:
        await settle(store, step, "committed", T0)
    point = await point_of(store)
    assert len(point.settled) == SETTLED_MAX and point.committed == SETTLED_MAX + 5
    with pytest.raises(SequenceConflictError, match=f"more than {SETTLED_MAX} settlements ago"):
        await settle(store, held[0], "committed", T0)  # its outcome is no longer remembered: refused, not repeated


async def test_gapless_steps_refuse_a_cached_sequence_and_a_reservation_of_the_wrong_kind() -> None:
    store = MemorySequenceStore()
    await store.create("g", 1, 1)
    with pytest.raises(SequenceConflictError, match="not gapless"):
        await reserve(store, T0)
    store = await gapless(reset="daily")
    with pytest.raises(InvalidOptionError, match="resets"):
        await reserve(store, T0)  # a resetting sequence reserves in a period
    step = await reserve(store, T0, period="2026-11-27")
    assert step.reservation is not None and step.reservation.startswith("2026-11-27.")
    assert (await reserve(store, T0, period="2026-11-28")).value == 1  # each period counts from start
    with pytest.raises(SequenceConflictError, match="gapless: its integers are reserved one at a time"):
        await store.reserve("g", 1, period="2026-11-27")
    for bad in ("", "0123456789ABCDEF", "2026-11-27-0123456789abcdef", "x" * 20, None, 5):
        with pytest.raises(InvalidOptionError, match="reservation must be"):
            points.parse_reservation(bad)


@settings(max_examples=60)
@given(st.integers(0, 2**32), st.sampled_from([1, 3]))
async def test_random_runs_keep_the_invariant(seed: int, increment: int) -> None:
    """Random reserves, commits, voids, abandons and sweeps: after every step the integers handed out are each
    exactly one of committed, held and free; free ones go out first, lowest first; nothing is committed twice; and
    once nothing is held or free, the committed integers are exactly start, start+increment, ..."""
    rng = random.Random(seed)
    store = await gapless(start=5, increment=increment)
    now = T0
    held: dict[str, int] = {}
    committed: list[int] = []
    for _ in range(120):
        now += rng.randint(0, 2) * S
        roll = rng.random()
        if roll < 0.4 or not held:
            before = await point_of(store)
            step = await reserve(store, now, ttl_s=rng.choice([1, 3, 60]))
            assert step.value is not None and step.reservation is not None
            free = sorted({*before.free, *(v for v, exp in before.held.values() if exp <= now)})
            top = before.next
            while free and free[-1] + increment == top:  # the expiry this reservation made lowered the point
                top = free.pop()
            assert step.value == (free[0] if free else top)  # a freed number first, the lowest; else the point
            held[step.reservation] = step.value
        elif roll < 0.75:
            reservation = rng.choice(list(held))
            value = held.pop(reservation)
            try:
                done = await settle(store, Step(value, None, reservation, "held", True, None, Point(0), 0),
                                    "committed", now)  # fmt: skip
            except SequenceConflictError as exc:
                assert "expired" in str(exc)
            else:
                committed.append(value)
                assert done.value == value
        elif roll < 0.9:
            reservation = rng.choice(list(held))
            held.pop(reservation)
            await settle(store, Step(0, None, reservation, "held", True, None, Point(0), 0), "voided", now)
        else:
            now += 61 * S  # everything outstanding is abandoned, then swept
            docs, change = points.sweep("g", None, now, WHO, texts)
            await store.update("g", docs, change)
            held.clear()
        point = await point_of(store)
        handed = set(range(5, point.next, increment))
        outstanding = [v for v, _ in point.held.values()]
        parts = [set(committed), set(outstanding), set(point.free)]
        assert sum(map(len, parts)) == len(committed) + len(outstanding) + len(point.free)
        assert len(committed) == len(set(committed)) == point.committed
        assert set().union(*parts) == handed and not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
        assert not point.free or point.free[-1] + increment != point.next  # a top never waits on free
    now += 61 * S
    docs, change = points.sweep("g", None, now, WHO, texts)
    await store.update("g", docs, change)
    while (point := await point_of(store)).free:  # the holes a void below a commit left: filled by the next ones
        step = await reserve(store, now)
        assert step.value == point.free[0]
        await settle(store, step, "committed", now)
        committed.append(step.value)
    assert sorted(committed) == list(range(5, point.next, increment))


async def test_setval_moves_forward_only_and_never_for_a_gapless_sequence() -> None:
    store = MemorySequenceStore()
    await store.create("s", 1, 1)
    await store.reserve("s", 10)
    docs, change = points.setval("s", None, 100)
    assert await store.update("s", docs, change) == 100
    for value, fragment in ((99, "forward only: sequence s's is at 100"),):
        docs, change = points.setval("s", None, value)
        with pytest.raises(InvalidOptionError, match=fragment):
            await store.update("s", docs, change)
    docs, change = points.setval("s", None, 100)
    assert await store.update("s", docs, change) == 100  # already there: nothing written
    assert (await store.reserve("s", 1))[0] == 100
    docs, change = points.setval("s", "2026-11-27", 5)
    with pytest.raises(InvalidOptionError, match="never resets"):
        await store.update("s", docs, change)
    store = await gapless()
    docs, change = points.setval("g", None, 50)
    with pytest.raises(SequenceConflictError, match="would skip integers"):
        await store.update("g", docs, change)


async def test_delete_leaves_a_tombstone_and_a_re_created_name_continues() -> None:
    store = MemorySequenceStore()
    await store.create("s", 1, 1, {"increment": 2})
    await store.reserve("s", 10)
    docs, change = points.delete("s", T0)
    tombstone = await store.update("s", docs, change)
    assert tombstone.record.next == 21 and tombstone.deleted_at_ns == T0
    with pytest.raises(UnknownSequenceError):
        await store.get("s")
    docs, change = points.delete("s", T0)
    with pytest.raises(UnknownSequenceError):
        await store.update("s", docs, change)
    record, created = await store.create("s", 1, 5)
    assert created and record.next == 21 and record.generation == 2
    assert (await store.reserve("s", 2)) == (21, 2, 1)
    with pytest.raises(SequenceConflictError, match="must reset never too"):
        docs, change = points.delete("s", T0)
        await store.update("s", docs, change)
        await store.create("s", 1, 5, {"reset": "daily"})

    store = await gapless(reset="daily")  # a period's gapless state is the deleted generation's: dropped
    a = await reserve(store, T0, period="2026-11-27")
    await reserve(store, T0, period="2026-11-27")
    await settle(store, a, "voided", T0)
    docs, change = points.delete("g", T0)
    await store.update("g", docs, change)
    record, _ = await store.create("g", 1, 1, {"mode": "gapless", "reset": "daily"})
    doc = store.docs[("g", "period/2026-11-27")]
    assert period_point(record, doc) == Point(3, generation=2)  # above both, the voided 1 not reused
    assert (await reserve(store, T0, period="2026-11-27")).value == 3


async def test_steps_made_together_are_applied_in_turn_within_one_update() -> None:
    store = await gapless()
    expiring = [await reserve(store, T0, ttl_s=1) for _ in range(5)]
    later = T0 + 2 * S
    changes = [points.reserve("g", None, points.new_token(), 60, later, WHO, texts)[1] for _ in range(120)]
    bad = points.settle("g", None, "0123456789abcdef", "committed", later, WHO, texts)[1]
    docs = points.reserve("g", None, "x", 60, later, WHO, texts)[0]
    results = await store.update("g", docs, points.together([changes[0], bad, *changes[1:]]))
    steps = [r for r in results if isinstance(r, Step)]
    assert steps[1].refusal is not None and "not outstanding" in str(steps[1].refusal)  # refused, changed nothing
    made = [s for s in steps if s.refusal is None]
    assert made[0].expired == 5 and [s.value for s in made] == list(range(1, len(made) + 1))  # the freed ones first
    assert len(made) == 100 - 5 and results[len(made) + 1 :] == [None] * (
        121 - len(made) - 1
    )  # EVENTS_MAX: the rest wait
    assert len(store.events["g"]) == 5 + 5 + len(made)  # the first reserves, their expiries, the ones made
    assert {s.reservation for s in expiring}.isdisjoint(s.reservation for s in made)
