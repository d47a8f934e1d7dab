"""Sequence storage: every sequence's settings, allocation points and gapless reservations, changed only by atomic
steps of one primitive, :meth:`SequenceStore.update`.

Documents. A sequence ``name`` is a handful of JSON objects ("documents"), each read and replaced whole::

    record            the sequence (absent once deleted):
                      {"start", "cache", "next",                      today's members, byte for byte for a plain
                                                                      sequence ({"start":1,"cache":1000,"next":1})
                       <settings that differ from their default>,     increment, reset, time_zone, template,
                                                                      check_digit, mode (app.sequences.spec)
                       "generation": g,                               from 2 on: the name was deleted and created
                                                                      again g - 1 times (absent: 1)
                       "former_templates": [[template, check], ...],  templates replaced by PATCH, oldest first
                       <a point's gapless members>}                   for a gapless sequence that never resets
    tombstone         what DELETE left: the record as it was, plus "deleted_at_ns" (absent unless deleted)
    period/<key>      the allocation point of one period of a resetting sequence, ``<key>`` its first day in ISO
                      8601 (``2026-11-27``): {"next", "generation"?, <gapless members>}; created by the period's
                      first reservation, outliving DELETE (a re-created name continues from it), pruned a year
                      and ``IDMINT_LEDGER_DAYS`` after it began

A sequence that never resets keeps its allocation point in its record (``next``); one that
resets keeps one point per period in ``period/<key>`` (its record's ``next`` stays ``start``). A **point**
(:class:`Point`) is::

    next        the first integer of the period no one has reserved: integers go next, next+increment, ...
    free        gapless: integers voided or expired, ascending; each is reserved again before ``next`` moves
    held        gapless: {"<token>": [integer, expires_at_ns]}, the reservations outstanding (at most HELD_MAX)
    settled     gapless: [[token, outcome, integer], ...], the latest SETTLED_MAX settled (committed, voided,
                expired), oldest first: how a late commit is told why it is refused, and a retry that it is done
    committed   gapless: how many integers of the period were committed
    generation  period documents: the generation of the sequence that last wrote it (gapless state written by
                an earlier generation, a deleted sequence's, is dropped: a re-created name reserves above it)

Members at their default (empty, 0, 1) are not stored. **Audit events** (gapless: reserve, commit, void, expire)
are JSON objects ``{"id": "<at_ns, 20 digits>-<8 hex>", "at_ns", "at", "event", "period", "value", "text",
"reservation", "key", "node", "client", ...}`` appended to the name's audit log in the same atomic step as the
change they record (:class:`Outcome`); read back in ``id`` order, a page at a time (:meth:`SequenceStore.audit`).

The primitive. :meth:`SequenceStore.update` reads the named documents of one sequence as one snapshot, calls a pure
function of them (:data:`Change`), and applies its :class:`Outcome` -- documents replaced or deleted, audit events
appended -- only if none of those documents changed since the snapshot; if one did, it calls the function again on
a fresh snapshot. Every rule of sequences (reserving a run, handing one back, create over a tombstone, delete,
PATCH, setval, gapless reserve/commit/void/expiry) is such a function, written once above the stores
(:mod:`app.sequences.points`; :meth:`SequenceStore.create`, :meth:`~SequenceStore.reserve` and
:meth:`~SequenceStore.give_back` here). What each backend provides is the atomic step:

* **etcd** -- one transaction: ``If(ModRevision(k) == seen, for every document k) Then (Put or Delete each
  document written, Put each event key) Else (Get every document)``; a missing document compares as revision 0.
  The revisions last seen are kept per key, so an uncontended update is one round trip; a conflict is retried at
  once with the values the failure branch returned (:mod:`app.storage.etcd.sequences`).
* **files** (embedded) -- under the sequence's flock: read the documents, call the function, replace each file
  written (temporary file, fsync, rename, directory fsync), delete the files deleted after; events are written into
  the document they change (a journal, appended to the audit file after the rename and verified at the next write)
  so that an event is durable exactly when its change is (:mod:`app.storage.embedded.sequences`).
* **PostgreSQL** -- one READ COMMITTED transaction: ``pg_advisory_xact_lock`` of the sequence's name (a row lock
  could not cover a document not yet written), ``SELECT`` of the documents once the lock is held, the function, then
  ``INSERT ... ON CONFLICT DO UPDATE`` / ``DELETE`` of the documents and ``INSERT`` of the events, ``COMMIT``
  (:mod:`app.storage.postgres.sequences`).

Why that never issues an integer twice: every reservation moves a point past what it takes in one atomic step; a
hand-back (a clean stop: :meth:`SequenceStore.give_back`) lowers a point only when its document is still exactly
what this process's latest reservation wrote, so every integer at or above the point is neither issued nor held; a
gapless integer goes back on ``free`` only by a void or an expiry that removes its reservation in the same step,
and comes off ``free`` only into a new reservation; ``generation`` makes a re-created sequence's documents differ
from its predecessor's, so no hand-back or reservation of the old one applies to the new one. Integers never pass
``MAX_VALUE`` (2**63-1, a signed 64-bit integer): a reservation that would is refused (or, ``partial``, cut short).

What a backend implements (the PostgreSQL one included): :meth:`~SequenceStore.get`, :meth:`~SequenceStore.list`,
:meth:`~SequenceStore.update`, :meth:`~SequenceStore.audit` and :meth:`~SequenceStore.prune`; ``create``,
``reserve`` and ``give_back`` are built here on ``update`` (a backend may override them for speed, keeping their
meaning). Implementations: :class:`app.storage.embedded.sequences.EmbeddedSequenceStore`,
:class:`app.storage.etcd.sequences.EtcdSequenceStore`, and :class:`MemorySequenceStore` (the test double: one
process, an injected outage).

May import: :mod:`app.errors` only.
"""

