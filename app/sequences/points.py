"""Changes to a sequence's documents, each a pure function of a snapshot that
:meth:`app.storage.sequences.SequenceStore.update` applies in one atomic step: delete (a tombstone), PATCH, setval,
and gapless reservations -- reserve, commit, void and expiry -- with their audit events. (Reserving runs, handing
them back and creating over a tombstone are built into the store interface itself.)

Gapless. A gapless sequence hands out one integer per reservation, which its holder commits (final) or voids
(given back); a reservation neither committed nor voided by its expiry is voided by the fleet (any node: the first
request to touch the period after it, or a node's sweep). The state of a period is its point
(:class:`~app.storage.sequences.Point`): ``next``, ``free`` (voided and expired integers), ``held`` (reservations
outstanding) and ``settled`` (the latest outcomes). Every step keeps this **invariant**: the integers handed out in
the period -- ``start``, ``start+increment``, ... up to below ``next`` -- are each exactly one of committed, held
or free. And these **rules**:

* a reservation takes the lowest free integer, else ``next`` (which moves on by the increment): a voided or
  expired integer is the next one reserved;
* an integer freed at the top (``next - increment``) lowers ``next`` instead of waiting on ``free`` (and so on
  down), so a voided last reservation leaves no trace;
* so, at any moment with no reservation outstanding and nothing voided waiting, the committed integers of a period
  are exactly ``start, start+increment, ..., next - increment``. An integer voided below a committed one waits on
  ``free`` for the next reservation: that is the only hole there can be, and the next reservation fills it (with
  reservations in flight on many nodes, one cannot do better without taking turns);
* expiry, commit and void are judged by the clock of the node doing them (nodes' clocks should agree within a
  second); a commit that finds its reservation overdue expires it and is refused (409 naming why), as is a commit
  of a voided one; a commit or void repeated (a client's retry) answers as the first did. ``setval`` is refused:
  it would skip integers.

Every reserve, commit, void and expiry appends an audit event (who: API key name, node, client address; when; which
integer and text) in the same step. May import: :mod:`app.errors`, :mod:`app.decoding` (RFC 3339 times),
:mod:`app.storage.sequences`.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.errors import IdmintError, InvalidOptionError, SequenceConflictError, SequenceOverflowError
from app.storage.sequences import (
    EVENTS_MAX,
    HELD_MAX,
    MAX_VALUE,
    RECORD,
    SETTLED_MAX,
    TOMBSTONE,
    Change,
    Docs,
    Outcome,
    Point,
    SequenceRecord,
    Tombstone,
    period_doc,
    period_point,
    read_record,
)
from app.times import rfc3339

NS_IN_S = 1_000_000_000
TTL_DEFAULT_S = 60
TTL_MIN_S = 1
TTL_MAX_S = 3600
"""A reservation lives 1..3600 s (default 60): bounded, so a crashed holder's integer always comes back."""
EXPIRE_BATCH = 90
"""Reservations one step expires at most (the events of one step stay under EVENTS_MAX)."""
REASON_CHARS_MAX = 200
TOKEN_HEX = 16
_RESERVATION = re.compile(r"(?:([0-9]{4}-[0-9]{2}-[0-9]{2})\.)?([0-9a-f]{16})", re.ASCII)

Render = Callable[[int], str | None]
"""The text of an integer in the period at hand (None without a template)."""
Texts = Callable[[SequenceRecord, str | None], Render]
"""The texts of a period (a key, or None) under a record's template as the snapshot holds it."""


@dataclass(frozen=True)
class Who:
    """Who does a gapless step, for the audit log: the API key's name (None without keys, or a public call), the
    node (host and pid, or the pod), the client's address (None for the node's own sweep)."""

    key: str | None
    node: str
    client: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "node": self.node, "client": self.client}


