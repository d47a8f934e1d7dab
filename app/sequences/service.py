"""The sequence service of one process: creating, showing, altering and deleting sequences, ``next`` from the
buffers, ``range``, parsing rendered numbers, and gapless reservations.

``next`` is served by :class:`~app.sequences.buffer.SequenceBuffer`: one per plain sequence (never resets, no
template: :attr:`SequenceService.buffers`, the hot path), and one per business sequence for
the period the node's clock is in (:attr:`SequenceService.periodic`): when the clock enters a new period, a new
buffer reserves in the new period's allocation point and the old one hands its unused top back at once (as at a
clean stop), so a buffer's integers always belong to its period, whatever the clocks of other nodes read.

``range`` reserves in storage directly; concurrent ``range`` requests for one sequence (and period) on one process
are coalesced: while one reservation is in flight, the next requests queue, and the queue is reserved as one run
and split in arrival order (one storage write for many requests, and no conflicts between this process's own
writes). A queued request whose client went away still gets its part reserved: it becomes a gap, never a repeat.

Every node re-reads the sequences every ``REFRESH_S`` (a PATCH or DELETE made on another node applies here within
that), sweeps the gapless ones' overdue reservations every ``SWEEP_INTERVAL_S`` (expiry is the fleet's: any node
does it, :mod:`app.sequences.points`), and prunes audit events and old periods past ``IDMINT_LEDGER_DAYS`` every
``PRUNE_INTERVAL_S``.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from typing import Any

from app.errors import (
    BackendUnavailableError,
    InvalidIdError,
    InvalidOptionError,
    SequenceConflictError,
    SequenceOverflowError,
    UnknownSequenceError,
)
from app.metrics import Metrics
from app.schemes.base import Clock
from app.sequences import points
from app.sequences.buffer import MAX_CACHE_FACTOR, PREFETCH_AT, TARGET_RANGE_S, Runs, SequenceBuffer
from app.sequences.points import Render, Step, Who
from app.sequences.spec import SequenceSpec, limits
from app.sequences.template import TEXT_CHARS_MAX, Bound, Template
from app.storage.sequences import (
    CACHE_MAX,
    CACHE_MIN,
    FORMER_TEMPLATES_MAX,
    MAX_RANGE_COUNT,
    MAX_VALUE,
    MIN_START,
    NAME_PATTERN,
    PERIOD_KEY,
    Change,
    Point,
    Run,
    SequenceRecord,
    SequenceStore,
    Tombstone,
    check_name,
    check_settings,
)
from app.tasks import cancel_and_wait
from app.times import rfc3339

log = logging.getLogger("idmint.sequences")

NS_IN_S = 1_000_000_000
NS_IN_DAY = 86_400 * NS_IN_S
REFRESH_S = 5.0
"""Every node re-reads the sequences this often (PATCH and DELETE on another node apply here within it)."""
SWEEP_INTERVAL_S = 1.0
"""Every node expires the gapless sequences' overdue reservations this often."""
PRUNE_INTERVAL_S = 3600.0
PERIOD_KEEP_DAYS = 366
"""Period documents are kept this many days past the ledger's retention (the longest period, a year, ends within
it), so only periods long ended are pruned."""
PATCHABLE = frozenset({"increment", "template", "check_digit"})
"""The settings PATCH changes (beside ``cache``)."""
STEPS_MAX = 64
"""Gapless steps of one period a node makes in one storage step at most."""
AUDIT_PAGE_MAX = 1000
AUDIT_PAGE_DEFAULT = 100
DELETE_STEPS_MAX = 1000
"""Storage steps a forced DELETE of a gapless sequence takes at most (each voids up to 100 reservations of one
period: 1,000 may be outstanding in each)."""


@functools.lru_cache(maxsize=4096)
def _spec(settings: str) -> SequenceSpec:
    return SequenceSpec.from_stored(json.loads(settings))


def spec_of(record: SequenceRecord) -> SequenceSpec:
    """The validated settings of a stored record (cached by their stored form). Raises BackendUnavailableError for
    settings out of rule: an unreadable record, never read as the default."""
    try:
        return _spec(json.dumps(dict(record.settings), sort_keys=True))
    except (InvalidOptionError, TypeError, ValueError) as exc:
        raise BackendUnavailableError(f"sequence record {record.name} holds settings out of rule: {exc}", 5) from exc


def is_plain(spec: SequenceSpec) -> bool:
    """A sequence whose ``next`` answers only ``ids``: it never resets, has no template and is not gapless (its
    buffer is on the hot path)."""
    return spec.reset == "never" and spec.template is None and spec.mode == "cached"


def is_business(spec: SequenceSpec) -> bool:
    """A sequence whose answers carry more than today's (``period``, ``text``, ``increment``)."""
    return spec.reset != "never" or spec.template is not None or spec.increment != 1 or spec.mode != "cached"


@dataclass
class Entry:
    """What this process knows of one sequence: its record as last read and its settings."""

    record: SequenceRecord
    spec: SequenceSpec


@dataclass(frozen=True)
class Issued:
    """A ``next`` answer's content: the runs, the period they belong to (None for a sequence that never resets),
    the template bound to that period (None without one), and whether the answer carries ``period``."""

    runs: Runs
    count: int
    period: str | None = None
    bound: Bound | None = None
    business: bool = False


@dataclass(frozen=True)
class Reserved:
    """A ``range`` answer's content: the run, its period, and whether the answer carries period and increment."""

    first: int
    count: int
    step: int
    period: str | None
    business: bool

    @property
    def last(self) -> int:
        return self.first + (self.count - 1) * self.step


