"""A node's in-memory ranges of one sequence: Meituan Leaf's double buffer ("segment mode") with its dynamic step.

Leaf's rule (Meituan tech blog "Leaf: Meituan distributed ID generation system", segment mode, double buffer):
the node issues from the current range; once that range is ``PREFETCH_AT`` (10 %) used, the next range is
reserved in the background, so a request never waits on storage while the buffer holds integers. When storage is
unreachable the node keeps issuing from what it holds and refuses (503 + Retry-After) only once it runs out.

Reservation size (Leaf's dynamic step, stated as a rate rule): each background reservation aims to last
``TARGET_RANGE_S`` (15 minutes, Leaf's target) at the rate seen since the previous reservation::

    rate = integers issued since the previous reservation / seconds since it
    size = clamp(ceil(rate * 900 s), cache, 100 * cache)        # grow at once
    size = max(size, previous size // 2)   when it shrinks          # shrink by at most half per reservation

The first reservation is ``cache``. So a node issuing 1,000 integers/s with the default cache (1,000) reserves
100,000 at a time from its second reservation on, holding up to 190,000 integers (over three minutes of service
without storage), while an idle sequence costs ``cache`` integers per restart. A request larger than what is held
reserves what it lacks at once (never split over many small reservations).

Order: integers leave in rising order within one process (ranges are reserved one at a time, and storage's
allocation point only rises while the node runs), and never twice anywhere (storage hands out each range once).

Runs and periods: a reservation is a run ``(first, count, step)``, ``step`` the sequence's increment
when it was reserved (a PATCH of the increment applies to the next reservation; what is held is issued as
reserved); sizes count integers, not span. A buffer of a resetting sequence belongs to one period (``period``, its
first day): it reserves from that period's allocation point and hands back to it; the service starts another
buffer when the clock enters the next period and stops this one.

Stopping: at a clean stop (:meth:`SequenceBuffer.stop`) the node stops issuing first, then hands the unused top of
what it holds back to storage (:meth:`~app.storage.sequences.SequenceStore.give_back`: one compare-and-set,
applied only when nobody reserved since), so the next node's first integer follows the last one issued. What
cannot go back (someone reserved since, an older range below another node's, storage slow or down past the
timeout, a SIGKILL) is lost, a gap as with SQL sequences' cache, counted in ``idmint_sequence_gap_total``; when the
answer of a hand-back is lost the range counts as a gap too (the count may then be high, never low).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from app.errors import BackendUnavailableError, IdmintError, NotReadyError, SequenceOverflowError
from app.metrics import SequenceMetrics
from app.storage.sequences import MAX_VALUE, Run, SequenceStore, run_last
from app.tasks import cancel_and_wait

log = logging.getLogger("idmint.sequences")

PREFETCH_AT = 0.10
"""Reserve the next range once the current one is this fraction used (Leaf)."""
TARGET_RANGE_S = 900.0
"""Seconds one reservation should last at the recent rate (Leaf's dynamic step aims at 15 minutes)."""
MAX_CACHE_FACTOR = 100
"""The reservation size stays within cache .. MAX_CACHE_FACTOR x cache."""
RETRY_START_S = 0.25
RETRY_MAX_S = 4.0
"""Backoff between reservation attempts while storage is unreachable."""
RESERVE_TIMEOUT_S = 8.0
"""Upper bound on one reservation (the stores bound each call more tightly)."""
HAND_BACK_TIMEOUT_S = 2.0
"""Upper bound on the hand-back of one sequence's unused range at a clean stop (past it: a gap)."""
SLOW_ROUNDS = 8
"""Reservations one request may wait for before giving up (demand outrunning reservations)."""


def next_reservation_size(cache: int, previous: int, issued: int, elapsed_s: float) -> int:
    """The next reservation size (integers) from the rate seen since the previous reservation; see the module."""
    low, high = cache, cache * MAX_CACHE_FACTOR
    want = high if elapsed_s <= 0 else math.ceil(issued / elapsed_s * TARGET_RANGE_S)
    want = min(max(want, low), high)
    if want < previous:
        want = max(want, previous // 2, low)
    return want


class Segment:
    """One reserved run ``first, first+step, ..., last`` (``count`` integers); ``pos`` is the next integer to issue
    and ``left`` how many are left."""

    __slots__ = ("first", "count", "step", "pos", "left")

    def __init__(self, first: int, count: int, step: int = 1) -> None:
        self.first = first
        self.count = count
        self.step = step
        self.pos = first
        self.left = count

    @property
    def last(self) -> int:
        return self.first + (self.count - 1) * self.step

    @property
    def remaining(self) -> int:
        return self.left


Runs = list[Run]
"""Runs ``(first, count, step)`` in issue order (:data:`app.storage.sequences.Run`)."""


def _top_run(segments: list[Segment]) -> Run | None:
    """The unused integers at the top of ``segments`` that form one run ending at the last one reserved (only
    these can go back: storage's allocation point follows the last reservation), or None when nothing is held."""
    if not segments or segments[-1].left <= 0:
        return None
    top = segments[-1]
    first, count, step = top.pos, top.left, top.step
    for seg in reversed(segments[:-1]):
        if seg.step != step or seg.last + step != first or seg.left <= 0:
            break
        first, count = seg.pos, count + seg.left
    return first, count, step


class SequenceBuffer:
    """The ranges this node holds for one sequence, and the background reservation that refills them."""

    def __init__(
        self,
        name: str,
        cache: int,
        store: SequenceStore,
        metrics: SequenceMetrics,
        clock: Callable[[], float] = time.monotonic,
        period: str | None = None,
    ) -> None:
        self.name = name
        self.period = period
        """The period key this buffer reserves in (None: a sequence that never resets)."""
        self.cache = cache
        self.store = store
        self.metrics = metrics
        self.clock = clock
        self.segments: deque[Segment] = deque()
        self.size = cache
        self.issued = 0
        self.failure: NotReadyError | None = None
        self.exhausted = False
        self._load_task: asyncio.Task[None] | None = None
        self._retry_at = 0.0
        self._backoff = RETRY_START_S
        self._last_reserve_at: float | None = None
        self._issued_since = 0
        self._slow = asyncio.Lock()
        self._stopped = False
        """Stopping: nothing more is reserved (a reservation in flight still lands)."""
        self._drained = False
        """Stopped: the held ranges were handed back or dropped; a reservation landing now is a gap."""
        metrics.reservation_size.set(self.size)

    @property
    def held(self) -> int:
        """Integers held and not yet issued."""
        return sum(s.left for s in self.segments)

    # -- issuing ------------------------------------------------------------------------------------------
    def take_now(self, count: int, charge: Callable[[int], None] | None = None) -> Runs | None:
        """``count`` integers from the held ranges, or None (nothing taken, nothing charged) when fewer are held.
        ``charge`` (the sequences' :meth:`~app.sequences.SequenceService.next_now`) is called with ``count`` once
        they are held, before any is taken (it raises to refuse). Never waits."""
        segments = self.segments
        if segments:
            seg = segments[0]
            if seg.left >= count:
                if charge is not None:
                    charge(count)
                first = seg.pos
                seg.pos = first + count * seg.step
                seg.left -= count
                if not seg.left:
                    segments.popleft()
                self._issued(count)
                return [(first, count, seg.step)]
        held = self.held
        if held < count:
            if self._load_task is None:
                self._maybe_reserve(at_least=count - held)
            return None
        if charge is not None:
            charge(count)
        runs: Runs = []
        need = count
        while need:
            seg = segments[0]
            n = min(need, seg.left)
            runs.append((seg.pos, n, seg.step))
            seg.pos += n * seg.step
            seg.left -= n
            need -= n
            if not seg.left:
                segments.popleft()
        self._issued(count)
        return runs

    async def take(self, count: int) -> Runs:
        """``count`` integers, waiting for a reservation when too few are held.

        Raises BackendUnavailableError (503) when too few are held and storage cannot be reached,
        SequenceOverflowError (422) when the sequence has fewer than ``count`` integers left before 2**63-1.
        """
        runs = self.take_now(count)
        if runs is not None:
            return runs
        async with self._slow:
            for _ in range(SLOW_ROUNDS):
                runs = self.take_now(count)
                if runs is not None:
                    return runs
                if self._stopped:
                    raise BackendUnavailableError(f"sequence {self.name}: this node is stopping", retry_after=1)
                if self.exhausted:
                    raise SequenceOverflowError(
                        f"sequence {self.name}: {count} integers asked for, but only {self.held} remain on this "
                        f"node before the maximum value 2**63-1 ({MAX_VALUE}) and none are left in storage"
                    )
                task = self._load_task
                if task is None:
                    if self.failure is not None and self.clock() < self._retry_at:
                        raise self._unavailable()
                    task = self._start_reservation(count - self.held)
                await asyncio.shield(task)
                if self.failure is not None and self.held < count:
                    raise self._unavailable()
        raise BackendUnavailableError(
            f"sequence {self.name}: demand outran {SLOW_ROUNDS} reservations for one request; try again", retry_after=1
        )

    def _issued(self, count: int) -> None:
        self.issued += count
        self._issued_since += count
        m = self.metrics
        m.issued.inc(count)
        m.buffered.dec(count)
        if self._load_task is None:
            self._maybe_reserve()

    def _unavailable(self) -> BackendUnavailableError:
        self.metrics.unavailable.inc()
        reason = self.failure.reason if self.failure is not None else "storage unreachable"
        wait = max(1, math.ceil(self._retry_at - self.clock()))
        return BackendUnavailableError(
            f"sequence {self.name}: this node's ranges ran out and storage cannot be reached ({reason})",
            retry_after=wait,
        )

    # -- reserving ----------------------------------------------------------------------------------------
    def _maybe_reserve(self, at_least: int = 0) -> None:
        """Leaf's trigger: start the background reservation once the current range is PREFETCH_AT used (at once,
        for ``at_least`` integers or more, when a request needs more than is held)."""
        if self.exhausted or self._stopped:
            return
        segments = self.segments
        if not at_least:
            if len(segments) >= 2:
                return
            if segments:
                seg = segments[0]
                if seg.count - seg.left < PREFETCH_AT * seg.count:
                    return
        if self.failure is not None and self.clock() < self._retry_at:
            return
        self._start_reservation(at_least)

    def _start_reservation(self, at_least: int) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._reserve(at_least), name=f"idmint-sequence-{self.name}")
        self._load_task = task
        return task

    async def _reserve(self, at_least: int) -> None:
        """One reservation appended to the buffer. Never raises: a failure is kept in ``failure`` (with a
        backoff before the next attempt) and reported by :meth:`take` when the buffer runs dry."""
        try:
            now = self.clock()
            if self._last_reserve_at is not None:
                self.size = next_reservation_size(
                    self.cache, self.size, self._issued_since, now - self._last_reserve_at
                )
            count = max(self.size, at_least)
            try:
                async with asyncio.timeout(RESERVE_TIMEOUT_S):
                    first, got, step = await self.store.reserve(self.name, count, partial=True, period=self.period)
            except SequenceOverflowError:
                self.exhausted = True
                log.warning("sequence %s: no integers left before 2**63-1; this node issues what it holds", self.name)
                return
            except (NotReadyError, TimeoutError) as exc:
                error = (
                    exc
                    if isinstance(exc, NotReadyError)
                    else BackendUnavailableError(f"sequence storage did not answer within {RESERVE_TIMEOUT_S:g} s")
                )
                if self.failure is None:
                    log.warning(
                        "sequence %s: reserving the next range failed (%d integers held): %s",
                        self.name,
                        self.held,
                        error.reason,
                    )
                self.failure = error
                self._retry_at = self.clock() + self._backoff
                self._backoff = min(self._backoff * 2, RETRY_MAX_S)
                self.metrics.storage_failures.inc()
                return
            except IdmintError as exc:  # unknown sequence (deleted by an operator?) and the like
                self.failure = BackendUnavailableError(f"sequence {self.name}: {exc}", retry_after=5)
                self._retry_at = self.clock() + RETRY_MAX_S
                return
            if self._drained:
                self.metrics.gap.inc(got)
                return
            if self.failure is not None:
                log.info("sequence %s: reserving ranges again", self.name)
            self.failure = None
            self._backoff = RETRY_START_S
            self._retry_at = 0.0
            self._last_reserve_at = now
            self._issued_since = 0
            self.segments.append(Segment(first, got, step))
            m = self.metrics
            m.buffered.inc(got)
            m.buffer_ranges.inc()
            m.reservation_size.set(self.size)
        finally:
            self._load_task = None

    # -- lifecycle / description ----------------------------------------------------------------------------
    async def stop(self, hand_back: bool = True, timeout: float = HAND_BACK_TIMEOUT_S) -> tuple[int, int]:
        """Stop issuing and reserving; hand the unused top of the held ranges back to storage (``hand_back``,
        within ``timeout`` seconds); count the rest as a gap. Returns (integers handed back, integers dropped)."""
        self._stopped = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        task = self._load_task
        if task is not None:  # a reservation in flight (a prefetch) lands in the buffer and goes back with it
            await asyncio.wait({task}, timeout=timeout)
            await cancel_and_wait(task)  # if it lands after all, storage has moved on: the compare below fails
        segments = list(self.segments)
        self.segments.clear()  # from here on nothing is issued: what is handed back is never issued here
        self._drained = True
        held = sum(s.left for s in segments)
        returned = 0
        try:
            top = _top_run(segments)
            if hand_back and top is not None:
                first, count, step = top
                last = run_last(top)
                try:
                    async with asyncio.timeout_at(deadline):
                        left = max(deadline - loop.time(), 0.001)
                        if await self.store.give_back(self.name, first, last, left, step=step, period=self.period):
                            returned = count
                except (IdmintError, TimeoutError) as exc:  # in doubt: not handed back, a gap
                    reason = str(exc) if isinstance(exc, IdmintError) else f"no answer within {timeout:g} s"
                    log.warning(
                        "sequence %s: the unused range %d..%d was not handed back: %s", self.name, first, last, reason
                    )
        finally:
            dropped = held - returned
            m = self.metrics
            if dropped:
                m.gap.inc(dropped)
            if held:
                m.buffered.dec(held)
        return returned, dropped

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ranges": [[s.pos, s.last] for s in self.segments],
            "held": self.held,
            "reservation_size": self.size,
            "issued": self.issued,
        }
        if self.period is not None:
            out["period"] = self.period
        if self.failure is not None:
            out["storage"] = self.failure.reason
        if self.exhausted:
            out["exhausted"] = True
        return out