from __future__ import annotations

import abc
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from app.errors import (
    BackendUnavailableError,
    IdmintError,
    InvalidOptionError,
    SequenceConflictError,
    SequenceOverflowError,
    UnknownSequenceError,
)

MAX_VALUE = 2**63 - 1
"""The largest integer a sequence issues (signed 64-bit)."""
MAX_RANGE_COUNT = 2**40
"""The largest ``count`` of one ``range`` reservation."""
MIN_START = 0
CACHE_MIN = 1
CACHE_MAX = 1_000_000
"""Bounds of a sequence's ``cache`` (a node's buffer reserves between cache and 100 x cache at once)."""
DEFAULT_START = 1
DEFAULT_CACHE = 1000
NAME_PATTERN = "[a-z0-9_-]{1,64}"
_NAME = re.compile(NAME_PATTERN)

RECORD = "record"
TOMBSTONE = "tombstone"
PERIOD_PREFIX = "period/"
PERIOD_KEY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", re.ASCII)
"""A period key: the period's first day in ISO 8601 (what :attr:`app.sequences.period.Period.key` gives)."""
EVENT_ID = re.compile(r"[0-9]{20}-[0-9a-f]{8}", re.ASCII)
"""An audit event's ``id``: its time (ns since the epoch, 20 digits) and 8 random hex digits; sorts by time."""

HELD_MAX = 1000
"""Reservations a gapless period may have outstanding at once (a document holds them all)."""
SETTLED_MAX = 128
"""Settled reservations a point remembers (the latest ones)."""
EVENTS_MAX = 100
"""Audit events one update may append (an etcd transaction holds 128 operations by default)."""
GENERATION_MAX = 2**31
FORMER_TEMPLATES_MAX = 8
"""Templates replaced by PATCH that a record remembers (``parse`` reads numbers of any of them)."""