@dataclass
class _Steps:
    """One sequence period's gapless steps pending on this node, made in one storage step."""

    pending: list[tuple[Change[Step], asyncio.Future[Step]]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


@dataclass
class _Batcher:
    """Coalesces one sequence's (and period's) concurrent ``range`` requests into one storage reservation."""

    pending: list[tuple[int, asyncio.Future[Run]]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class SequenceService:
    """Sequences for this process. Owned by the app's lifespan (``start``/``stop``).

    ``clock``: the node's clock (ns since the epoch: periods and reservations' expiry are read on it); ``node``:
    how this node is named in the audit log; ``ledger_days``: how long audit events are kept."""

    def __init__(
        self,
        store: SequenceStore,
        metrics: Metrics,
        max_count: int,
        *,
        clock: Clock = time.time_ns,
        node: str = "",
        ledger_days: float = 30.0,
        maintain: bool = True,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.max_count = max_count
        self.clock = clock
        self.node = node
        self.ledger_days = ledger_days
        self.maintain = maintain
        self.buffers: dict[str, SequenceBuffer] = {}
        """Plain sequences' buffers (the hot path: :meth:`next_now`)."""
        self.periodic: dict[str, SequenceBuffer] = {}
        """Business sequences' buffers, each for the period the clock was last in."""
        self.entries: dict[str, Entry] = {}
        self.gapless: set[str] = set()
        self._opening: dict[str, asyncio.Task[Entry]] = {}
        self._batchers: dict[tuple[str, str | None], _Batcher] = {}
        self._steps: dict[tuple[str, tuple[str, ...]], _Steps] = {}
        self._retiring: set[asyncio.Task[Any]] = set()
        self._maintenance: asyncio.Task[None] | None = None
        store.on_fenced(self._fenced)

    def _fenced(self, reason: str) -> None:
        """The store went back in time: every buffer is dropped, nothing handed back (its integers were reserved
        in a history the store no longer holds; a later fence moves the points past them)."""
        for name in [*self.buffers, *self.periodic]:
            self._drop(name)
        log.error("sequences: every buffer dropped: %s", reason)

    async def start(self) -> None:
        await self.store.start()
        if self.maintain:
            self._maintenance = asyncio.get_running_loop().create_task(self._maintain(), name="idmint-sequences")

    async def stop(self, hand_back: bool = True) -> None:
        """A clean stop: stop reserving, hand each buffer's unused top range back to storage (all at once, each
        within HAND_BACK_TIMEOUT_S; see :mod:`app.sequences.buffer`), count the rest as gaps, close storage."""
        await cancel_and_wait(self._maintenance)
        for batcher in self._batchers.values():
            if batcher.task is not None:
                batcher.task.cancel()
        for steps in self._steps.values():
            if steps.task is not None:
                steps.task.cancel()
        for task in self._opening.values():
            task.cancel()
        buffers = [*self.buffers.items(), *self.periodic.items()]
        results = await asyncio.gather(*(b.stop(hand_back) for _, b in buffers), return_exceptions=True)
        await asyncio.gather(*self._retiring, return_exceptions=True)
        for (name, _), result in zip(buffers, results, strict=True):
            if isinstance(result, BaseException):
                log.error("sequence %s: stopping its buffer failed: %r", name, result)
                continue
            returned, dropped = result
            if returned or dropped:
                log.info(
                    "sequence %s: %d unused integers handed back at stop, %d dropped (gap)", name, returned, dropped
                )
        await self.store.close()

    # -- what this process knows -------------------------------------------------------------------------
    def _learn(self, record: SequenceRecord) -> Entry:
        """Keep ``record`` as this process's view of its sequence, and bring the buffers in line with it: a
        sequence deleted and created again drops them (its integers continue in storage), a changed cache applies
        to the next reservation, a template added or removed moves the buffer between the plain and business
        tables."""
        entry = Entry(record, spec_of(record))
        old = self.entries.get(record.name)
        self.entries[record.name] = entry
        name = record.name
        if entry.spec.mode == "gapless":
            self.gapless.add(name)
        else:
            self.gapless.discard(name)
        if old is not None and old.record.generation != record.generation:
            self._drop(name)
            return entry
        for buffer in (self.buffers.get(name), self.periodic.get(name)):
            if buffer is not None:
                buffer.cache = record.cache
        if is_plain(entry.spec) and name in self.periodic and self.periodic[name].period is None:
            self.buffers[name] = self.periodic.pop(name)
        elif not is_plain(entry.spec) and name in self.buffers:
            self.periodic[name] = self.buffers.pop(name)
        return entry

    def _drop(self, name: str) -> None:
        """Forget ``name``'s buffers without handing anything back (its record is gone or another generation's: a
        hand-back could not apply)."""
        for table in (self.buffers, self.periodic):
            buffer = table.pop(name, None)
            if buffer is not None:
                self._retire(buffer, hand_back=False)

    def _forget(self, name: str) -> None:
        self._drop(name)
        self.entries.pop(name, None)
        self.gapless.discard(name)

    def _retire(self, buffer: SequenceBuffer, hand_back: bool) -> None:
        task = asyncio.get_running_loop().create_task(buffer.stop(hand_back), name=f"idmint-sequence-{buffer.name}")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _entry(self, name: str) -> Entry:
        entry = self.entries.get(name)
        if entry is not None:
            return entry
        check_name(name)
        task = self._opening.get(name)
        if task is None:
            task = self._opening[name] = asyncio.get_running_loop().create_task(self._load(name))
            task.add_done_callback(lambda _t: self._opening.pop(name, None))
        return await asyncio.shield(task)

    async def _load(self, name: str) -> Entry:
        return self._learn(await self.store.get(name))

    def _texts(self, record: SequenceRecord, period: str | None) -> Render:
        """The text of each integer of ``period`` under ``record``'s template (as stored now). Raises
        TimeRangeError for a ``{yy}`` period outside 2000..2099."""
        template = spec_of(record).compiled
        if template is None:
            return lambda _value: None
        return template.bind(None if period is None else date.fromisoformat(period)).render

    # -- sequences ----------------------------------------------------------------------------------------
    async def create(self, name: str, start: int, cache: int, spec: SequenceSpec | None = None) -> tuple[Any, bool]:
        """(record, created). Over a tombstone, the new sequence continues above every integer the deleted one
        issued (refused with 409 when its reset or template could meet the old one's). Raises InvalidOptionError,
        SequenceConflictError, BackendUnavailableError."""
        check_name(name)
        check_settings(start, cache)
        spec = spec or SequenceSpec()

        def compatible(old: SequenceRecord) -> None:
            new = spec.compiled
            if new is None:
                return
            for former in _templates(old):
                if not new.keeps_distinct_from(former):
                    raise SequenceConflictError(
                        f"sequence {name} was deleted with template {former.source!r}; created again, its template "
                        f"{spec.template!r} could render a number as one of the old ones (texts must stay distinct)"
                    )

        record, created = await self.store.create(name, start, cache, spec.stored(), compatible)
        self._learn(record)
        return record, created

    async def describe(self, name: str) -> dict[str, Any]:
        """The stored record (the current period's point for a resetting sequence) plus this node's ranges.
        Raises UnknownSequenceError, BackendUnavailableError."""
        check_name(name)
        record = await self.store.get(name)
        entry = self._learn(record)
        out = self._describe(entry)
        if entry.spec.reset != "never":
            period = entry.spec.periods.period_at(self.clock()).key
            docs, change = points.read_point(name, period)
            _, point = await self.store.update(name, docs, change)
            out["next"], out["period"] = point.next, period
            if entry.spec.mode == "gapless":
                out["gapless"] = _gapless_state(point)
        elif entry.spec.mode == "gapless":
            out["gapless"] = _gapless_state(record.point)
        return out

    async def list(self) -> list[dict[str, Any]]:
        records = await self.store.list()
        return [self._describe(self._learn(r)) for r in records]

    def _describe(self, entry: Entry) -> dict[str, Any]:
        record = entry.record
        out: dict[str, Any] = {"name": record.name, "start": record.start, "cache": record.cache, "next": record.next}
        if is_business(entry.spec):
            out.update(entry.spec.as_dict())
            if entry.spec.reset != "never":
                out["next"] = None  # one point per period: GET /v1/sequences/{name} shows the current one's
        name = record.name
        buffer = self.buffers.get(name) or self.periodic.get(name)
        out["node"] = buffer.describe() if buffer is not None else {"ranges": [], "held": 0}
        return out

    def limits(self) -> dict[str, Any]:
        """What /v1/sequences describes about the rules (a /v1/schemes-like description)."""
        return {
            "name_pattern": NAME_PATTERN,
            "start": [MIN_START, MAX_VALUE],
            "cache": [CACHE_MIN, CACHE_MAX],
            "max_value": MAX_VALUE,
            "max_next_count": self.max_count,
            "max_range_count": MAX_RANGE_COUNT,
            "max_sequences": self.store.max_sequences,
            "buffer": {
                "prefetch_at_fraction_used": PREFETCH_AT,
                "target_range_seconds": TARGET_RANGE_S,
                "reservation_size": f"cache .. {MAX_CACHE_FACTOR} x cache",
            },
            **limits(),
            "ttl_s": [points.TTL_MIN_S, points.TTL_MAX_S],
            "ttl_s_default": points.TTL_DEFAULT_S,
        }

    async def patch(
        self,
        name: str,
        cache: int | None = None,
        changes: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Change ``cache`` and the settings in ``changes`` (``increment``, ``template``, ``check_digit``) of
        ``name``. A new template must keep every number distinct from those its former templates rendered
        (:meth:`~app.sequences.template.Template.keeps_distinct_from`); the record remembers the former ones (the
        latest FORMER_TEMPLATES_MAX) so that ``parse`` reads their numbers. Raises InvalidOptionError naming the rule,
        UnknownSequenceError."""
        check_name(name)
        changes = dict(changes or {})
        fixed = sorted(set(changes) - PATCHABLE)
        if fixed:
            raise InvalidOptionError(
                f"{', '.join(fixed)} never change{'s' if len(fixed) == 1 else ''} (a sequence's periods and mode are "
                f"its numbers' meaning): PATCH changes {', '.join(['cache', *sorted(PATCHABLE)])}"
            )
        if cache is not None:
            check_settings(MIN_START, cache)

        def edit(record: SequenceRecord) -> SequenceRecord:
            old = spec_of(record)
            new = SequenceSpec.build(**{**old.as_dict(), **changes})
            formers = record.former_templates
            if (new.template, new.check_digit) != (old.template, old.check_digit):
                if new.compiled is not None:
                    for former in _templates(record):
                        if not new.compiled.keeps_distinct_from(former):
                            raise InvalidOptionError(
                                f"template: {new.template!r} could render a number as {former.source!r} rendered "
                                "another (a literal or digit field where the other's text could hold the same); a "
                                "new template must keep every number distinct from the old ones'"
                            )
                if old.template is not None:
                    kept = [t for t in formers if t != (old.template, old.check_digit)]
                    formers = (*kept, (old.template, old.check_digit))[-FORMER_TEMPLATES_MAX:]
            return replace(
                record,
                cache=record.cache if cache is None else cache,
                settings=new.stored(),
                former_templates=formers,
            )

        docs, change = points.patch(name, edit)
        record = await self.store.update(name, docs, change)
        self._learn(record)
        return await self.describe(name)

    async def setval(self, name: str, value: int, period: str | None = None) -> dict[str, Any]:
        """Move the allocation point of ``name`` (of ``period``: default the clock's, for a resetting sequence)
        forward to ``value``. Raises InvalidOptionError (backward: it could repeat; past 2**63-1; a period given
        to a sequence that never resets, or not a period's first day), SequenceConflictError (gapless),
        UnknownSequenceError."""
        check_name(name)
        if type(value) is not int or not MIN_START <= value <= MAX_VALUE + 1:
            raise InvalidOptionError(f"next must be an integer in {MIN_START}..{MAX_VALUE + 1} (2**63), got {value}")
        record = await self.store.get(name)
        spec = self._learn(record).spec
        if spec.reset != "never":
            period = self._period_key(spec, period)
        elif period is not None:
            raise InvalidOptionError(f"sequence {name} never resets: it has no period (leave period out)")
        docs, change = points.setval(name, period, value)
        point = await self.store.update(name, docs, change)
        return {"name": name, "next": point, "period": period}

    def _period_key(self, spec: SequenceSpec, period: str | None) -> str | None:
        """A period key given by a client (checked: a period's first day), or the clock's."""
        if period is None:
            return spec.periods.period_at(self.clock()).key
        if not isinstance(period, str) or PERIOD_KEY.fullmatch(period) is None:
            raise InvalidOptionError(f"period must be a period's first day in ISO 8601 (2026-11-27), got {period!r}")
        try:
            day = date.fromisoformat(period)
        except ValueError:
            raise InvalidOptionError(f"period {period} is no date of the calendar") from None
        return spec.periods.period_of_day(day).key

    async def delete(self, name: str) -> dict[str, Any]:
        """Delete ``name``: a tombstone stays, so creating it again continues above every integer it issued.
        This node's buffers of it are dropped (other nodes drop theirs within REFRESH_S). Raises
        UnknownSequenceError."""
        check_name(name)
        docs, change = points.delete(name, self.clock())
        tombstone: Tombstone = await self.store.update(name, docs, change)
        self._forget(name)
        out: dict[str, Any] = {"name": name, "deleted": True, "generation": tombstone.record.generation}
        if not tombstone.record.resets:
            out["next"] = tombstone.record.next
        return out

    # -- next ---------------------------------------------------------------------------------------------
    def next_now(self, name: str, count: int, *, charge: Callable[[int], None]) -> Runs | None:
        """The fast path: runs of a plain sequence from a buffer already open and holding enough, charged first
        (``charge(count)``, :data:`app.issuing.issuer.Charge`), else None, nothing charged (use :meth:`next`)."""
        buffer = self.buffers.get(name)
        return buffer.take_now(count, charge) if buffer is not None else None

    async def next(self, name: str, count: int, *, charge: Callable[[int], None]) -> Issued:
        """``count`` integers of ``name`` (1..max_count) from this node's buffer, in rising order (of the period
        the clock is in, for a resetting sequence), charged first (``charge(count)``, once the count is valid:
        :data:`app.issuing.issuer.Charge`).

        Raises what ``charge`` raises, InvalidOptionError (count, name), UnknownSequenceError,
        SequenceOverflowError, SequenceConflictError (a gapless sequence), BackendUnavailableError (buffer empty and
        storage unreachable), TimeRangeError (a ``{yy}`` template outside 2000..2099).
        """
        self.check_count(count, self.max_count)
        charge(count)
        buffer = self.buffers.get(name)
        if buffer is not None:
            return Issued(await buffer.take(count), count)
        entry = await self._entry(name)
        spec = entry.spec
        if spec.mode == "gapless":
            raise SequenceConflictError(
                f"sequence {name} is gapless: reserve its integers one at a time "
                f"(POST /v1/sequences/{name}/reserve), then commit or void each"
            )
        if is_plain(spec):
            buffer = self.buffers.get(name) or self._new_buffer(name, entry, None, self.buffers)
            return Issued(await buffer.take(count), count)
        for _ in range(2):  # a second round when the buffer waited on was retired by a rollover meanwhile
            period = spec.periods.period_at(self.clock())
            bound = spec.compiled.bind(period.first_day) if spec.compiled is not None else None
            buffer = self.periodic.get(name)
            if buffer is None or buffer.period != period.key:
                buffer = self._roll(name, entry, period.key)
            try:
                runs = await buffer.take(count)
            except BackendUnavailableError:
                if self.periodic.get(name) is buffer:
                    raise
                continue
            return Issued(runs, count, period.key, bound, True)
        raise BackendUnavailableError(f"sequence {name}: its period changed twice during one request", 1)

    def _new_buffer(
        self, name: str, entry: Entry, period: str | None, table: dict[str, SequenceBuffer]
    ) -> SequenceBuffer:
        buffer = table[name] = SequenceBuffer(
            name, entry.record.cache, self.store, self.metrics.sequence(name), period=period
        )
        return buffer

    def _roll(self, name: str, entry: Entry, period: str | None) -> SequenceBuffer:
        """A buffer for ``period``; the previous period's buffer (if any) hands its unused top back at once."""
        old = self.periodic.get(name)
        buffer = self._new_buffer(name, entry, period, self.periodic)
        if old is not None:
            log.info("sequence %s: period %s begins on this node's clock (was %s)", name, period, old.period)
            self._retire(old, hand_back=True)
        return buffer

    # -- range --------------------------------------------------------------------------------------------
    async def reserve_range(self, name: str, count: int, *, charge: Callable[[int], None]) -> Reserved:
        """A fresh run of ``count`` (1..2**40) integers reserved in storage (in the clock's period), charged first
        (``charge(count)``, once the count is valid: :data:`app.issuing.issuer.Charge`).

        Raises what ``charge`` raises, InvalidOptionError, UnknownSequenceError, SequenceOverflowError,
        SequenceConflictError (gapless), BackendUnavailableError.
        """
        self.check_count(count, MAX_RANGE_COUNT)
        charge(count)
        check_name(name)
        entry = await self._entry(name)
        spec = entry.spec
        period = spec.periods.period_at(self.clock()).key if spec.reset != "never" else None
        key = (name, period)
        batcher = self._batchers.get(key)
        if batcher is None:  # only sequences with a reservation in flight have one: the dict stays small
            batcher = self._batchers[key] = _Batcher()
        future: asyncio.Future[Run] = asyncio.get_running_loop().create_future()
        batcher.pending.append((count, future))
        if batcher.task is None:
            batcher.task = asyncio.get_running_loop().create_task(self._drain(key, batcher))
        first, _, step = await future
        m = self.metrics.sequence(name)
        m.client_ranges.inc()
        m.range_ids.inc(count)
        return Reserved(first, count, step, period, is_business(spec))

    async def _drain(self, key: tuple[str, str | None], batcher: _Batcher) -> None:
        name, period = key
        batch: list[tuple[int, asyncio.Future[Run]]] = []
        try:
            while batcher.pending:
                batch, batcher.pending = batcher.pending, []
                total = sum(count for count, _ in batch)
                try:
                    first, _, step = await self.store.reserve(name, total, period=period)
                except SequenceOverflowError as exc:
                    if len(batch) == 1:
                        _fail(batch, exc)
                    else:  # the batch as a whole does not fit: each request on its own
                        for count, future in batch:
                            try:
                                single = await self.store.reserve(name, count, period=period)
                            except Exception as single_exc:
                                _fail([(count, future)], single_exc)
                            else:
                                if not future.done():
                                    future.set_result(single)
                    continue
                except Exception as exc:
                    _fail(batch, exc)
                    continue
                for count, future in batch:
                    if not future.done():
                        future.set_result((first, count, step))
                    first += count * step
        except asyncio.CancelledError:
            _fail(batch + batcher.pending, BackendUnavailableError("stopping: the range was not reserved"))
            batcher.pending = []
            raise
        finally:
            batcher.task = None
            if self._batchers.get(key) is batcher:
                del self._batchers[key]

    # -- parse --------------------------------------------------------------------------------------------
    async def parse(self, name: str, text: str) -> dict[str, Any]:
        """The period and integer of a number ``name`` rendered (its current template, else a former one), its
        check digit checked, and what became of it: ``unused`` (not reserved yet), ``reserved`` (a cached
        sequence's: taken by a node or a range), or a gapless one's ``outstanding``, ``voided`` or ``committed``.
        Raises InvalidIdError naming the rule a text breaks, InvalidOptionError (no template), UnknownSequenceError.
        """
        check_name(name)
        if len(text) > TEXT_CHARS_MAX:
            raise InvalidIdError(f"a number of a template is at most {TEXT_CHARS_MAX} characters, got {len(text)}")
        record = await self.store.get(name)
        spec = self._learn(record).spec
        templates = _templates(record)
        if not templates:
            raise InvalidOptionError(
                f"sequence {name} has no template: its numbers are its plain integers (nothing to parse)"
            )
        errors = []
        for template in templates:
            try:
                first_day, value = template.parse_text(text)
                break
            except InvalidIdError as exc:
                errors.append(exc)
        else:  # the reason of a template whose layout it has (a check digit, a date) says the most
            raise next((e for e in errors if "is not a number of template" not in str(e)), errors[0])
        period = spec.periods.period_of_day(first_day).key if first_day is not None else None
        docs, change = points.read_point(name, period)
        _, point = await self.store.update(name, docs, change)
        return {
            "name": name,
            "text": text,
            "period": period,
            "value": value,
            "check_digit": template.check.name if template.check else None,
            "template": template.source,
            "state": "unused" if value < record.start else _state(spec, point, value),
        }

    async def read(self, text: str) -> builtins.list[dict[str, Any]]:
        """Every sequence whose template (or a former one) reads ``text``, as :meth:`parse` answers for it (the
        decode page asks this for text no ID scheme reads): [] when none does. The templates are tried in a worker
        thread (at most IDMINT_MAX_SEQUENCES of them)."""
        if len(text) > TEXT_CHARS_MAX or not text:
            return []
        records = [r for r in await self.store.list() if r.settings.get("template") or r.former_templates]

        def readers() -> builtins.list[str]:
            found = []
            for record in records:
                for template in _templates(record):
                    try:
                        template.parse_text(text)
                    except InvalidIdError:
                        continue
                    found.append(record.name)
                    break
            return found

        return [await self.parse(name, text) for name in await asyncio.to_thread(readers)]

    # -- gapless ------------------------------------------------------------------------------------------
    async def reserve(
        self, name: str, ttl_s: int, who: Who, period: str | None = None, *, charge: Callable[[int], None]
    ) -> dict[str, Any]:
        """Reserve the next integer of gapless ``name`` (in the clock's period, or in ``period``: see
        :meth:`_reserving_in`) for ``ttl_s`` seconds, charged first (``charge(1)``:
        :data:`app.issuing.issuer.Charge`): ``{"name", "value", "text", "period", "reservation", "expires_at"}``.
        Raises what ``charge`` raises, InvalidOptionError (ttl, period), SequenceConflictError (not gapless; too many
        outstanding; a period outside its grace window, or ended with no voided integer waiting),
        SequenceOverflowError, UnknownSequenceError, TimeRangeError ({yy} out of 2000..2099)."""
        charge(1)
        check_name(name)
        points.check_ttl(ttl_s)
        spec = (await self._entry(name)).spec
        now = self.clock()
        period, refill_only = self._reserving_in(name, spec, period, now)
        token = points.new_token()
        docs, change = points.reserve(name, period, token, ttl_s, now, who, self._texts, refill_only)
        step = await self._gapless(name, docs, change)
        assert step.expires_at_ns is not None
        return {
            "name": name,
            "value": step.value,
            "text": step.text,
            "period": period,
            "reservation": step.reservation,
            "expires_at": rfc3339(step.expires_at_ns, 3),
        }

    def _reserving_in(
        self, name: str, spec: SequenceSpec, period: str | None, now_ns: int
    ) -> tuple[str | None, str | None]:
        """(the period key a reservation goes in, None or why it may only refill a voided integer). ``period``
        None: the clock's. Else a period's first day: the clock's period as usual; an ended one (a year's last
        invoices voided in January) within ``period_grace_s`` after its end, refilling its voided integers only.
        Raises InvalidOptionError (not a first day; a sequence that never resets), SequenceConflictError (a period
        not begun, or past its grace window: its holes are final)."""
        current = spec.periods.period_at(now_ns)
        if period is None:
            return current.key, None
        if spec.reset == "never":
            raise InvalidOptionError(f"sequence {name} never resets: it has no period (leave period out)")
        key = self._period_key(spec, period)
        if key == current.key:
            return key, None
        assert key is not None
        chosen = spec.periods.period_of_day(date.fromisoformat(key))
        assert chosen.starts_at_ns is not None and chosen.ends_at_ns is not None
        if chosen.starts_at_ns > now_ns:
            raise SequenceConflictError(
                f"sequence {name}: period {key} has not begun (it begins at {rfc3339(chosen.starts_at_ns, 3)}); "
                "reserve in the current period, or in an ended one within its grace window"
            )
        grace_ends_ns = chosen.ends_at_ns + spec.period_grace_s * NS_IN_S
        if now_ns >= grace_ends_ns:
            raise SequenceConflictError(
                f"sequence {name}: period {key} ended at {rfc3339(chosen.ends_at_ns, 3)} and its grace window "
                f"(period_grace_s {spec.period_grace_s}) closed at {rfc3339(grace_ends_ns, 3)}: its holes are final "
                f"(GET /v1/sequences/{name}/holes?period={key} lists them)"
            )
        return key, f"period {key} ended at {rfc3339(chosen.ends_at_ns, 3)}"

    async def settle(
        self, name: str, reservation: object, outcome: str, who: Who, reason: object = None
    ) -> dict[str, Any]:
        """Commit (``outcome`` "committed") or void ("voided") a reservation of gapless ``name``:
        ``{"name", "value", "text", "period", "reservation", "state"}``. Raises InvalidOptionError (the reservation
        ID, the reason), SequenceConflictError (409 naming why: expired, voided, committed, unknown),
        UnknownSequenceError."""
        check_name(name)
        period, token = points.parse_reservation(reservation)
        checked_reason = points.check_reason(reason)
        docs, change = points.settle(name, period, token, outcome, self.clock(), who, self._texts, checked_reason)
        step = await self._gapless(name, docs, change)
        return {
            "name": name,
            "value": step.value,
            "text": step.text,
            "period": period,
            "reservation": step.reservation,
            "state": step.state,
        }

    async def _gapless(self, name: str, docs: tuple[str, ...], change: Change[Step]) -> Step:
        """Apply a gapless step, with the other steps of the same period this node has pending (one storage step
        for all: :func:`~app.sequences.points.together`); count it (the step's own event, its expiries) whether it
        succeeded or was refused after writing."""
        key = (name, docs)
        batch = self._steps.get(key)
        if batch is None:
            batch = self._steps[key] = _Steps()
        future: asyncio.Future[Step] = asyncio.get_running_loop().create_future()
        batch.pending.append((change, future))
        if batch.task is None:
            batch.task = asyncio.get_running_loop().create_task(self._run_steps(key, batch))
        m = self.metrics.sequence(name)
        step = await future
        if step.changed and step.state in ("held", "committed", "voided"):
            m.gapless[{"held": "reserve", "committed": "commit", "voided": "void"}[step.state]].inc()
        if step.expired:
            m.gapless["expire"].inc(step.expired)
        m.outstanding.set(len(step.point.held))
        if step.refusal is not None:
            raise step.refusal
        return step

    async def _run_steps(self, key: tuple[str, tuple[str, ...]], batch: _Steps) -> None:
        name, docs = key
        try:
            while batch.pending:
                taken, batch.pending = batch.pending[:STEPS_MAX], batch.pending[STEPS_MAX:]
                try:
                    results = await self.store.update(name, docs, points.together([c for c, _ in taken]))
                except Exception as exc:  # storage: every step of the batch fails alike
                    for _, future in taken:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                later = []
                for (change, future), result in zip(taken, results, strict=True):
                    if result is None:
                        later.append((change, future))
                    elif future.done():
                        continue
                    elif isinstance(result, BaseException):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
                batch.pending[:0] = later
        except asyncio.CancelledError:
            for _, future in batch.pending:
                if not future.done():
                    future.set_exception(BackendUnavailableError("stopping: the step was not made", 1))
            raise
        finally:
            batch.task = None
            if self._steps.get(key) is batch:
                del self._steps[key]

    async def remove(self, name: str, force: bool = False, who: Who | None = None) -> dict[str, Any]:
        """Delete ``name`` as :meth:`delete` does, minding a gapless sequence's open reservations: with any
        outstanding (in the current period, or one that ended within ``period_grace_s`` plus a reservation's
        longest TTL), refused with SequenceConflictError naming how many and the first to expire; with ``force``,
        each is voided first (a ``void`` event, reason :data:`~app.sequences.points.DELETE_REASON`, by ``who``),
        then the sequence is deleted. Answers as :meth:`delete`, plus ``voided`` (how many) for a gapless one.
        Raises UnknownSequenceError, SequenceConflictError."""
        check_name(name)
        spec = spec_of(await self.store.get(name))
        if spec.mode != "gapless":
            return await self.delete(name)
        who = who or Who(None, self.node, None)
        now = self.clock()
        periods: builtins.list[str | None] = [None]
        if spec.reset != "never":
            rule = spec.periods
            oldest = rule.period_at(now - (spec.period_grace_s + points.TTL_MAX_S + 60) * NS_IN_S)
            last = rule.period_at(now + 60 * NS_IN_S)  # a node whose clock is a little ahead may reserve there
            periods = []
            day = oldest.first_day
            assert day is not None and last.first_day is not None
            while day <= last.first_day:
                periods.append(day.isoformat())
                day = rule.following(day)
        voided = 0
        m = self.metrics.sequence(name)
        for _ in range(DELETE_STEPS_MAX):
            docs, change = points.delete_gapless(name, periods, self.clock(), who, self._texts, force)
            removal = await self.store.update(name, docs, change)
            voided += removal.voided
            m.gapless["void"].inc(removal.voided)
            m.gapless["expire"].inc(removal.expired)
            if removal.deleted is not None:
                self._forget(name)
                out: dict[str, Any] = {"name": name, "deleted": True, "generation": removal.deleted.record.generation}
                if not removal.deleted.record.resets:
                    out["next"] = removal.deleted.record.next
                out["voided"] = voided
                return out
            if removal.voided or removal.expired:
                continue
            first = min(removal.open, key=lambda o: (o.expires_at_ns, o.value))
            where = f" of period {first.period}" if first.period is not None else ""
            expires = rfc3339(first.expires_at_ns, 3)
            raise SequenceConflictError(
                f"sequence {name} has {len(removal.open)} reservation(s) open (the first to expire: "
                f"{first.reservation}, integer {first.value}{where}, expires at {expires}); commit or void them, or "
                "let them expire, or DELETE with ?force=true to void them (recorded in the audit log)"
            )
        raise SequenceConflictError(
            f"sequence {name}: reservations kept being made while DELETE voided them ({voided} voided); try again"
        )

    async def holes(self, name: str, period: str | None = None) -> dict[str, Any]:
        """The auditor's report of gapless ``name``'s period ``period`` (a first day; default the clock's period;
        None for a sequence that never resets): ``{"name", "period", "state", "ends_at", "refill_until",
        "next", "holes": [{"value", "text"}...], "outstanding": [{"value", "text", "reservation",
        "expires_at"}...], "totals": {"committed", "holes", "outstanding"}}``. ``holes`` are the integers voided
        (or expired) and not reserved again, ascending; ``state`` is ``current``, ``grace`` (ended, within
        ``period_grace_s``: a reservation in it may still refill a hole), ``closed`` (the holes are final) or
        ``never`` (a sequence that never resets). Overdue reservations are expired first (as a node's sweep).
        Raises InvalidOptionError (period), SequenceConflictError (not gapless), UnknownSequenceError."""
        check_name(name)
        record = await self.store.get(name)
        spec = self._learn(record).spec
        if spec.mode != "gapless":
            raise SequenceConflictError(
                f"sequence {name} is not gapless (mode cached): its gaps are not tracked (a node's unused range at a "
                "crash is a gap); only a gapless sequence's holes are listed"
            )
        now = self.clock()
        out: dict[str, Any] = {"name": name}
        if spec.reset == "never":
            if period is not None:
                raise InvalidOptionError(f"sequence {name} never resets: it has no period (leave period out)")
            key = None
            out.update(period=None, state="never", ends_at=None, refill_until=None)
        else:
            key = self._period_key(spec, period)
            assert key is not None
            chosen = spec.periods.period_of_day(date.fromisoformat(key))
            assert chosen.starts_at_ns is not None and chosen.ends_at_ns is not None
            grace_ends_ns = chosen.ends_at_ns + spec.period_grace_s * NS_IN_S
            state = "current" if now < chosen.ends_at_ns else "grace" if now < grace_ends_ns else "closed"
            if now < chosen.starts_at_ns:
                state = "future"
            out.update(
                period=key, state=state, ends_at=rfc3339(chosen.ends_at_ns, 3), refill_until=rfc3339(grace_ends_ns, 3)
            )
        docs, change = points.sweep(name, key, now, Who(None, self.node, None), self._texts)
        step = await self.store.update(name, docs, change)
        point = step.point
        if step.expired:
            self.metrics.sequence(name).gapless["expire"].inc(step.expired)
        render = self._texts(record, key)
        outstanding = sorted(point.held.items(), key=lambda item: item[1][0])
        out["next"] = point.next
        out["holes"] = [{"value": value, "text": render(value)} for value in point.free]
        out["outstanding"] = [
            {
                "value": value,
                "text": render(value),
                "reservation": points.reservation_id(key, token),
                "expires_at": rfc3339(expires, 3),
            }
            for token, (value, expires) in outstanding
        ]
        out["totals"] = {"committed": point.committed, "holes": len(point.free), "outstanding": len(point.held)}
        return out

    async def audit(
        self, name: str, after: str | None = None, limit: int = AUDIT_PAGE_DEFAULT, period: str | None = None
    ) -> dict[str, Any]:
        """A page of ``name``'s audit log (reserve, commit, void, expire events, oldest first; kept
        IDMINT_LEDGER_DAYS): ``{"name", "events": [...], "next": cursor or null}``. ``period``: one period's
        (``never`` for a sequence that never resets). Raises InvalidOptionError (limit, period, cursor)."""
        check_name(name)
        if type(limit) is not int or not 1 <= limit <= AUDIT_PAGE_MAX:
            raise InvalidOptionError(f"limit must be in 1..{AUDIT_PAGE_MAX}, got {limit}")
        if period is not None and period != "never" and PERIOD_KEY.fullmatch(period) is None:
            raise InvalidOptionError(f"period must be a period's first day (2026-11-27) or never, got {period!r}")
        if after is not None and (len(after) > 100 or not after.isascii() or not after.isprintable()):
            raise InvalidOptionError("after must be the cursor a previous page answered as next")
        events, cursor = await self.store.audit(name, after, limit, period)
        return {"name": name, "events": events, "next": cursor}

    # -- maintenance --------------------------------------------------------------------------------------
    async def _maintain(self) -> None:
        """Refresh the records, sweep gapless reservations, prune old audit events and periods (see the module)."""
        loop = asyncio.get_running_loop()
        refresh_at = prune_at = loop.time()
        failing = False
        while True:
            try:
                if loop.time() >= refresh_at:
                    refresh_at = loop.time() + REFRESH_S
                    await self.refresh()
                await self.sweep()
                if loop.time() >= prune_at:
                    prune_at = loop.time() + PRUNE_INTERVAL_S
                    await self.prune()
                if failing:
                    log.info("sequence maintenance works again")
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # storage down: buffers ride it out; try again next round
                if not failing:
                    log.warning("sequence maintenance failed (tried again every %g s): %r", SWEEP_INTERVAL_S, exc)
                failing = True
            await asyncio.sleep(SWEEP_INTERVAL_S)

    async def refresh(self) -> None:
        """Re-read every sequence: learn PATCHes, forget deleted sequences (dropping their buffers)."""
        records = await self.store.list()
        seen = set()
        for record in records:
            seen.add(record.name)
            try:
                self._learn(record)
            except BackendUnavailableError as exc:
                log.warning("%s", exc)
        for name in [n for n in self.entries if n not in seen]:
            if len(records) < self.store.max_sequences:  # a full list may have left it out: keep it
                self._forget(name)

    async def sweep(self) -> int:
        """Expire the overdue reservations of every gapless sequence (the clock's period, and the one a maximal TTL
        ago); returns how many."""
        expired = 0
        now = self.clock()
        who = Who(None, self.node, None)
        for name in sorted(self.gapless):
            entry = self.entries.get(name)
            if entry is None:
                continue
            rule = entry.spec.periods
            current = rule.period_at(now).key
            keys = dict.fromkeys([current, rule.period_at(now - (points.TTL_MAX_S + 60) * NS_IN_S).key])
            for key in keys:
                docs, change = points.sweep(name, key, now, who, self._texts)
                try:
                    step = await self.store.update(name, docs, change)
                except UnknownSequenceError:
                    self._forget(name)
                    break
                m = self.metrics.sequence(name)
                if step.expired:
                    m.gapless["expire"].inc(step.expired)
                    expired += step.expired
                if key == current:
                    m.outstanding.set(len(step.point.held))
        return expired

    async def prune(self) -> int:
        """Drop audit events older than IDMINT_LEDGER_DAYS, and period documents a year older still."""
        before = self.clock() - int(self.ledger_days * NS_IN_DAY)
        day = date.fromtimestamp(before // NS_IN_S) - timedelta(days=PERIOD_KEEP_DAYS)
        return await self.store.prune(before, day.isoformat())

    # -- input rules --------------------------------------------------------------------------------------
    @staticmethod
    def check_count(count: int, maximum: int) -> int:
        if not 1 <= count <= maximum:
            raise InvalidOptionError(f"count must be in 1..{maximum}, got {count}")
        return count


def _templates(record: SequenceRecord) -> list[Template]:
    """The record's template and its former ones, newest first."""
    spec = spec_of(record)
    out = [spec.compiled] if spec.compiled is not None else []
    for source, check in reversed(record.former_templates):
        out.append(Template.compile(source, spec.reset, check))
    return out


def _state(spec: SequenceSpec, point: Point, value: int) -> str:
    if value >= point.next:
        return "unused"
    if spec.mode != "gapless":
        return "reserved"
    if any(held == value for held, _ in point.held.values()):
        return "outstanding"
    return "voided" if value in point.free else "committed"


def _gapless_state(point: Point) -> dict[str, Any]:
    return {"outstanding": len(point.held), "voided_waiting": len(point.free), "committed": point.committed}


def _fail(batch: list[tuple[int, asyncio.Future[Run]]], exc: BaseException) -> None:
    for _count, future in batch:
        if not future.done():
            future.set_exception(exc)
