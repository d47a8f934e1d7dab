"""Eight-byte batches: column-wise (numpy) encoding of the hex and decimal forms, and the eight-byte generator.

Imports :mod:`app.schemes.eight_byte.codec` (layout and text forms); :mod:`app.schemes.eight_byte.scheme` (settings and
``SCHEME``) imports this module and builds the generator.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.errors import InvalidOptionError
from app.schemes import _text
from app.schemes._text import NEWLINE
from app.schemes.base import (
    SMALL_BATCH,
    Batch,
    Clock,
    scalar_lines,
)
from app.schemes.eight_byte.codec import (
    CLUSTER_ID_MAX,
    GENERATOR_ID_MAX,
    HEX_LEN,
    MODE_SHIFT,
    NANOSECS_IN_MILLISECS,
    PACKED_BYTES,
    SEQUENCE_BITS,
    SEQUENCE_MASK,
    SEQUENCE_SHIFT,
    SEQUENCE_VALUES,
    TEXT,
    TIMESTAMP_MS_MAX,
    TIMESTAMP_SHIFT,
    Mode,
    _low_bits,
    reverse_bits,
    reverse_bits_array,
)
from app.schemes.slots import CappedSlotGenerator

# --- batch encoding -----------------------------------------------------------------------------------------------


class EightByteBatch(Batch):
    """IDs issued by one :meth:`EightByteGenerator.generate` call, as runs of slots per millisecond.

    Slot ``k`` of a millisecond is sequence ``k % 64`` of the ``k // 64``-th generator ID held. Values are built
    column-wise with numpy (uint64) on first use.
    """

    def __init__(
        self,
        runs: Sequence[tuple[int, int, int]],
        low_bits: npt.NDArray[np.uint64],
        mode: Mode,
        low_bits_list: list[int] | None = None,
    ) -> None:
        """``runs``: (millisecond, first slot, count) in issue order; ``low_bits``: each held generator ID's
        generator-ID and cluster bits (``low_bits_list``: the same as ints, when the caller keeps them)."""
        self.runs = tuple(runs)
        self.mode = mode
        self.count = self.runs[0][2] if len(self.runs) == 1 else sum(run[2] for run in self.runs)
        self._low_bits = low_bits
        self._low_bits_list = low_bits_list
        self._array: npt.NDArray[np.uint64] | None = None

    def array(self) -> npt.NDArray[np.uint64]:
        """The packed IDs as a uint64 array, in issue order."""
        if self._array is None:
            self._array = self._build()
        return self._array

    def _build(self) -> npt.NDArray[np.uint64]:
        if not self.count:
            return np.empty(0, dtype=np.uint64)
        milliseconds = np.array([run[0] for run in self.runs], dtype=np.uint64)
        if self.mode is Mode.SPREAD:
            timestamp_bits = reverse_bits_array(milliseconds)
        else:
            timestamp_bits = milliseconds << np.uint64(TIMESTAMP_SHIFT)
        if len(self.runs) == 1:
            _, first, count = self.runs[0]
            slots = np.arange(first, first + count, dtype=np.uint64)
            head: npt.NDArray[np.uint64] | np.uint64 = timestamp_bits[0]
        else:
            firsts = np.array([run[1] for run in self.runs], dtype=np.int64)
            counts = np.array([run[2] for run in self.runs], dtype=np.int64)
            starts = np.cumsum(counts) - counts
            slots = (np.arange(self.count, dtype=np.int64) + np.repeat(firsts - starts, counts)).astype(np.uint64)
            head = np.repeat(timestamp_bits, counts)
        sequence = (slots & np.uint64(SEQUENCE_MASK)) << np.uint64(SEQUENCE_SHIFT)
        low = self._low_bits[slots >> np.uint64(SEQUENCE_BITS)]
        mode = np.uint64(int(self.mode) << MODE_SHIFT)
        values: npt.NDArray[np.uint64] = head | sequence | low | mode
        return values

    def encode(self, fmt: str) -> bytes:
        if self.count <= SMALL_BATCH:  # per-ID formatting beats the column-wise encoder's fixed cost
            return scalar_lines(TEXT.format, self.values(), fmt)
        fmt = TEXT.resolve(fmt)
        values = self.array()
        if fmt in ("decimal", "signed"):
            if not self.count:
                return b""
            column = values if fmt == "decimal" else values.view(np.int64)  # signed: Java's long of the 8 bytes
            return ("\n".join(map(str, column.tolist())) + "\n").encode("ascii")
        big_endian = values.astype(">u8").view(np.uint8).reshape(self.count, PACKED_BYTES)
        out = np.empty((self.count, HEX_LEN + 1), dtype=np.uint8)
        out[:, :HEX_LEN] = _text.hex_pairs()[big_endian].view(np.uint8).reshape(self.count, HEX_LEN)
        out[:, HEX_LEN] = NEWLINE
        return out.tobytes()

    def values(self) -> list[int]:
        if self._array is None and self.count <= SMALL_BATCH:
            return self._scalar_values()
        result: list[int] = self.array().tolist()
        return result

    def _scalar_values(self) -> list[int]:
        """:meth:`_build`'s values in plain ints, for a small batch (numpy's per-call cost was most of a single
        ID's answer)."""
        low_bits = self._low_bits.tolist() if self._low_bits_list is None else self._low_bits_list
        mode = int(self.mode) << MODE_SHIFT
        spread = self.mode is Mode.SPREAD
        return [
            (reverse_bits(millisecond) if spread else millisecond << TIMESTAMP_SHIFT)
            | mode
            | (slot & SEQUENCE_MASK) << SEQUENCE_SHIFT
            | low_bits[slot >> SEQUENCE_BITS]
            for millisecond, first, count in self.runs
            for slot in range(first, first + count)
        ]

    @property
    def high_water(self) -> int:
        return max((run[0] for run in self.runs), default=-1)


