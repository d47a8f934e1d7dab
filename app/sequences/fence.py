"""What a storage fence (``idmint storage fence``, :mod:`app.storage.fence`) does to sequences, and the setval that
ends a gapless sequence's refusal after it.

A store that went back in time holds allocation points older than what the fleet already handed out. The fence
cannot know how far each moved since, so it moves them past any likely use:

* a cached sequence: its point (a resetting one: the point of every period from the day before the history
  record was last checked, to the period the fence's clock plus its margin is in) moves forward by ``gap``
  integers (``gap x increment``), with a ``fence`` audit event;
* a gapless sequence has no holes to spare: skipping would make one, and repeating would commit an integer twice.
  Its points (same periods) stay, with a ``fence`` audit event, and the fence refuses them until an operator sets
  each from the business's own records (:func:`setval_gapless`: the first integer those records have not used;
  held, free and settled reservations of the old history are dropped).

Sequences created after the backup was taken are not in the store (their names, created again, start over), nor
are tombstones of names deleted after it: see docs/safety.md.

May import: :mod:`app.errors`, :mod:`app.storage.sequences`, :mod:`app.sequences` (points, spec).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import Any

from app.errors import InvalidOptionError
from app.sequences.points import Who, _written
from app.sequences.spec import SequenceSpec
from app.storage.sequences import (
    MAX_VALUE,
    RECORD,
    Change,
    Docs,
    Outcome,
    SequenceRecord,
    SequenceStore,
    period_doc,
    period_point,
    read_record,
)
from app.times import rfc3339

NS_IN_DAY = 86_400 * 1_000_000_000
DEFAULT_GAP = 1_000_000
"""Integers every cached sequence's point skips at a fence (``--sequence-gap``)."""


@dataclass(frozen=True)
class SequenceStep:
    """One point a fence moves (``gapless``: keeps, and leaves refused): ``period`` None for a sequence that never
    resets; ``next`` the point now (None: the period's document is absent, it starts at ``start``)."""

    name: str
    period: str | None
    gapless: bool
    next: int | None


def periods(spec: SequenceSpec, since_ns: int, until_ns: int) -> list[str | None]:
    """The period keys of a sequence from the one ``since_ns`` is in to the one ``until_ns`` is in ([None] for one
    that never resets)."""
    rule = spec.periods
    if spec.reset == "never":
        return [None]
    first = rule.period_at(since_ns).first_day
    last = rule.period_at(until_ns).first_day
    assert first is not None and last is not None
    out: list[str | None] = []
    day = first
    while day <= last:
        out.append(day.isoformat())
        day = rule.following(day)
    return out


async def plan(store: SequenceStore, since_ns: int, until_ns: int) -> list[SequenceStep]:
    """Every point a fence moves or keeps (see the module), read from ``store`` (the store's own, not guarded)."""
    from app.sequences.service import spec_of

    steps: list[SequenceStep] = []
    for record in await store.list():
        spec = spec_of(record)
        for key in periods(spec, since_ns - NS_IN_DAY, until_ns):
            docs = (RECORD,) if key is None else (RECORD, period_doc(key))
            found = await store.update(record.name, docs, _read(record.name, key))
            steps.append(SequenceStep(record.name, key, spec.mode == "gapless", found))
    return steps


def _read(name: str, period: str | None) -> Change[int | None]:
    def change(docs: Docs) -> Outcome[int | None]:
        record = read_record(name, docs)
        if period is None:
            return Outcome(record.point.next)
        found = docs[period_doc(period)]
        return Outcome(None if found is None else period_point(record, found).next)

    return change


def fence_step(
    step: SequenceStep, gap: int, now_ns: int, fence_id: str, who: Who
) -> tuple[tuple[str, ...], Change[int]]:
    """(documents, change) applying ``step``: a cached point moved forward by ``gap`` integers (at most to
    2**63), a gapless one kept; both with a ``fence`` audit event. Returns the point after."""
    name, period = step.name, step.period
    docs = (RECORD,) if period is None else (RECORD, period_doc(period))

    def change(found: Docs) -> Outcome[int]:
        record = read_record(name, found)
        point = record.point if period is None else period_point(record, found[period_doc(period)])
        after = point.next if record.gapless else min(point.next + gap * record.increment, MAX_VALUE + 1)
        moved = replace(point, next=after)
        kind = "fence" if not record.gapless else "fence-refused"
        event = _event(kind, now_ns, period, after, who, fence_id=fence_id, before=point.next, gap=gap)
        return Outcome(after, _written(record, period, moved), [event])

    return docs, change


def setval_gapless(
    name: str, period: str | None, value: int, now_ns: int, who: Who
) -> tuple[tuple[str, ...], Change[int]]:
    """(documents, change) setting gapless ``name``'s point of ``period`` to ``value`` after a fence: the first
    integer the business's own records have not used. Its held, free and settled reservations (of the old history)
    are dropped; ``value`` must be at or above the point (InvalidOptionError: below would repeat integers the store
    knows were handed out). Returns the point after, with a ``setval`` audit event."""
    docs = (RECORD,) if period is None else (RECORD, period_doc(period))

    def change(found: Docs) -> Outcome[int]:
        record: SequenceRecord = read_record(name, found)
        point = record.point if period is None else period_point(record, found[period_doc(period)])
        if value < point.next:
            where = f" in period {period}" if period else ""
            raise InvalidOptionError(
                f"setval moves a gapless sequence's point forward only: {name}'s is at {point.next}{where}, and the "
                f"store's history shows integers up to {point.next - record.increment} handed out"
            )
        moved = replace(point, next=value, free=(), held={}, settled=())
        event = _event("setval", now_ns, period, value, who, before=point.next, dropped=len(point.held))
        return Outcome(value, _written(record, period, moved), [event])

    return docs, change


def _event(kind: str, now_ns: int, period: str | None, value: int, who: Who, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"{now_ns:020d}-{secrets.token_hex(4)}",
        "at_ns": now_ns,
        "at": rfc3339(now_ns, 3),
        "event": kind,
        "period": period,
        "value": value,
        "text": None,
        "reservation": None,
        **who.as_dict(),
        **extra,
    }
