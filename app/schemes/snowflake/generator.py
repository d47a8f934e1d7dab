"""Issuing snowflakes: the generator (:class:`SnowflakeGenerator`) and its batches, built and encoded column-wise.

:class:`SnowflakeBatch` holds the runs of slots one :meth:`SnowflakeGenerator.generate` call handed out and builds
the packed values as a uint64 column (time field shifted, worker ID bits from a per-worker table, sequence shifted).
Text, column-wise for every value below 2**63:

* ``hex``: 16 digits = four 4-digit groups from a 65,536-entry table, one 4-byte write per group and row.
* ``decimal``: each value zero-padded to 19 digits (``v // 10**16`` gives 3 digits, the rest four 4-digit groups
  from a 10,000-entry table), then the leading zeros are cut: one slice when the whole batch has one width (the
  usual case: a batch spans a few ms), a boolean mask over the rows otherwise.

A batch's text takes the cheapest path that applies, all exact:

1. Consecutive runs (the sequence is the lowest field: every layout but sonyflake): the slots of one unit and
   worker ID are consecutive integers. Each run is cut where ``value // 10**4`` (decimal) or ``value >> 16``
   (hex) changes; a piece's head is formatted once with Python ints and repeated over its rows (``np.repeat``),
   and each row's last 4 characters are a contiguous slice of a 4-character table. No per-ID arithmetic.
2. Head/tail segments of the ascending values: rows sharing ``value // 10**8`` (decimal) or ``value >> 16``
   (hex) share a head; each row computes only its tail (8 decimal digits: one division; 4 hex digits: one lookup).
3. The column-wise encoders above, for sparse batches, heads of different widths or values below 10**8.
"""

from __future__ import annotations

import datetime
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.errors import InvalidOptionError, TimeRangeError
from app.schemes import _text
from app.schemes.base import (
    Batch,
    Clock,
    RandomSource,
    csprng,
)
from app.schemes.slots import CappedSlotGenerator
from app.schemes.snowflake.codec import (
    BATCH_COUNT_MAX,
    DECIMAL_LEN_MAX,
    HEX_LEN,
    NANOSECS_IN_MILLISECS,
    SEQUENCE,
    TEXT,
    TIME,
    WORKER,
    Layout,
    encode_decimal,
    encode_hex,
)

OFFSET_DRAWS = 64
"""Random bytes drawn at once for the units' start offsets (one byte per new unit)."""


NEWLINE = 10
GROUP_DIGITS = 4
GROUP_RADIX = 10**GROUP_DIGITS
TOP_DIGITS = DECIMAL_LEN_MAX - 4 * GROUP_DIGITS  # 3: 2**63 // 10**16 = 922
TOP_RADIX = 10 ** (DECIMAL_LEN_MAX - TOP_DIGITS)  # 10**16
HEX4_BITS = 16
SCALAR_COUNT_MAX = 8
"""Batches of at most this many IDs are formatted per ID with Python ints."""
TIME_RANGE_RETRY_MAX_S = 3600
"""Retry-After (s) of a layout that ran out of time, and the most one that has not begun yet asks for."""
_POWERS_OF_TEN = np.array([10**k for k in range(1, DECIMAL_LEN_MAX)], dtype=np.uint64)