@dataclass(frozen=True)
class Step:
    """The result of a gapless step: the integer, its text and its reservation (None for a sweep), the
    reservation's state after the step (``held``, ``committed``, ``voided`` or ``expired``), whether this step
    changed it (a retry does not), its expiry (held), the point after, and how many reservations the step
    expired."""

    value: int | None
    text: str | None
    reservation: str | None
    state: str
    changed: bool
    expires_at_ns: int | None
    point: Point
    expired: int
    refusal: IdmintError | None = None
    """Why the step was refused (409), raised by the caller once it has counted what the step did (expiries)."""


def reservation_id(period: str | None, token: str) -> str:
    """The reservation's ID in the API: ``<token>``, or ``<period>.<token>`` for a resetting sequence."""
    return token if period is None else f"{period}.{token}"


def parse_reservation(text: object) -> tuple[str | None, str]:
    """(period key or None, token) of a reservation ID. Raises InvalidOptionError naming the rule."""
    match = _RESERVATION.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        shown = repr(text)[:60]
        raise InvalidOptionError(
            f"reservation must be a reservation ID as reserve answered it (16 lowercase hex digits, after "
            f"'<period>.' for a sequence that resets), got {shown}"
        )
    return match.group(1), match.group(2)


def new_token() -> str:
    return secrets.token_hex(TOKEN_HEX // 2)


def check_ttl(ttl_s: object) -> int:
    """``ttl_s`` if an integer in 1..3600; else InvalidOptionError naming the rule."""
    if type(ttl_s) is not int or not TTL_MIN_S <= ttl_s <= TTL_MAX_S:
        raise InvalidOptionError(
            f"ttl_s must be an integer in {TTL_MIN_S}..{TTL_MAX_S} (seconds), got {str(ttl_s)[:40]}"
        )
    return ttl_s


def check_reason(reason: object) -> str | None:
    """A void's ``reason``: None, or printable text of at most 200 characters; else InvalidOptionError."""
    if reason is None:
        return None
    if not isinstance(reason, str) or len(reason) > REASON_CHARS_MAX or not reason.isprintable():
        raise InvalidOptionError(
            f"reason must be printable text of at most {REASON_CHARS_MAX} characters, got {repr(reason)[:60]}"
        )
    return reason


def event(
    kind: str, now_ns: int, period: str | None, value: int, text: str | None, reservation: str, who: Who, **extra: Any
) -> dict[str, Any]:
    """An audit event (:mod:`app.storage.sequences`): ``id`` sorts by time."""
    return {
        "id": f"{now_ns:020d}-{secrets.token_hex(4)}",
        "at_ns": now_ns,
        "at": rfc3339(now_ns, 3),
        "event": kind,
        "period": period,
        "value": value,
        "text": text,
        "reservation": reservation,
        **who.as_dict(),
        **extra,
    }


# -- the gapless steps --------------------------------------------------------------------------------------------


def _docs(period: str | None) -> tuple[str, ...]:
    return (RECORD,) if period is None else (RECORD, period_doc(period))


def _gapless(name: str, docs: Docs, period: str | None) -> tuple[SequenceRecord, Point]:
    record = read_record(name, docs)
    if not record.gapless:
        raise SequenceConflictError(
            f"sequence {name} is not gapless (mode cached): take its integers with next or range, not reserve"
        )
    if (period is None) == record.resets:
        raise InvalidOptionError(
            f"sequence {name} {'resets' if record.resets else 'never resets'}: its reservation IDs "
            f"{'begin with their period (2026-11-27.<token>)' if record.resets else 'are 16 hex digits, no period'}"
        )
    point = record.point if period is None else period_point(record, docs[period_doc(period)])
    return record, point


def _written(record: SequenceRecord, period: str | None, point: Point) -> dict[str, dict[str, Any] | None]:
    if period is None:
        return {RECORD: record.with_point(point).to_obj()}
    return {period_doc(period): point.members(with_generation=True)}


def _free(point: Point, values: list[int], increment: int) -> Point:
    """``values`` put back: on ``free``, or lowering ``next`` where they are at its top (see the module)."""
    free = sorted({*point.free, *values})
    nxt = point.next
    while free and free[-1] + increment == nxt:
        nxt = free.pop()
    return replace(point, next=nxt, free=tuple(free))


def _settle(point: Point, token: str, outcome: str, value: int) -> Point:
    settled = (*point.settled, (token, outcome, value))[-SETTLED_MAX:]
    return replace(point, settled=settled)


def _expire(
    point: Point, now_ns: int, increment: int, period: str | None, who: Who, render: Render, limit: int = EXPIRE_BATCH
) -> tuple[Point, list[dict[str, Any]]]:
    """Every overdue reservation (at most EXPIRE_BATCH, and at most ``limit``) expired: its integer freed, an event
    each."""
    overdue = sorted((exp, token) for token, (_, exp) in point.held.items() if exp <= now_ns)
    overdue = overdue[: max(0, min(EXPIRE_BATCH, limit))]
    if not overdue:
        return point, []
    held = dict(point.held)
    events = []
    for exp, token in overdue:
        value, _ = held.pop(token)
        point = _settle(point, token, "expired", value)
        events.append(
            event(
                "expire",
                now_ns,
                period,
                value,
                render(value),
                reservation_id(period, token),
                who,
                expires_at=rfc3339(exp, 3),
            )  # fmt: skip
        )
    values = [e["value"] for e in events]
    return _free(replace(point, held=held), values, increment), events


def reserve(
    name: str,
    period: str | None,
    token: str,
    ttl_s: int,
    now_ns: int,
    who: Who,
    texts: Texts,
    refill_only: str | None = None,
) -> tuple[tuple[str, ...], Change[Step]]:
    """(documents, change) of a reservation: the lowest free integer, else ``next``; held until
    ``now + ttl_s``. ``refill_only`` (why, in words: the period ended): the lowest free integer only, refused when
    none waits (a period that ended gets no new integer). Raises (from the change) SequenceConflictError (not
    gapless; HELD_MAX outstanding; ``refill_only`` and nothing free), SequenceOverflowError (past 2**63-1),
    UnknownSequenceError."""
    rid = reservation_id(period, token)

    def change(docs: Docs) -> Outcome[Step]:
        record, point = _gapless(name, docs, period)
        render = texts(record, period)
        if token in point.held:  # this very reservation, applied by a transaction whose answer was lost
            value, expires = point.held[token]
            return Outcome(Step(value, render(value), rid, "held", False, expires, point, 0))
        point, events = _expire(point, now_ns, record.increment, period, who, render)
        if len(point.held) >= HELD_MAX:
            error = SequenceConflictError(
                f"sequence {name}: {HELD_MAX} reservations are outstanding in this period; commit or void some "
                f"(or let them expire) first"
            )
            step = Step(None, None, None, "refused", False, None, point, len(events), error)
            return Outcome(step, _written(record, period, point) if events else {}, events)
        if point.free:
            value, free = point.free[0], point.free[1:]
            point = replace(point, free=free)
        elif refill_only is not None:
            error = SequenceConflictError(
                f"sequence {name}: {refill_only}: a reservation in it only refills a voided integer, and none is "
                f"waiting (GET /v1/sequences/{name}/holes?period={period} lists its holes)"
            )
            step = Step(None, None, None, "refused", False, None, point, len(events), error)
            return Outcome(step, _written(record, period, point) if events else {}, events)
        else:
            value = point.next
            if value > MAX_VALUE:
                raise SequenceOverflowError(
                    f"sequence {name}: the next integer would pass the maximum value 2**63-1 ({MAX_VALUE})"
                )
            point = replace(point, next=value + record.increment)
        expires = now_ns + ttl_s * NS_IN_S
        point = replace(point, held={**point.held, token: (value, expires)})
        text = render(value)
        events.append(event("reserve", now_ns, period, value, text, rid, who, expires_at=rfc3339(expires, 3)))
        return Outcome(Step(value, text, rid, "held", True, expires, point, len(events) - 1),
                       _written(record, period, point), events)  # fmt: skip

    return _docs(period), change


def settle(
    name: str,
    period: str | None,
    token: str,
    outcome: str,
    now_ns: int,
    who: Who,
    texts: Texts,
    reason: str | None = None,
) -> tuple[tuple[str, ...], Change[Step]]:
    """(documents, change) of a commit (``outcome`` "committed") or a void ("voided") of reservation ``token``.

    Overdue reservations are expired first. Refused with SequenceConflictError (409) naming why: a commit of an
    expired or voided reservation, a void of a committed one, a reservation this period does not know (never made,
    of a deleted sequence, or settled more than SETTLED_MAX settlements ago). A repeat answers as the first did."""
    rid = reservation_id(period, token)
    verb = "commit" if outcome == "committed" else "void"

    def change(docs: Docs) -> Outcome[Step]:
        record, point = _gapless(name, docs, period)
        render = texts(record, period)
        point, events = _expire(point, now_ns, record.increment, period, who, render)
        expired = len(events)
        if token in point.held:
            value, _ = point.held[token]
            held = dict(point.held)
            del held[token]
            point = _settle(replace(point, held=held), token, outcome, value)
            extra = {"reason": reason} if outcome == "voided" else {}
            if outcome == "committed":
                point = replace(point, committed=point.committed + 1)
            else:
                point = _free(point, [value], record.increment)
            text = render(value)
            events.append(event(verb, now_ns, period, value, text, rid, who, **extra))
            step = Step(value, text, rid, outcome, True, None, point, expired)
            return Outcome(step, _written(record, period, point), events)
        writes = _written(record, period, point) if events else {}
        found = next((s for s in reversed(point.settled) if s[0] == token), None)
        if found is None:
            error = SequenceConflictError(
                f"sequence {name}: reservation {rid} is not outstanding: it was never made in this period, or made by "
                f"a deleted sequence of that name, or settled more than {SETTLED_MAX} settlements ago (the audit log, "
                f"GET /v1/sequences/{name}/audit, says what became of it)"
            )
            return Outcome(Step(None, None, rid, "unknown", False, None, point, expired, error), writes, events)
        _, state, value = found
        step = Step(value, render(value), rid, state, False, None, point, expired)
        if state == outcome or (outcome == "voided" and state == "expired"):
            return Outcome(step, writes, events)  # a retry, or a void of what already came back
        if outcome == "committed":
            why = "it expired before the commit (its time to live passed)" if state == "expired" else "it was voided"
            error = SequenceConflictError(
                f"sequence {name}: reservation {rid} cannot be committed: {why}, and its integer {value} went back "
                "to be reserved again; reserve a new one"
            )
        else:
            error = SequenceConflictError(
                f"sequence {name}: reservation {rid} cannot be voided: its integer {value} is committed, and a "
                "committed integer is final"
            )
        return Outcome(replace(step, refusal=error), writes, events)

    return _docs(period), change


def sweep(name: str, period: str | None, now_ns: int, who: Who, texts: Texts) -> tuple[tuple[str, ...], Change[Step]]:
    """(documents, change) expiring the period's overdue reservations (a node's sweep); writes nothing when none
    is overdue. The result's ``point`` is the period's state (its ``held`` counted in the metrics)."""

    def change(docs: Docs) -> Outcome[Step]:
        record, point = _gapless(name, docs, period)
        point, events = _expire(point, now_ns, record.increment, period, who, texts(record, period))
        return Outcome(Step(None, None, None, "swept", bool(events), None, point, len(events)),
                       _written(record, period, point) if events else {}, events)  # fmt: skip

    return _docs(period), change


@dataclass(frozen=True)
class Open:
    """A reservation still outstanding: its period, integer, text, reservation ID and expiry (ns)."""

    period: str | None
    value: int
    text: str | None
    reservation: str
    expires_at_ns: int


@dataclass(frozen=True)
class Removal:
    """What one step of a gapless sequence's DELETE did: ``deleted`` (the record is gone, a tombstone stays: the
    last step) or None; ``open``, the reservations outstanding it saw (every period's, when it wrote nothing: what
    a refusal names); the voids and expiries it wrote."""

    deleted: Tombstone | None
    open: tuple[Open, ...]
    voided: int
    expired: int


DELETE_REASON = "sequence deleted (DELETE with force)"
"""The ``reason`` of the void events a forced DELETE writes."""


def delete_gapless(
    name: str, periods: Sequence[str | None], now_ns: int, who: Who, texts: Texts, force: bool
) -> tuple[tuple[str, ...], Change[Removal]]:
    """(documents, change) of one step deleting gapless ``name``, whose reservations may be outstanding in
    ``periods`` (None: a sequence that never resets keeps them in its record); the caller repeats it until the
    result is ``deleted``, or refuses. A step works on one document (its events are stored with it): the first
    period with an overdue reservation (expired) or, with ``force``, an outstanding one (voided, an event each,
    reason :data:`DELETE_REASON`; as many as EVENTS_MAX allows). With nothing to do there: none outstanding, the
    record goes and a tombstone stays (as :func:`delete`); some outstanding (``force`` off), nothing is written
    and the result names them (the caller refuses, 409). Raises UnknownSequenceError."""
    keys = [period_doc(p) for p in periods if p is not None]
    docs = (RECORD, TOMBSTONE, *keys)

    def change(found: Docs) -> Outcome[Removal]:
        record = read_record(name, found)
        still: list[Open] = []
        for period in periods:
            if (period is None) == record.resets:
                continue
            point = record.point if period is None else period_point(record, found[period_doc(period)])
            render = texts(record, period)
            if any(exp <= now_ns for _, exp in point.held.values()) or (force and point.held):
                point, events = _expire(point, now_ns, record.increment, period, who, render)
                expired = len(events)
                if force:
                    by_expiry = sorted(point.held.items(), key=lambda item: (item[1][1], item[1][0]))
                    for token, (value, _) in by_expiry[: EVENTS_MAX - len(events)]:
                        held = dict(point.held)
                        del held[token]
                        point = _free(
                            _settle(replace(point, held=held), token, "voided", value), [value], record.increment
                        )
                        rid = reservation_id(period, token)
                        events.append(
                            event("void", now_ns, period, value, render(value), rid, who, reason=DELETE_REASON)
                        )
                left = _open(point, period, render)
                removal = Removal(None, left, len(events) - expired, expired)
                return Outcome(removal, _written(record, period, point), events)
            still += _open(point, period, render)
        if still:
            return Outcome(Removal(None, tuple(still), 0, 0))
        tombstone = Tombstone(record, now_ns)
        return Outcome(Removal(tombstone, (), 0, 0), {RECORD: None, TOMBSTONE: tombstone.to_obj()})

    return docs, change


def _open(point: Point, period: str | None, render: Render) -> tuple[Open, ...]:
    return tuple(
        Open(period, value, render(value), reservation_id(period, token), expires)
        for token, (value, expires) in point.held.items()
    )


def read_point(name: str, period: str | None) -> tuple[tuple[str, ...], Change[tuple[SequenceRecord, Point]]]:
    """(documents, change) reading the record and the point of ``period`` (None: the record's own)."""

    def change(docs: Docs) -> Outcome[tuple[SequenceRecord, Point]]:
        record = read_record(name, docs)
        point = record.point if period is None else period_point(record, docs[period_doc(period)])
        return Outcome((record, point))

    return _docs(period), change


def together(changes: Sequence[Change[Step]]) -> Change[list[Step | IdmintError | None]]:
    """One change applying ``changes`` in turn, each to the documents as the ones before left them (a node's
    concurrent gapless steps of one period, written in one storage step). Its result has, per change, its Step,
    the IdmintError it raised (it changed nothing), or None when it did not fit under EVENTS_MAX with the ones
    before it (not applied: to be tried in the next step)."""

    def change(docs: Docs) -> Outcome[list[Step | IdmintError | None]]:
        current = dict(docs)
        writes: dict[str, dict[str, Any] | None] = {}
        events: list[dict[str, Any]] = []
        results: list[Step | IdmintError | None] = []
        full = False
        for one in changes:
            if full:
                results.append(None)
                continue
            try:
                outcome = one(current)
            except IdmintError as exc:
                results.append(exc)
                continue
            if events and len(events) + len(outcome.events) > EVENTS_MAX:
                full = True  # this one and the rest wait for the next storage step
                results.append(None)
                continue
            current.update(outcome.writes)
            writes.update(outcome.writes)
            events += outcome.events
            results.append(outcome.result)
        return Outcome(results, writes, events)

    return change


# -- the operator's steps ----------------------------------------------------------------------------------------


def setval(name: str, period: str | None, value: int) -> tuple[tuple[str, ...], Change[int]]:
    """(documents, change) moving the point of ``period`` (None: a sequence that never resets) forward to
    ``value``: the next integer reserved is ``value`` or above. Returns the point after. Raises (from the change)
    InvalidOptionError for a value below the point ("backward could repeat") or past 2**63-1, or a period given
    for a sequence that never resets (or none for one that does); SequenceConflictError for a gapless sequence."""

    def change(docs: Docs) -> Outcome[int]:
        record = read_record(name, docs)
        if (period is None) == record.resets:
            raise InvalidOptionError(
                f"sequence {name} {'resets' if record.resets else 'never resets'}: "
                + ("setval moves the point of one period" if record.resets else "it has no period to name")
            )
        if record.gapless:
            raise SequenceConflictError(
                f"sequence {name} is gapless: setval would skip integers, and a gapless sequence's committed integers "
                "have no holes; create a sequence with the start you need instead"
            )
        point = record.point if period is None else period_point(record, docs[period_doc(period)])
        if value < point.next:
            where = f" in period {period}" if period else ""
            raise InvalidOptionError(
                f"setval moves the allocation point forward only: sequence {name}'s is at {point.next}{where}, and "
                f"{value} could issue integers again"
            )
        if value == point.next:
            return Outcome(value)
        return Outcome(value, _written(record, period, replace(point, next=value)))

    return _docs(period), change


def delete(name: str, now_ns: int) -> tuple[tuple[str, ...], Change[Tombstone]]:
    """(documents, change) deleting ``name``: its record goes, a tombstone holding it stays (so creating the name
    again continues above it: :func:`app.storage.sequences.continued`). Raises UnknownSequenceError."""

    def change(docs: Docs) -> Outcome[Tombstone]:
        tombstone = Tombstone(read_record(name, docs), now_ns)
        return Outcome(tombstone, {RECORD: None, TOMBSTONE: tombstone.to_obj()})

    return (RECORD, TOMBSTONE), change


def patch(
    name: str, edit: Callable[[SequenceRecord], SequenceRecord]
) -> tuple[tuple[str, ...], Change[SequenceRecord]]:
    """(documents, change) replacing the record by ``edit(record)`` (a pure function that checks the new settings,
    :meth:`app.sequences.service.SequenceService.patch`); the point is kept as it is. Raises what ``edit``
    raises, UnknownSequenceError."""

    def change(docs: Docs) -> Outcome[SequenceRecord]:
        record = read_record(name, docs)
        edited = replace(edit(record), point=record.point, generation=record.generation)
        if edited == record:
            return Outcome(record)
        return Outcome(edited, {RECORD: edited.to_obj()})

    return (RECORD,), change
