"""The ``new_id`` buffer of one (scheme, options, format), shared by both clients (no I/O, no locking of its own).

IDs arrive in batches. A batch fetched at monotonic time ``t`` may be handed out until ``t + max_age`` (the age is
counted from the request's start, so it is never under-estimated). Each batch is cut into a few *segments*, each a
``(deadline, iterator)``; the client publishes the head segment as ``(deadline, iterator.__next__)`` in a dict, so
the hot path is one dict read, one clock read and one C-level ``next`` (atomic under the GIL: two threads never
get the same item). Everything else happens on a segment change (the slow path, under the buffer's lock):

* retire the head: count what was drawn from it (or discarded as expired);
* drop queued segments whose deadline passed;
* ask for a refill when fewer IDs than the *low-water mark* remain queued, so the buffer does not run dry.

Sizing (the refill size adapts to the rate of use): the draw rate is measured over windows of at least
``RATE_WINDOW_S`` (EWMA); a refill asks for ``rate * horizon`` IDs (``horizon`` = ``max_age / 2``, at most
``MAX_HORIZON_S``) clamped to ``[min_refill, max_refill]``, so a batch is normally used up well inside ``max_age``
(IDs expiring unused halve the rate estimate, a draw finding the buffer empty doubles it); refills use the stream
route. The low-water mark is half a refill or three fetch latencies of use, whichever is more, but at most
``horizon`` seconds of use.
"""

from __future__ import annotations

import math
import operator
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from idmint_client._models import BufferStats

SEGMENTS_PER_BATCH = 4
"""A batch is cut into this many segments: each segment change is a chance to re-check the low-water mark."""

RATE_WINDOW_S = 0.05
"""Shortest window (seconds) over which the draw rate is measured."""

RATE_EWMA = 0.5
"""Weight of the newest window in the draw-rate estimate."""

EXPIRED_RATE_CUT = 0.5
"""Factor applied to the draw-rate estimate whenever buffered IDs expire unused."""

MISSED_RATE_BOOST = 2.0
"""Factor applied to the draw-rate estimate whenever a draw finds the buffer empty (after the first batch)."""

RATE_MAX_PER_S = 1e9
"""Upper bound of the draw-rate estimate (IDs per second)."""

MAX_HORIZON_S = 1.0
"""A refill is sized to last at most this many seconds at the measured rate."""

LATENCY_MARGIN = 3.0
"""The low-water mark covers this many refill latencies of use."""


@dataclass(slots=True)
class Segment:
    deadline: float
    iterator: Iterator[str]
    length: int

    def head(self) -> tuple[float, Callable[[], str]]:
        return (self.deadline, self.iterator.__next__)


class Buffer:
    """Bookkeeping of one buffer. Callers hold the client's lock for this buffer around every method."""

    def __init__(
        self,
        scheme: str,
        options: Mapping[str, str],
        fmt: str | None,
        min_refill: int,
        max_refill: int,
        max_age: float | None,
        now: float,
    ) -> None:
        self.scheme = scheme
        self.options = dict(options)
        self.format = fmt
        self.min_refill = min_refill
        self.max_refill = max_refill
        self.max_age = max_age
        self.horizon = MAX_HORIZON_S if max_age is None else min(max_age / 2, MAX_HORIZON_S)
        self.queue: deque[Segment] = deque()
        self.queued = 0
        self.current: Segment | None = None
        self.refilling = False
        self.generation = 0
        """Counts finished refills, so a waiter can tell that the refill it waited for has ended."""
        self.last_error: BaseException | None = None
        self.rate = 0.0
        self.window_start = now
        self.window_drawn = 0
        self.latency = 0.0
        self.refills = 0
        self.issued = 0
        self.expired = 0
        self.misses = 0
        self.boosted_at = -1

    # -- sizing ------------------------------------------------------------------------------------------------
    def refill_size(self, cap: int | None = None) -> int:
        """IDs to ask for next: ``rate * horizon`` within [min_refill, max_refill] (and the server's max count)."""
        size = max(self.min_refill, min(self.max_refill, math.ceil(self.rate * self.horizon)))
        return max(1, min(size, cap)) if cap else size

    def low_water(self, cap: int | None = None) -> int:
        """Refill when fewer IDs than this are queued: half a refill, or LATENCY_MARGIN refill latencies of use,
        but never more than ``horizon`` seconds of use (more would expire unused when the rate drops)."""
        half = self.refill_size(cap) // 2
        return max(half, min(math.ceil(self.rate * self.latency * LATENCY_MARGIN), math.ceil(self.rate * self.horizon)))

    def _note_drawn(self, count: int, now: float) -> None:
        self.window_drawn += count
        elapsed = now - self.window_start
        if elapsed >= RATE_WINDOW_S:
            rate = self.window_drawn / elapsed
            self.rate = rate if self.rate == 0.0 else RATE_EWMA * rate + (1 - RATE_EWMA) * self.rate
            self.window_start = now
            self.window_drawn = 0

    # -- segments ----------------------------------------------------------------------------------------------
    def add(self, ids: list[str], started: float, latency: float) -> None:
        """Queue a fetched batch; ``started`` is the monotonic time its request began."""
        self.refills += 1
        self.issued += len(ids)
        self.latency = latency if self.latency == 0.0 else 0.5 * latency + 0.5 * self.latency
        deadline = math.inf if self.max_age is None else started + self.max_age
        step = max(1, math.ceil(len(ids) / SEGMENTS_PER_BATCH))
        for i in range(0, len(ids), step):
            part = ids[i : i + step]
            self.queue.append(Segment(deadline, iter(part), len(part)))
            self.queued += len(part)

    def retire_current(self, now: float) -> None:
        """The head segment is exhausted or expired: count what was drawn and what is discarded."""
        seg = self.current
        if seg is None:
            return
        self.current = None
        left = operator.length_hint(seg.iterator)
        self._note_drawn(seg.length - left, now)
        if left:
            self._note_expired(left)

    def next_segment(self, now: float) -> Segment | None:
        """The next unexpired queued segment (becoming the head), dropping expired ones; None when empty."""
        while self.queue:
            seg = self.queue.popleft()
            self.queued -= seg.length
            if now < seg.deadline:
                self.current = seg
                return seg
            self._note_expired(seg.length)
        return None

    def note_miss(self) -> None:
        """A draw found the buffer empty: refills came too late, so the rate was under-estimated."""
        self.misses += 1
        if self.refills and self.boosted_at != self.generation:  # once per refill, however many draws wait
            self.boosted_at = self.generation
            boosted = self.rate * MISSED_RATE_BOOST if self.rate else self.min_refill / max(self.latency, 1e-3)
            self.rate = min(boosted, RATE_MAX_PER_S)

    def _note_expired(self, count: int) -> None:
        """IDs expired unused: more were fetched than were used within max_age, so the rate was over-estimated."""
        self.expired += count
        self.rate *= EXPIRED_RATE_CUT

    def wants_refill(self, cap: int | None = None) -> bool:
        return not self.refilling and self.queued < self.low_water(cap)

    def stats(self, cap: int | None = None) -> BufferStats:
        current = operator.length_hint(self.current.iterator) if self.current is not None else 0
        return BufferStats(
            scheme=self.scheme,
            options=dict(self.options),
            format=self.format,
            buffered=self.queued + current,
            refill_size=self.refill_size(cap),
            refills=self.refills,
            issued=self.issued,
            expired=self.expired,
            misses=self.misses,
        )