def check_name(name: str) -> str:
    """``name`` if it matches ``[a-z0-9_-]{1,64}``; else InvalidOptionError naming the rule."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        shown = name if isinstance(name, str) and len(name) <= 80 else f"{str(name)[:80]}..."
        raise InvalidOptionError(
            f"sequence name must match {NAME_PATTERN} (lowercase ASCII letters, digits, "
            f"'_' and '-', 1 to 64 characters), got {shown!r}"
        )
    return name


def check_settings(start: int, cache: int) -> None:
    """Raise InvalidOptionError unless ``start`` is in 0..2**63-1 and ``cache`` in 1..1,000,000."""
    if not MIN_START <= start <= MAX_VALUE:
        raise InvalidOptionError(f"start must be in {MIN_START}..{MAX_VALUE} (2**63-1), got {start}")
    if not CACHE_MIN <= cache <= CACHE_MAX:
        raise InvalidOptionError(f"cache must be in {CACHE_MIN}..{CACHE_MAX}, got {cache}")


def period_doc(key: str | None) -> str:
    """The document holding the allocation point of period ``key`` (None: a sequence that never resets keeps it in
    its record). Raises ValueError for a key that is not a first day in ISO 8601 (a programming error)."""
    if key is None:
        return RECORD
    if PERIOD_KEY.fullmatch(key) is None:
        raise ValueError(f"a period key is a first day in ISO 8601 (2026-11-27), got {key!r}")
    return PERIOD_PREFIX + key


def check_doc(doc: str) -> str:
    """``doc`` if it names a document (record, tombstone, period/<key>); ValueError otherwise."""
    if doc in (RECORD, TOMBSTONE) or (doc.startswith(PERIOD_PREFIX) and PERIOD_KEY.fullmatch(doc[7:])):
        return doc
    raise ValueError(f"no such sequence document: {doc!r}")


# -- runs ---------------------------------------------------------------------------------------------------------

Run = tuple[int, int, int]
"""``(first, count, step)``: the integers ``first + i * step`` for i in 0..count-1."""


def advance(point: int, count: int, step: int, partial: bool = False) -> tuple[Run, int]:
    """The run of ``count`` integers reserved at allocation point ``point`` with increment ``step``, and the
    allocation point after it: ``((point, count, step), point + count * step)``.

    Raises SequenceOverflowError when the run's last integer would pass 2**63-1; with ``partial`` the run is cut
    at the last integer that fits instead, and the error is raised only when not one fits.
    """
    if count < 1 or step < 1:
        raise ValueError(f"a run has count >= 1 and step >= 1, got count {count}, step {step}")
    fits = (MAX_VALUE - point) // step + 1 if point <= MAX_VALUE else 0
    if count > fits:
        if not partial or fits <= 0:
            raise SequenceOverflowError(
                f"{count} more integers by {step} from {point} would pass the maximum value 2**63-1 ({MAX_VALUE}); "
                f"{max(fits, 0)} remain"
            )
        count = fits
    return (point, count, step), point + count * step


def run_last(run: Run) -> int:
    """The last integer of a run."""
    first, count, step = run
    return first + (count - 1) * step


# -- documents ----------------------------------------------------------------------------------------------------


def _int(value: object, what: str, low: int = 0, high: int = MAX_VALUE + 1) -> int:
    if type(value) is not int or not low <= value <= high:  # bool is an int subclass, and must not pass
        raise ValueError(f"{what} must be an integer in {low}..{high}, got {str(value)[:40]}")
    return value


@dataclass(frozen=True)
class Point:
    """An allocation point and, for a gapless sequence, its reservations (see the module)."""

    next: int
    free: tuple[int, ...] = ()
    held: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """token -> (integer, expires_at_ns)."""
    settled: tuple[tuple[str, str, int], ...] = ()
    """(token, "committed" | "voided" | "expired", integer), oldest first."""
    committed: int = 0
    generation: int = 1

    def members(self, with_generation: bool) -> dict[str, Any]:
        """The stored members: ``next`` and those that differ from their default."""
        out: dict[str, Any] = {"next": self.next}
        if with_generation and self.generation != 1:
            out["generation"] = self.generation
        if self.free:
            out["free"] = list(self.free)
        if self.held:
            out["held"] = {token: list(held) for token, held in self.held.items()}
        if self.settled:
            out["settled"] = [list(s) for s in self.settled]
        if self.committed:
            out["committed"] = self.committed
        return out

    @classmethod
    def from_members(cls, obj: Mapping[str, Any], generation: int = 1) -> Point:
        """The point in a stored document (``generation``: the record's, for a point kept in a record). Raises
        ValueError for a member out of rule."""
        nxt = _int(obj.get("next"), "next")
        free = tuple(_int(v, "a free integer") for v in obj.get("free", ()))
        held_obj = obj.get("held", {})
        settled_obj = obj.get("settled", ())
        if not isinstance(held_obj, dict) or not isinstance(settled_obj, list | tuple) or not isinstance(free, tuple):
            raise ValueError("held must be an object and settled a list")
        held = {}
        for token, pair in held_obj.items():
            if not isinstance(pair, list) or len(pair) != 2:
                raise ValueError(f"held reservation {token!r} must be [integer, expires_at_ns]")
            held[str(token)] = (_int(pair[0], "a held integer"), _int(pair[1], "expires_at_ns", 0, 2**63))
        settled = []
        for entry in settled_obj:
            if not isinstance(entry, list) or len(entry) != 3 or entry[1] not in SETTLED_OUTCOMES:
                raise ValueError(f"a settled reservation must be [token, outcome, integer], got {str(entry)[:80]}")
            settled.append((str(entry[0]), str(entry[1]), _int(entry[2], "a settled integer")))
        return cls(
            nxt,
            free,
            held,
            tuple(settled),
            _int(obj.get("committed", 0), "committed", 0, 2**63),
            _int(obj.get("generation", generation), "generation", 1, GENERATION_MAX),
        )


SETTLED_OUTCOMES = ("committed", "voided", "expired")
POINT_MEMBERS = ("next", "free", "held", "settled", "committed")
RECORD_MEMBERS = ("start", "cache", "generation", "former_templates", *POINT_MEMBERS)
"""A record's members that are not settings (every other member is a setting: :mod:`app.sequences.spec`)."""


@dataclass(frozen=True)
class SequenceRecord:
    """One stored sequence: ``start``, ``cache``, its ``settings`` (the members of
    :meth:`app.sequences.spec.SequenceSpec.stored`: only those that differ from their default), its ``generation``
    (1, or how many times the name was created), the templates PATCH replaced, and its allocation ``point`` (the
    one of a sequence that never resets; a resetting one's record keeps ``next`` at ``start``)."""

    name: str
    start: int
    cache: int
    point: Point
    settings: Mapping[str, Any] = field(default_factory=dict)
    generation: int = 1
    former_templates: tuple[tuple[str, str | None], ...] = ()

    @classmethod
    def new(cls, name: str, start: int, cache: int, settings: Mapping[str, Any] | None = None) -> SequenceRecord:
        return cls(name, start, cache, Point(start), dict(settings or {}))

    @property
    def next(self) -> int:
        """The allocation point kept in the record: the first integer no node has reserved."""
        return self.point.next

    @property
    def remaining(self) -> int:
        """Integers left before MAX_VALUE is passed (0 when exhausted), at increment 1."""
        return MAX_VALUE - self.next + 1

    @property
    def increment(self) -> int:
        return int(self.settings.get("increment", 1))

    @property
    def resets(self) -> bool:
        return bool(self.settings.get("reset", "never") != "never")

    @property
    def gapless(self) -> bool:
        return bool(self.settings.get("mode", "cached") == "gapless")

    def same_settings(self, start: int, cache: int, settings: Mapping[str, Any] | None = None) -> bool:
        """Whether these are the "same settings" for an idempotent create: start, cache and stored settings."""
        return self.start == start and self.cache == cache and dict(self.settings) == dict(settings or {})

    def with_point(self, point: Point) -> SequenceRecord:
        return replace(self, point=point)

    def as_dict(self) -> dict[str, Any]:
        """``{"name", "start", "cache", "next", <settings>}`` (what the API shows of the stored record)."""
        return {"name": self.name, "start": self.start, "cache": self.cache, "next": self.next, **self.settings}

    def to_obj(self) -> dict[str, Any]:
        """The stored object: ``{"start", "cache", "next"}`` then the members that differ from their default (the
        name is the key)."""
        out: dict[str, Any] = {"start": self.start, "cache": self.cache, "next": self.next}
        out.update(self.settings)
        if self.generation != 1:
            out["generation"] = self.generation
        if self.former_templates:
            out["former_templates"] = [list(t) for t in self.former_templates]
        members = self.point.members(with_generation=False)
        del members["next"]
        out.update(members)
        return out

    def to_json(self) -> bytes:
        return dumps(self.to_obj())

    @classmethod
    def from_obj(cls, name: str, obj: object, where: str) -> SequenceRecord:
        """Read a stored object. An unreadable record is BackendUnavailableError (never read as "empty": that could
        issue integers twice). The settings are checked by :mod:`app.sequences.spec` where they are used."""
        try:
            if not isinstance(obj, dict):
                raise ValueError(f"not a JSON object: {str(obj)[:80]}")
            start = _int(obj["start"], "start", MIN_START, MAX_VALUE)
            cache = _int(obj["cache"], "cache", CACHE_MIN, 2**63)
            generation = _int(obj.get("generation", 1), "generation", 1, GENERATION_MAX)
            point = Point.from_members(obj, generation)
            if point.next < start:
                raise ValueError(f"next {point.next} is below start {start}")
            former = obj.get("former_templates", [])
            if not isinstance(former, list) or not all(
                isinstance(t, list) and len(t) == 2 and isinstance(t[0], str) and isinstance(t[1], str | None)
                for t in former
            ):
                raise ValueError("former_templates must be a list of [template, check_digit]")
            settings = {k: v for k, v in obj.items() if k not in RECORD_MEMBERS and k != "deleted_at_ns"}
        except (ValueError, KeyError, TypeError) as exc:
            raise BackendUnavailableError(f"sequence record {where} is unreadable: {exc}", retry_after=5) from exc
        return cls(name, start, cache, point, settings, generation, tuple((t[0], t[1]) for t in former))

    @classmethod
    def from_json(cls, name: str, data: bytes | str, where: str) -> SequenceRecord:
        return cls.from_obj(name, loads(data, where), where)

    def advance(self, count: int, partial: bool = False) -> tuple[int, int, SequenceRecord]:
        """(first, last, record after the reservation) for ``count`` integers at increment 1 (today's sequences).

        Raises SequenceOverflowError (see :func:`advance`)."""
        run, after = advance(self.next, count, 1, partial)
        return run[0], run_last(run), self.with_point(replace(self.point, next=after))


@dataclass(frozen=True)
class Tombstone:
    """What DELETE left of a sequence: its record as it was, and when (ns since the epoch, the node's clock)."""

    record: SequenceRecord
    deleted_at_ns: int

    def to_obj(self) -> dict[str, Any]:
        return {**self.record.to_obj(), "generation": self.record.generation, "deleted_at_ns": self.deleted_at_ns}

    @classmethod
    def from_obj(cls, name: str, obj: object, where: str) -> Tombstone:
        record = SequenceRecord.from_obj(name, obj, where)
        try:
            deleted = _int(obj.get("deleted_at_ns") if isinstance(obj, dict) else None, "deleted_at_ns", 0, 2**63)
        except ValueError as exc:
            raise BackendUnavailableError(f"sequence tombstone {where} is unreadable: {exc}", retry_after=5) from exc
        return cls(record, deleted)


def dumps(obj: Mapping[str, Any]) -> bytes:
    """A document or event as stored: compact JSON (members in the order given)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def loads(data: bytes | str, where: str) -> dict[str, Any]:
    """A stored document: BackendUnavailableError naming ``where`` when it is not a JSON object."""
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise BackendUnavailableError(f"sequence document {where} is unreadable: {exc}", retry_after=5) from exc
    if not isinstance(obj, dict):
        raise BackendUnavailableError(f"sequence document {where} holds {type(obj).__name__}, not a JSON object")
    return obj


# -- the primitive ------------------------------------------------------------------------------------------------

T = TypeVar("T")
Docs = Mapping[str, dict[str, Any] | None]
"""A snapshot of documents: name (``record``, ``tombstone``, ``period/<key>``) -> JSON object, None when absent."""


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What a :data:`Change` decided: ``result`` (returned by :meth:`SequenceStore.update`), the documents to
    replace (an object) or delete (None) -- only documents the update read --, the audit events to append, and
    ``error``, raised once the writes are durable (a commit refused after the step that expired its reservation)."""

    result: T
    writes: Mapping[str, dict[str, Any] | None] = field(default_factory=dict)
    events: Sequence[dict[str, Any]] = ()
    error: IdmintError | None = None


Change = Callable[[Docs], Outcome[T]]
"""A pure function of a snapshot (see :meth:`SequenceStore.update`). It may raise IdmintError: nothing is written."""


def check_outcome(docs: Sequence[str], outcome: Outcome[Any]) -> None:
    """ValueError (a programming error) for an outcome that writes a document the update did not read, or whose
    events break :data:`EVENT_ID` / :data:`EVENTS_MAX`, or that appends events without writing exactly one
    document (the embedded store keeps events in the document they change)."""
    unread = set(outcome.writes) - set(docs)
    if unread:
        raise ValueError(f"an update wrote {sorted(unread)} without reading it")
    if outcome.events:
        if len(outcome.events) > EVENTS_MAX:
            raise ValueError(f"an update may append at most {EVENTS_MAX} events, got {len(outcome.events)}")
        if sum(1 for value in outcome.writes.values() if value is not None) != 1:
            raise ValueError("an update that appends events writes exactly one document")
        for event in outcome.events:
            if not isinstance(event.get("id"), str) or EVENT_ID.fullmatch(event["id"]) is None:
                raise ValueError(f"an audit event needs an id such as 01795780800000000000-0a1b2c3d, got {event!r}")


AuditPage = tuple[list[dict[str, Any]], str | None]
"""(events in id order, the cursor of the next page or None at the end)."""
AUDIT_SCAN_MAX = 10_000
"""Events one :meth:`SequenceStore.audit` call reads at most (filtering by period may need many per page)."""


class SequenceStore(abc.ABC):
    """Where sequences live. One instance per process, owned by the app's lifespan.

    Every method may raise :class:`~app.errors.BackendUnavailableError` (storage unreachable or unreadable: HTTP
    503 + Retry-After); none blocks the event loop for longer than one fsync'd write.
    """

    name: str
    max_sequences: int

    def __init__(self, max_sequences: int = 1000) -> None:
        self.max_sequences = max_sequences
        self.reservations = 0
        self._wrote: dict[tuple[str, str], dict[str, Any]] = {}
        """(name, document) -> the document as this process's latest reservation wrote it (what a hand-back
        compares)."""

    async def start(self) -> None:
        """Connect / open state. Must not raise for unreachable storage: calls report it instead."""

    async def close(self) -> None:
        """Release connections."""

    # -- what a backend implements ----------------------------------------------------------------------------
    @abc.abstractmethod
    async def get(self, name: str) -> SequenceRecord:
        """The stored record. Raises UnknownSequenceError."""

    @abc.abstractmethod
    async def list(self) -> list[SequenceRecord]:
        """Every sequence (not the deleted ones), sorted by name (at most ``max_sequences``)."""

    @abc.abstractmethod
    async def update(self, name: str, docs: Sequence[str], change: Change[T], timeout: float | None = None) -> T:
        """Apply ``change`` to documents ``docs`` of sequence ``name`` in one atomic step (see the module).

        Reads every document of ``docs`` (None when absent) as one snapshot and calls ``change(snapshot)``; then,
        only if none of them changed since the snapshot, replaces or deletes the documents of ``outcome.writes``
        and appends ``outcome.events`` to the name's audit log, durably, before returning. When one changed, calls
        ``change`` again on a fresh snapshot (so ``change`` must be pure), giving up with BackendUnavailableError
        after a bounded time of conflicts. An outcome that writes nothing still confirms its snapshot was current
        when it returns. Raises what ``change`` raises (nothing written), then ``outcome.error`` once written;
        else returns ``outcome.result``. ``timeout`` (seconds) bounds the call (TimeoutError or
        BackendUnavailableError past it); documents are named by :func:`period_doc`, RECORD and TOMBSTONE.
        """

    @abc.abstractmethod
    async def audit(self, name: str, after: str | None, limit: int, period: str | None = None) -> AuditPage:
        """Audit events of ``name`` (deleted or not) after cursor ``after`` (None: from the oldest kept), in
        ``id`` order, at most ``limit``; with ``period``, only that period's (a period key, or ``"never"`` for a
        sequence that never resets). Reads at most AUDIT_SCAN_MAX events: a page may hold fewer than ``limit``
        and still have a next cursor. Cursors are the store's own strings."""

    @abc.abstractmethod
    async def prune(self, events_before_ns: int, periods_before: str) -> int:
        """Drop, for every name (deleted ones too), the audit events older than ``events_before_ns`` and the period
        documents whose key sorts before ``periods_before``; returns how many items (keys, files) were removed."""

    def status(self) -> dict[str, Any]:
        return {"store": self.name, "reservations": self.reservations}

    def on_fenced(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` when the store is found to hold another history (a restored backup: see
        :class:`app.storage.history.GuardedSequenceStore`); this default: never."""

    # -- built on update ---------------------------------------------------------------------------------------
    async def create(
        self,
        name: str,
        start: int,
        cache: int,
        settings: Mapping[str, Any] | None = None,
        compatible: Callable[[SequenceRecord], None] | None = None,
    ) -> tuple[SequenceRecord, bool]:
        """Create ``name`` (not yet validated here: callers check name and settings first).

        Returns (record, True) when created, (existing record, False) when it existed with the same settings.
        Over a tombstone, the new record continues above every integer the deleted one reserved
        (:func:`continued`; ``compatible(old record)`` may refuse with SequenceConflictError, as a template that
        could repeat the old one's texts). Raises SequenceConflictError when it exists with other settings, or
        ``max_sequences`` exist, or the tombstone refuses it.
        """
        settings = dict(settings or {})
        try:
            existing: SequenceRecord | None = await self.get(name)
        except UnknownSequenceError:
            existing = None
        if existing is None and len(await self.list()) >= self.max_sequences:
            raise too_many(self.max_sequences)
        fresh = SequenceRecord.new(name, start, cache, settings)

        def change(docs: Docs) -> Outcome[tuple[SequenceRecord, bool]]:
            found = docs[RECORD]
            if found is not None:
                record = SequenceRecord.from_obj(name, found, f"of sequence {name}")
                if not record.same_settings(start, cache, settings):
                    raise conflict(record, start, cache, settings)
                return Outcome((record, False))
            buried = docs[TOMBSTONE]
            record = fresh
            if buried is not None:
                record = continued(fresh, Tombstone.from_obj(name, buried, f"tombstone of {name}"), compatible)
            return Outcome((record, True), {RECORD: record.to_obj(), TOMBSTONE: None})

        return await self.update(name, (RECORD, TOMBSTONE), change)

    async def reserve(self, name: str, count: int, partial: bool = False, period: str | None = None) -> Run:
        """Reserve ``count`` integers (1..MAX_RANGE_COUNT) of ``name`` in ``period`` (a period key; None for a
        sequence that never resets), durable before returning: the run ``(first, count, step)``, ``step`` the
        sequence's increment (``count`` cut short at 2**63-1 with ``partial``).

        Raises UnknownSequenceError, SequenceOverflowError (see :func:`advance`), SequenceConflictError for a
        gapless sequence (its integers are reserved one by one, app.sequences.points), InvalidOptionError for a
        period given to a sequence that never resets, or none to one that does.
        """
        doc = period_doc(period)
        docs = (RECORD,) if period is None else (RECORD, doc)

        def change(found: Docs) -> Outcome[tuple[Run, dict[str, Any]]]:
            record = read_record(name, found)
            if record.gapless:
                raise SequenceConflictError(
                    f"sequence {name} is gapless: its integers are reserved one at a time and committed or voided "
                    f"(POST /v1/sequences/{name}/reserve), never in ranges"
                )
            if record.resets == (period is None):
                why = "resets: its integers are reserved in a period" if record.resets else "never resets: no period"
                raise InvalidOptionError(f"sequence {name} {why}")
            point = record.point if period is None else period_point(record, found[doc])
            run, after = advance(point.next, count, record.increment, partial)
            moved = replace(point, next=after)
            written = record.with_point(moved).to_obj() if period is None else moved.members(with_generation=True)
            return Outcome((run, written), {doc: written})

        run, written = await self.update(name, docs, change)
        self._wrote[(name, doc)] = written
        self.reservations += 1
        return run

    async def give_back(
        self, name: str, first: int, last: int, timeout: float, *, step: int = 1, period: str | None = None
    ) -> bool:
        """Hand back ``first..last`` (by ``step``), the unused top of this process's latest reservation of ``name``
        in ``period`` (a clean stop, or a period's end): the point goes from ``last + step`` back to ``first``
        when its document is still exactly what that reservation wrote. True when storage confirmed it; False
        when it did not apply (written since, or not the top of this process's latest reservation); never tried
        twice. ``timeout`` bounds the call (seconds). Raises BackendUnavailableError (or TimeoutError) when storage
        cannot be reached: the caller counts the run as a gap, as for False."""
        doc = period_doc(period)
        wrote = self._wrote.pop((name, doc), None)
        if wrote is None or wrote.get("next") != last + step or not first <= last:
            return False

        def change(found: Docs) -> Outcome[bool]:
            if found[doc] != wrote:
                return Outcome(False)
            if doc == RECORD and not SequenceRecord.from_obj(name, wrote, name).start <= first:
                return Outcome(False)
            return Outcome(True, {doc: {**wrote, "next": first}})

        return await self.update(name, (doc,), change, timeout)


def read_record(name: str, docs: Docs) -> SequenceRecord:
    """The record in a snapshot; UnknownSequenceError when absent."""
    found = docs.get(RECORD)
    if found is None:
        raise unknown(name)
    return SequenceRecord.from_obj(name, found, f"of sequence {name}")


def period_point(record: SequenceRecord, obj: dict[str, Any] | None) -> Point:
    """The point of one period of ``record`` from its document (absent: ``start``). A point written by an earlier
    generation of the name keeps only its ``next`` (at least ``start``): its gapless state was the deleted
    sequence's, and the new one reserves above it."""
    if obj is None:
        return Point(record.start, generation=record.generation)
    try:
        point = Point.from_members(obj)
    except ValueError as exc:
        raise BackendUnavailableError(
            f"a period of sequence {record.name} is unreadable: {exc}", retry_after=5
        ) from exc
    if point.generation != record.generation:
        return Point(max(point.next, record.start), generation=record.generation)
    if point.next < record.start:
        return replace(point, next=record.start)
    return point


def continued(
    fresh: SequenceRecord, tombstone: Tombstone, compatible: Callable[[SequenceRecord], None] | None = None
) -> SequenceRecord:
    """``fresh`` (a new record of a deleted name) made to continue above every integer the deleted one reserved:
    its point at least the old point, its generation the next one. Raises SequenceConflictError when the old and
    new settings could still meet: another reset (``period`` keys would be read otherwise), or what
    ``compatible`` refuses (a template whose texts could meet the old one's)."""
    old = tombstone.record
    old_reset, new_reset = old.settings.get("reset", "never"), fresh.settings.get("reset", "never")
    if old_reset != new_reset:
        raise SequenceConflictError(
            f"sequence {fresh.name} was deleted as a sequence that resets {old_reset}; created again it must reset "
            f"{old_reset} too (its periods' integers continue where they stopped), got {new_reset}"
        )
    if compatible is not None:
        compatible(old)
    if old.generation >= GENERATION_MAX:
        raise SequenceConflictError(f"sequence {fresh.name} was created {GENERATION_MAX} times: the name is spent")
    point = Point(max(fresh.start, old.next), generation=old.generation + 1)
    if point.next > MAX_VALUE:
        raise SequenceConflictError(
            f"sequence {fresh.name} was deleted with every integer up to 2**63-1 reserved: created again it could "
            "only repeat them"
        )
    return replace(fresh, point=point, generation=old.generation + 1)


def conflict(
    existing: SequenceRecord, start: int, cache: int, settings: Mapping[str, Any] | None = None
) -> SequenceConflictError:
    mine = ", ".join(f"{k} {v}" for k, v in existing.settings.items())
    asked = ", ".join(f"{k} {v}" for k, v in (settings or {}).items())
    return SequenceConflictError(
        f"sequence {existing.name} exists with other settings (start {existing.start}, cache {existing.cache}"
        f"{', ' + mine if mine else ''}); asked for start {start}, cache {cache}{', ' + asked if asked else ''}: "
        "change cache, increment or template with PATCH, or delete it first"
    )


def too_many(limit: int) -> SequenceConflictError:
    return SequenceConflictError(f"at most {limit} sequences may exist (IDMINT_MAX_SEQUENCES); none was created")


def unknown(name: str) -> UnknownSequenceError:
    return UnknownSequenceError(
        f"no sequence named {name!r}; create it first (POST /v1/sequences, or idmint sequence create)"
    )


class MemorySequenceStore(SequenceStore):
    """The test double: documents in a dict, events in a list. Set ``unavailable`` to a reason to act like
    unreachable storage."""

    name = "memory"

    def __init__(self, max_sequences: int = 1000) -> None:
        super().__init__(max_sequences)
        self.docs: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.unavailable: str | None = None

    @property
    def records(self) -> dict[str, SequenceRecord]:
        """name -> record (a view for tests)."""
        return {
            name: SequenceRecord.from_obj(name, obj, name) for (name, doc), obj in self.docs.items() if doc == RECORD
        }

    def put(self, record: SequenceRecord) -> None:
        """Store ``record`` as another process would (tests)."""
        self.docs[(record.name, RECORD)] = record.to_obj()

    def _check(self) -> None:
        if self.unavailable is not None:
            raise BackendUnavailableError(self.unavailable)

    async def get(self, name: str) -> SequenceRecord:
        self._check()
        obj = self.docs.get((name, RECORD))
        if obj is None:
            raise unknown(name)
        return SequenceRecord.from_obj(name, obj, name)

    async def list(self) -> list[SequenceRecord]:
        self._check()
        return [record for _, record in sorted(self.records.items())][: self.max_sequences]

    async def update(self, name: str, docs: Sequence[str], change: Change[T], timeout: float | None = None) -> T:
        self._check()
        snapshot = {doc: _copy(self.docs.get((name, check_doc(doc)))) for doc in docs}
        outcome = change(snapshot)
        check_outcome(docs, outcome)
        for doc, value in outcome.writes.items():
            if value is None:
                self.docs.pop((name, doc), None)
            else:
                self.docs[(name, doc)] = _copy(value) or {}
        self.events.setdefault(name, []).extend(_copy(e) or {} for e in outcome.events)
        if outcome.error is not None:
            raise outcome.error
        return outcome.result

    async def audit(self, name: str, after: str | None, limit: int, period: str | None = None) -> AuditPage:
        self._check()
        events = sorted(self.events.get(name, []), key=lambda e: e["id"])
        start = 0 if after is None else int(after)
        scanned = events[start : start + AUDIT_SCAN_MAX]
        page = []
        position = start
        for event in scanned:
            position += 1
            if period is None or (event.get("period") or "never") == period:
                page.append(event)
                if len(page) >= limit:
                    break
        return page, (str(position) if position < len(events) else None)

    async def prune(self, events_before_ns: int, periods_before: str) -> int:
        self._check()
        cut = f"{events_before_ns:020d}"
        removed = 0
        for name, events in self.events.items():
            kept = [e for e in events if e["id"] >= cut]
            removed += len(events) - len(kept)
            self.events[name] = kept
        for key in [k for k in self.docs if k[1].startswith(PERIOD_PREFIX) and k[1][7:] < periods_before]:
            del self.docs[key]
            removed += 1
        return removed


def _copy(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """A deep copy through JSON (what a real store hands back: never the object the caller holds)."""
    return None if obj is None else json.loads(json.dumps(obj))