@functools.cache
def _utc(unix_ms: int) -> str:
    """RFC 3339 UTC text of a Unix ms timestamp (``2046-06-27T17:00:49.497Z``)."""
    moment = datetime.datetime.fromtimestamp(unix_ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@functools.cache
def _dec4() -> npt.NDArray[np.uint32]:
    """(10000,) little-endian uint32: bytes 0..3 = the 4 zero-padded decimal digits of the index."""
    text = "".join(f"{value:04d}" for value in range(GROUP_RADIX)).encode("ascii")
    table = np.frombuffer(text, dtype="<u4").copy()
    table.flags.writeable = False
    return table


def decimal_text(values: npt.NDArray[np.uint64]) -> bytes:
    """The unsigned decimals of ``values`` (each below 2**63), one per line, no leading zeros (column-wise)."""
    count = len(values)
    if not count:
        return b""
    rows = np.empty((count, DECIMAL_LEN_MAX + 1), dtype=np.uint8)
    rows[:, DECIMAL_LEN_MAX] = NEWLINE
    dec4 = _dec4()
    top = values // np.uint64(TOP_RADIX)
    rest = values - top * np.uint64(TOP_RADIX)
    # The top group's entry is "0ddd": write it shifted by one byte (3 digits at columns 0..2); column 3 is then
    # overwritten by the first 4-digit group.
    _text.char_view(rows, 0)[:] = dec4[top] >> np.uint32(8)
    radix = np.uint64(GROUP_RADIX)
    for column in range(DECIMAL_LEN_MAX - GROUP_DIGITS, TOP_DIGITS - 1, -GROUP_DIGITS):  # 15, 11, 7, 3
        high = rest // radix
        _text.char_view(rows, column)[:] = dec4[rest - high * radix]
        rest = high
    digits = np.searchsorted(_POWERS_OF_TEN, values, side="right") + 1  # decimal digits of each value
    widest, narrowest = int(digits.max()), int(digits.min())
    if widest == narrowest:
        return rows[:, DECIMAL_LEN_MAX - widest :].tobytes()
    keep = np.arange(DECIMAL_LEN_MAX + 1) >= (DECIMAL_LEN_MAX - digits)[:, None]
    return rows[keep].tobytes()


def hex_text(values: npt.NDArray[np.uint64]) -> bytes:
    """16 lowercase hex digits of each value, one per line (column-wise)."""
    count = len(values)
    if not count:
        return b""
    rows = np.empty((count, HEX_LEN + 1), dtype=np.uint8)
    rows[:, HEX_LEN] = NEWLINE
    hex4 = _text.hex4_table()
    mask = np.uint64((1 << HEX4_BITS) - 1)
    groups = HEX_LEN // 4
    for group in range(groups):
        shift = np.uint64(HEX4_BITS * (groups - 1 - group))
        _text.char_view(rows, 4 * group)[:] = hex4[(values >> shift) & mask]
    return rows.tobytes()


SEGMENTS_PER_ROWS_MAX = 1 / 64
"""The head/tail encoders fall back to the general ones past one segment per 64 IDs (sparse values)."""
DECIMAL_TAIL_DIGITS = 2 * GROUP_DIGITS  # 8
DECIMAL_TAIL_RADIX = 10**DECIMAL_TAIL_DIGITS
HEX_TAIL_DIGITS = 4
HEX_TAIL_RADIX = 1 << (4 * HEX_TAIL_DIGITS)
TAIL_CHARS = 4
"""Characters per row the consecutive-runs encoder takes from a table (4 decimal or 4 hex digits)."""


def _repeated_rows(parts: Sequence[tuple[bytes, int]]) -> npt.NDArray[np.uint8]:
    """``(sum(count), width)`` uint8 rows: each ``(row, count)`` part's row repeated ``count`` times, in order
    (one ``np.repeat`` over the rows viewed as ``width``-byte items; every row has the same width)."""
    width = len(parts[0][0])
    heads = np.frombuffer(b"".join(row for row, _ in parts), dtype=f"V{width}")
    repeated = np.repeat(heads, [count for _, count in parts])
    return repeated.view(np.uint8).reshape(len(repeated), width)


def _segments(heads: npt.NDArray[np.uint64]) -> list[tuple[int, int]] | None:
    """``(first_row, rows)`` of each run of equal ``heads`` (ascending input), or None when there are too many."""
    boundaries = np.flatnonzero(heads[1:] != heads[:-1]) + 1
    if len(boundaries) > len(heads) * SEGMENTS_PER_ROWS_MAX:
        return None
    starts = [0, *boundaries.tolist()]
    ends = [*starts[1:], len(heads)]
    return [(start, end - start) for start, end in zip(starts, ends)]


def decimal_text_sorted(values: npt.NDArray[np.uint64]) -> bytes:
    """:func:`decimal_text` for ascending values (a batch): rows sharing ``value // 10**8`` share their head text
    (formatted once, repeated by np.repeat); each row computes only its last 8 digits. Falls back to
    :func:`decimal_text` for values below 10**8, heads of different widths, or too many segments."""
    count = len(values)
    if not count:
        return b""
    heads = values // np.uint64(DECIMAL_TAIL_RADIX)
    first_head, last_head = int(heads[0]), int(heads[-1])
    segments = _segments(heads) if first_head and len(str(first_head)) == len(str(last_head)) else None
    if segments is None:
        return decimal_text(values)
    zeros = "0" * DECIMAL_TAIL_DIGITS + "\n"
    rows = _repeated_rows([((str(int(heads[start])) + zeros).encode("ascii"), rows) for start, rows in segments])
    tail = values - heads * np.uint64(DECIMAL_TAIL_RADIX)
    high = tail // np.uint64(GROUP_RADIX)
    dec4 = _dec4()
    width = rows.shape[1]
    _text.char_view(rows, width - 1 - DECIMAL_TAIL_DIGITS)[:] = dec4[high]
    _text.char_view(rows, width - 1 - GROUP_DIGITS)[:] = dec4[tail - high * np.uint64(GROUP_RADIX)]
    return rows.tobytes()


def hex_text_sorted(values: npt.NDArray[np.uint64]) -> bytes:
    """:func:`hex_text` for ascending values: rows sharing ``value >> 16`` share their first 12 digits (np.repeat);
    each row writes its last 4 from a table. Falls back to :func:`hex_text` when there are too many segments."""
    count = len(values)
    if not count:
        return b""
    heads = values >> np.uint64(HEX4_BITS)
    segments = _segments(heads)
    if segments is None:
        return hex_text(values)
    rows = _repeated_rows([((encode_hex(int(values[start])) + "\n").encode("ascii"), rows) for start, rows in segments])
    mask = np.uint64((1 << HEX4_BITS) - 1)
    _text.char_view(rows, HEX_LEN - HEX_TAIL_DIGITS)[:] = _text.hex4_table()[values & mask]
    return rows.tobytes()


def _decimal_head(value: int) -> bytes:
    return b"%d\n" % value


def _hex_head(value: int) -> bytes:
    return b"%016x\n" % value


def _runs_text(
    runs: Sequence[tuple[int, int]],
    count: int,
    radix: int,
    head: Callable[[int], bytes],
    table: npt.NDArray[np.uint32],
) -> bytes | None:
    """The lines of ``runs`` of consecutive values: each run is cut where ``value // radix`` changes; a piece's
    head (its value rounded down to ``radix``, formatted once by ``head``) is repeated over its rows (np.repeat) and its
    rows' last 4 characters are a contiguous slice of ``table`` (4 characters of every value below ``radix``).
    None (use the column-wise encoders) when pieces would be too many, the first value is below ``radix`` (its
    head would be too short), or heads differ in width (a power of ten inside the batch)."""
    if not runs or runs[0][0] < radix:
        return None
    parts: list[tuple[bytes, int]] = []
    tails: list[tuple[npt.NDArray[np.uint32], int, int]] = []
    limit = count * SEGMENTS_PER_ROWS_MAX
    for start, run_count in runs:
        done = 0
        while done < run_count:
            value = start + done
            low = value % radix
            taken = min(run_count - done, radix - low)
            parts.append((head(value - low), taken))
            tails.append((table, low, taken))
            done += taken
        if len(parts) > limit:
            return None
    width = len(parts[0][0])
    if len(parts[-1][0]) != width:
        return None  # ascending values: the first and last heads bound every width
    rows = _repeated_rows(parts)
    _text.write_runs(rows, width - 1 - TAIL_CHARS, tails)
    return rows.tobytes()


class SnowflakeBatch(Batch):
    """Snowflakes issued by one :meth:`SnowflakeGenerator.generate` call, as runs of slots per time unit.

    ``worker_ids`` are the generator's (sorted) worker IDs; slot k of a unit is worker ``k // 2**S``, sequence
    ``k % 2**S`` when the worker ID sits above the sequence, else sequence ``k // n``, worker ``k % n``.
    """

    def __init__(self, layout: Layout, worker_ids: Sequence[int], runs: Sequence[tuple[int, int, int]]) -> None:
        self.layout = layout
        self.worker_ids = tuple(worker_ids)
        self.runs = tuple(runs)
        self.count = self.runs[0][2] if len(self.runs) == 1 else sum(run[2] for run in self.runs)
        self._array: npt.NDArray[np.uint64] | None = None

    def array(self) -> npt.NDArray[np.uint64]:
        """The packed IDs as a uint64 array, in issue order (increasing)."""
        if self._array is None:
            self._array = self._build()
        return self._array

    def _build(self) -> npt.NDArray[np.uint64]:
        layout = self.layout
        if not self.count:
            return np.empty(0, dtype=np.uint64)
        shifts = layout.shifts
        if len(self.runs) == 1:
            unit, first, count = self.runs[0]
            slots = np.arange(first, first + count, dtype=np.uint64)
            head: npt.NDArray[np.uint64] | np.uint64 = np.uint64(unit << shifts[TIME])
        else:
            firsts = np.array([run[1] for run in self.runs], dtype=np.int64)
            counts = np.array([run[2] for run in self.runs], dtype=np.int64)
            starts = np.cumsum(counts) - counts
            slots = (np.arange(self.count, dtype=np.int64) + np.repeat(firsts - starts, counts)).astype(np.uint64)
            units = np.array([run[0] for run in self.runs], dtype=np.uint64)
            head = np.repeat(units << np.uint64(shifts[TIME]), counts)
        workers = len(self.worker_ids)
        if layout.worker_above_sequence:
            index = slots >> np.uint64(layout.sequence_bits)
            sequence = slots & np.uint64(layout.sequence_max)
        else:
            index = slots % np.uint64(workers)
            sequence = slots // np.uint64(workers)
        worker_bits = np.array(self.worker_ids, dtype=np.uint64) << np.uint64(shifts[WORKER])
        low = worker_bits[0] if workers == 1 else worker_bits[index]
        values: npt.NDArray[np.uint64] = head | low | (sequence << np.uint64(shifts[SEQUENCE]))
        return values

    def encode(self, fmt: str) -> bytes:
        """The batch as ``decimal`` or ``hex`` lines; InvalidOptionError for another format."""
        fmt = TEXT.resolve(fmt)
        if not self.count:
            return b""
        if self.count <= SCALAR_COUNT_MAX:
            encoder = encode_hex if fmt == "hex" else encode_decimal
            return "".join([encoder(value) + "\n" for value in self.values()]).encode("ascii")
        runs = self._consecutive_runs()
        if fmt == "hex":
            hex4 = _text.hex4_table()
            text = None if runs is None else _runs_text(runs, self.count, HEX_TAIL_RADIX, _hex_head, hex4)
            return hex_text_sorted(self.array()) if text is None else text
        text = None if runs is None else _runs_text(runs, self.count, GROUP_RADIX, _decimal_head, _dec4())
        return decimal_text_sorted(self.array()) if text is None else text

    def _consecutive_runs(self) -> list[tuple[int, int]] | None:
        """``(first value, count)`` runs of consecutive values, in issue order, read off the slot runs without
        building the values: when the sequence is the lowest field, the slots of one unit and worker ID are
        consecutive integers. None for sequence-above-worker layouts (sonyflake) or too many short runs."""
        layout = self.layout
        if not layout.worker_above_sequence:
            return None
        per_worker = layout.ids_per_unit
        shifts = layout.shifts
        worker_bits = [worker_id << shifts[WORKER] for worker_id in self.worker_ids]
        runs: list[tuple[int, int]] = []
        limit = self.count * SEGMENTS_PER_ROWS_MAX
        for unit, first, count in self.runs:
            head = unit << shifts[TIME]
            slot, end = first, first + count
            while slot < end:
                index, sequence = divmod(slot, per_worker)
                taken = min(end - slot, per_worker - sequence)
                runs.append((head | worker_bits[index] | sequence, taken))
                slot += taken
            if len(runs) > limit:
                return None
        return runs

    def values(self) -> list[int]:
        if self._array is None and self.count <= SCALAR_COUNT_MAX:
            return self._scalar_values()
        result: list[int] = self.array().tolist()
        return result

    def _scalar_values(self) -> list[int]:
        """:meth:`values` of a small batch with Python ints, as :meth:`_build` lays them out (for one ID, numpy's
        set-up costs more than a single-ID request's whole issue)."""
        layout = self.layout
        shifts = layout.shifts
        time_shift, worker_shift, sequence_shift = shifts[TIME], shifts[WORKER], shifts[SEQUENCE]
        worker_ids, workers = self.worker_ids, len(self.worker_ids)
        if layout.worker_above_sequence:
            sequence_bits, sequence_max = layout.sequence_bits, layout.sequence_max
            return [
                unit << time_shift
                | worker_ids[slot >> sequence_bits] << worker_shift
                | (slot & sequence_max) << sequence_shift
                for unit, first, count in self.runs
                for slot in range(first, first + count)
            ]
        return [
            unit << time_shift | worker_ids[slot % workers] << worker_shift | slot // workers << sequence_shift
            for unit, first, count in self.runs
            for slot in range(first, first + count)
        ]

    @property
    def high_water(self) -> int:
        """The last unit in the batch in native units (time field + EPOCH_MS // UNIT_MS); -1 if empty."""
        if not self.runs:
            return -1
        return max(run[0] for run in self.runs) + self.layout.epoch_units


# --- generator ----------------------------------------------------------------------------------------------------


class SnowflakeGenerator(CappedSlotGenerator):
    """Issues snowflakes in ``layout`` for the worker IDs this node holds (eight-byte's rules,
    docs/schemes/snowflake.md "Generation").

    Each time unit has ``2**S * len(worker_ids)`` slots, in increasing packed order: worker IDs are sorted; slot k
    is (worker k // 2**S, sequence k % 2**S) when the worker ID sits above the sequence, else (sequence
    k // n, worker k % n) (sonyflake). :meth:`generate` hands out slots strictly after the last one handed out:

    * clock moved on: start at a random slot of the first :attr:`Layout.start_spread` slots of the unit (Meituan Leaf's
      rule, Leaf#39: a unit's first ID does not always end in sequence 0, so ``id % N`` shards stay even at low
      traffic; the skipped slots are the capacity cost, ``start_spread / 2`` per unit on average);
    * same unit, or the clock stepped back (a clock rollback, counted in :attr:`stats`): keep the last unit and
      continue its sequence;
    * usable units full: return a partial batch (possibly empty); :meth:`wait_ns` says how long until the next
      unit. Never waits itself.

    ``lookback_units``: never-used slots in units ``now - lookback_units .. now`` after the last slot handed out
    may be used, so a streaming caller that wakes late still fills the cap. ``random``: the source of the start
    offsets (``bytes(n)`` gives offset 0: every unit from its first slot). ``floor`` (native units: the time
    field + EPOCH_MS // UNIT_MS) is the restored high-water mark: no ID at or below it is issued. Raises
    ValueError naming the rule for an empty, out-of-range or repeated worker ID, a negative lookback or a floor
    below -1.
    """

    def __init__(
        self,
        layout: Layout,
        worker_ids: Sequence[int],
        *,
        clock: Clock = time.time_ns,
        floor: int = -1,
        lookback_units: int = 0,
        random: RandomSource = csprng,
    ) -> None:
        ids = tuple(worker_ids)
        if not ids:
            raise ValueError("worker_ids must hold at least one worker ID")
        for worker_id in ids:
            if not 0 <= worker_id <= layout.worker_max:
                raise ValueError(f"worker ID must be in 0..{layout.worker_max} (layout {layout.name}), got {worker_id}")
        repeated = sorted({worker_id for worker_id in ids if ids.count(worker_id) > 1})
        if repeated:
            raise ValueError(f"worker IDs must be distinct, got {', '.join(map(str, repeated))} more than once")
        if floor < -1:
            raise ValueError(f"floor must be >= -1 ({layout.unit_ms} ms units), got {floor}")
        if lookback_units < 0:
            raise ValueError(f"lookback_units must be >= 0, got {lookback_units}")
        self.layout = layout
        self.worker_ids = tuple(sorted(ids))
        self.lookback_units = lookback_units
        self._spread = layout.start_spread
        self._random = random
        self._offsets = b""
        # The floor's unit counts as full.
        super().__init__(
            slots_per_tick=layout.ids_per_unit * len(ids),
            tick_ns=layout.unit_ms * NANOSECS_IN_MILLISECS,
            clock=clock,
            floor=floor,
            start_tick=max(-1, floor - layout.epoch_units) if floor >= 0 else -1,
            lookback_ticks=lookback_units,
            epoch_ns=layout.epoch_ms * NANOSECS_IN_MILLISECS,
            epoch_ticks=layout.epoch_units,
            tick_min=0,
            tick_max=layout.time_max,
            spread_start=bool(layout.start_spread),
        )

    def generate(self, count: int, **options: Any) -> SnowflakeBatch:
        """Up to ``count`` (1 .. 2**24) IDs; fewer, even 0, when the usable units are full (then wait
        :meth:`wait_ns`). Raises InvalidOptionError for a bad count or any option, TimeRangeError (a
        NotReadyError: 503) when the clock is before the layout's epoch or the time field would pass its maximum."""
        if options:
            raise InvalidOptionError(f"snowflake takes no options, got {', '.join(sorted(options))}")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= BATCH_COUNT_MAX:
            raise InvalidOptionError(f"count must be in 1..{BATCH_COUNT_MAX} for snowflake, got {count!r}")
        runs, _missing = self.take(count)
        return SnowflakeBatch(self.layout, self.worker_ids, runs)

    def lookback_tick(self, now_tick: int) -> int:
        """Never before the layout's epoch."""
        return max(0, now_tick - self._lookback_ticks)

    def start_slot(self) -> int:
        """A random first slot for a new unit, below :attr:`Layout.start_spread` (0 when the layout has no spread)."""
        spread = self._spread
        if not spread:
            return 0
        limit = 256 // spread * spread  # bytes at or above it are dropped: no modulo bias
        while True:
            if not self._offsets:
                self._offsets = self._random(OFFSET_DRAWS)
            byte, self._offsets = self._offsets[0], self._offsets[1:]
            if byte < limit:
                return byte % spread

    def check_time(self) -> None:
        """Raise TimeRangeError when the clock is before the layout's epoch or past the end of its time field."""
        now_ns = self._clock()
        now_unit = (now_ns - self._epoch_ns) // self._tick_ns
        if not 0 <= max(now_unit, self._tick) <= self.layout.time_max:
            raise self.out_of_range(now_ns)

    def out_of_range(self, now_ns: int) -> TimeRangeError:
        layout = self.layout
        if now_ns < self._epoch_ns and self._tick < 0:
            return TimeRangeError(
                f"snowflake layout {layout.name} has not begun: its epoch {_utc(layout.epoch_ms)} is ahead of this "
                "node's clock",
                min(TIME_RANGE_RETRY_MAX_S, -(-(self._epoch_ns - now_ns) // 1_000_000_000)),
            )
        return TimeRangeError(
            f"snowflake layout {layout.name} ran out of time: its {layout.time_bits}-bit time field of "
            f"{layout.unit_ms} ms units ended at {_utc(layout.timestamp_ms(layout.time_max + 1))}; choose a layout "
            "that lasts (IDMINT_SNOWFLAKE_LAYOUT)",
            TIME_RANGE_RETRY_MAX_S,
        )