# --- generator ----------------------------------------------------------------------------------------------------


class EightByteGenerator(CappedSlotGenerator):
    """Issues eight-byte IDs for the generator IDs this node holds (docs/schemes/eight-byte.md "Generation").

    Each millisecond has ``64 * len(generator_ids)`` slots: for each held generator ID in order, sequence 0..63.
    :meth:`generate` hands out slots strictly after the last one it handed out, so no ID ever repeats:

    * clock moved on: start at slot 0 of the current millisecond (slots of the previous one are abandoned);
    * same millisecond, or the clock stepped back (a clock rollback, counted in :attr:`stats`): keep the last
      millisecond and continue its sequence (the reference resets the sequence and can repeat IDs; we do not);
    * slots of the usable milliseconds used up: return what was issued (a partial batch, possibly empty) and
      :meth:`wait_ns` tells how long until the next millisecond may be used. Never waits itself.

    ``lookback_ms``: slots in milliseconds ``now - lookback_ms .. now`` that come after the last slot handed out
    (never-used milliseconds, and the rest of the last one) may also be used, so a streaming caller that wakes up
    late still fills the format's cap of 64 IDs per ms per generator ID. Timestamps are never in the future (never
    above the clock, except to continue the last millisecond after a clock rollback) and never at or below a used
    slot. 0 (the default) = only the current millisecond, as the reference.

    ``floor`` (ms) is the restored high-water mark: no ID at or below it is issued. Both modes share this state;
    the mode only changes the encoding. Raises ValueError naming the rule for an empty, out-of-range (0..2047) or
    repeated generator ID, a cluster ID outside 0..15, a negative ``lookback_ms`` or a floor below -1.
    """

    def __init__(
        self,
        generator_ids: Sequence[int],
        cluster_id: int,
        *,
        clock: Clock = time.time_ns,
        floor: int = -1,
        lookback_ms: int = 0,
    ) -> None:
        ids = tuple(generator_ids)
        if not ids:
            raise ValueError("generator_ids must hold at least one generator ID")
        for generator_id in ids:
            if not 0 <= generator_id <= GENERATOR_ID_MAX:
                raise ValueError(f"generator ID must be in 0..{GENERATOR_ID_MAX}, got {generator_id}")
        repeated = sorted({generator_id for generator_id in ids if ids.count(generator_id) > 1})
        if repeated:
            raise ValueError(f"generator IDs must be distinct, got {', '.join(map(str, repeated))} more than once")
        if not 0 <= cluster_id <= CLUSTER_ID_MAX:
            raise ValueError(f"cluster_id must be in 0..{CLUSTER_ID_MAX}, got {cluster_id}")
        if not -1 <= floor <= TIMESTAMP_MS_MAX:
            raise ValueError(f"floor must be in -1..{TIMESTAMP_MS_MAX} milliseconds, got {floor}")
        if lookback_ms < 0:
            raise ValueError(f"lookback_ms must be >= 0, got {lookback_ms}")
        self.generator_ids = ids
        self.cluster_id = cluster_id
        self.lookback_ms = lookback_ms
        self._low_bits_list = [_low_bits(g, cluster_id) for g in ids]
        self._low_bits = np.array(self._low_bits_list, dtype=np.uint64)
        # The floor's millisecond counts as full.
        super().__init__(
            slots_per_tick=SEQUENCE_VALUES * len(ids),
            tick_ns=NANOSECS_IN_MILLISECS,
            clock=clock,
            floor=floor,
            start_tick=floor,
            lookback_ticks=lookback_ms,
            tick_max=TIMESTAMP_MS_MAX,
        )

    def out_of_range(self, now_ns: int) -> Exception:
        return OverflowError(f"eight-byte timestamp would pass {TIMESTAMP_MS_MAX} milliseconds")

    def generate(self, count: int, mode: object = Mode.SPREAD, **options: Any) -> EightByteBatch:
        """Up to ``count`` (>= 1) IDs in ``mode`` (a :class:`Mode`, as the scheme's option parser gives it, or its
        name: "spread", the default, or "time_sequential").

        May return fewer, even 0, when the usable milliseconds are full: call again after :meth:`wait_ns`.
        Raises InvalidOptionError for a bad count, mode or unknown option; OverflowError past 2109-05-15.
        """
        if options:
            raise InvalidOptionError(f"eight-byte takes only the mode option, got {', '.join(sorted(options))}")
        id_mode = mode if isinstance(mode, Mode) else Mode.from_option(mode)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidOptionError(f"count must be >= 1 for eight-byte, got {count}")
        runs, _missing = self.take(count)
        return EightByteBatch(runs, self._low_bits, id_mode, self._low_bits_list)
