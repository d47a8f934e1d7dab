"""The capped-slot generator: the slot-run loop eight-byte and snowflake share.

A capped scheme has a fixed number of slots per tick (eight-byte: 64 sequences per millisecond per generator ID
held; snowflake: 2**S per time unit per worker ID). :class:`CappedSlotGenerator` hands out slots strictly after
the last one it handed out, as :class:`~app.schemes.base.Run` pieces of one tick each:

* clock moved on: start at the tick's first slot (:meth:`CappedSlotGenerator.start_slot`, 0 unless a subclass
  spreads it);
* same tick, or the clock stepped back (a clock rollback, counted in ``stats``): keep the last tick and continue;
* the usable ticks full: return what was issued (a partial batch, possibly empty); :meth:`wait_ns` says how long
  until the next tick. Never waits itself.

``lookback_ticks``: never-used slots in ticks ``now - lookback_ticks .. now`` after the last slot handed out may be
used, so a streaming caller that wakes late still fills the cap. Ticks count ``tick_ns`` from ``epoch_ns``.
"""

from __future__ import annotations

from app.schemes.base import Clock, Generator, GeneratorStats

NANOSECS_IN_SECS = 1_000_000_000


class CappedSlotGenerator(Generator):
    """Slot bookkeeping for a scheme with ``slots_per_tick`` slots per tick (see the module docstring).

    ``start_tick`` is the tick whose slots count as all used at start (the restored floor's); ``floor`` the
    high-water mark in native units, as :attr:`high_water` reports it. Subclasses check their time range in
    :meth:`check_tick` and build their batch from :meth:`take`'s runs.
    """

    def __init__(
        self,
        *,
        slots_per_tick: int,
        tick_ns: int,
        clock: Clock,
        floor: int,
        start_tick: int,
        lookback_ticks: int,
        tick_max: int,
        tick_min: int = -1,
        epoch_ns: int = 0,
        epoch_ticks: int = 0,
        spread_start: bool = False,
    ) -> None:
        self._clock = clock
        self._floor = floor
        self._tick_ns = tick_ns
        self._epoch_ns = epoch_ns
        self._epoch_ticks = epoch_ticks
        self._slots_per_tick = slots_per_tick
        self._lookback_ticks = lookback_ticks
        self._tick_min = tick_min
        self._tick_max = tick_max
        self._spread_start = spread_start
        # Position after the last slot handed out: (tick, next slot). The start tick is full.
        self._tick = start_tick
        self._next_slot = slots_per_tick
        self._last_issued: int | None = None
        self.stats = GeneratorStats()

    def start_slot(self) -> int:
        """The first slot a new tick hands out when ``spread_start`` is set (otherwise 0, without a call)."""
        return 0

    def lookback_tick(self, now_tick: int) -> int:
        """The earliest tick a late caller may still fill (default ``now_tick - lookback_ticks``)."""
        return now_tick - self._lookback_ticks

    def out_of_range(self, now_ns: int) -> Exception:
        """The error :meth:`take` raises when the ticks it would use leave ``tick_min .. tick_max``."""
        return OverflowError(f"the clock ({now_ns} ns) is outside this generator's time field")

    def take(self, count: int) -> tuple[list[tuple[int, int, int]], int]:
        """Hand out up to ``count`` slots: ``(runs, how many are still missing)``, the runs as plain tuples of
        :class:`~app.schemes.base.Run`'s shape (no NamedTuple built per run on the single-ID path). Reads the
        clock once; raises :meth:`out_of_range` when the usable ticks leave ``tick_min .. tick_max``."""
        now_ns = self._clock()
        now_tick = (now_ns - self._epoch_ns) // self._tick_ns
        if self._last_issued is not None and now_tick < self._last_issued:
            self.stats.clock_rollbacks += 1
            self.stats.max_rollback_ns = max(
                self.stats.max_rollback_ns, self._last_issued * self._tick_ns + self._epoch_ns - now_ns
            )
        last_usable = max(now_tick, self._tick)  # past the clock only to continue the last tick
        if not self._tick_min <= last_usable <= self._tick_max:
            raise self.out_of_range(now_ns)
        tick, slot = self._tick, self._next_slot
        if tick < now_tick - self._lookback_ticks:
            tick, slot = self.lookback_tick(now_tick), self.start_slot() if self._spread_start else 0
        slots_per_tick = self._slots_per_tick
        runs: list[tuple[int, int, int]] = []
        remaining = count
        while remaining and tick <= last_usable:
            if slot == slots_per_tick:
                tick, slot = tick + 1, self.start_slot() if self._spread_start else 0
                continue
            taken = min(slots_per_tick - slot, remaining)
            runs.append((tick, slot, taken))
            slot += taken
            remaining -= taken
        if runs:
            last_tick, first, taken = runs[-1]
            self._tick, self._next_slot = last_tick, first + taken
            self._last_issued = last_tick
        if remaining:
            self.stats.sequence_exhausted += 1
        return runs, remaining

    @property
    def capacity_per_second(self) -> float:
        """The most IDs this generator issues per second: every slot of every tick."""
        return self._slots_per_tick * NANOSECS_IN_SECS / self._tick_ns

    @property
    def lookback_ns(self) -> int:
        """``lookback_ticks`` in nanoseconds: never-used ticks that recent stay usable."""
        return self._lookback_ticks * self._tick_ns

    def wait_ns(self) -> int:
        """0 if a slot is free now; else nanoseconds until the clock reaches the next tick to use."""
        if self._next_slot < self._slots_per_tick:
            return 0
        return max(0, (self._tick + 1) * self._tick_ns + self._epoch_ns - self._clock())

    @property
    def high_water(self) -> int:
        """The last tick issued (or the floor), in native units (ticks + ``epoch_ticks``)."""
        if self._last_issued is None:
            return self._floor
        return max(self._floor, self._last_issued + self._epoch_ticks)
