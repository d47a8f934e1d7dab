"""Column-wise (numpy) text encoding of KSUIDs: a general base62 encoder and the batch fast path.

Two encoders, checked against :func:`app.schemes.ksuid.encode_base62` by the tests:

* :func:`base62_rows` takes any KSUIDs as five 32-bit limbs per ID (``(5, n)`` uint64 columns, most significant
  first) and runs long division by 62**5 across the whole column: each pass divides every limb, top to bottom,
  carrying the remainder (``rem << 32 | limb`` < 2**62 fits a uint64) and yields 5 base62 digits; 6 passes give
  the 27 digits. Limbs known to be zero after a pass (the quotient shrinks by log2(62**5) ~ 29.8 bits) are skipped.
* :class:`KsuidBatch` holds the consecutive IDs ``first .. first + count - 1`` that one generate call issues and
  uses that: split into runs of IDs sharing ``value // 62**3``, every ID of a run has the same first 24 base62
  characters (its run's head, encoded once with Python ints and laid down by memcpy doubling) and its last 3
  characters are the base62 digits of ``value % 62**3``, a contiguous slice of a 62**3-entry table (3 characters
  and the newline: one 4-byte write per row). A 65,536-ID batch is one or two runs. Hex works the same way with
  runs of 65,536 IDs and a 4-hex-digit table. Heads make carries (payload into timestamp included) exact.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.errors import InvalidOptionError
from app.schemes import _text
from app.schemes.base import (
    Batch,
    Clock,
    Generator,
    GeneratorStats,
    RandomSource,
    csprng,
)
from app.schemes.ksuid.codec import (
    BASE62_ALPHABET,
    BASE62_LEN,
    BASE62_RADIX,
    BATCH_COUNT_MAX,
    EPOCH_S,
    HEX_LEN,
    NANOSECS_IN_SECS,
    PACKED_BITS,
    PACKED_BYTES,
    PACKED_MAX,
    PAYLOAD_BYTES,
    TEXT,
    TIMESTAMP_S_MAX,
    TIMESTAMP_S_MIN,
    TIMESTAMP_SHIFT,
    encode_base62,
    encode_hex,
    pack,
)

NEWLINE = 10
LIMB_BITS = 32
LIMBS = PACKED_BITS // LIMB_BITS  # 5
LIMB_MASK = (1 << LIMB_BITS) - 1
CHUNK_DIGITS = 5
CHUNK = BASE62_RADIX**CHUNK_DIGITS
"""62**5 = 916,132,832 < 2**30: one long-division pass yields 5 base62 digits."""
CHUNKS = -(-BASE62_LEN // CHUNK_DIGITS)  # 6 passes -> 30 digits, the top 3 always zero
PAIR_RADIX = BASE62_RADIX**2  # 3844: one table entry = 2 characters
TAIL_DIGITS = 3
"""Base62 digits a batch row takes from a table; the 24 above are its run's head (memcpy)."""
TAIL_RADIX = BASE62_RADIX**TAIL_DIGITS  # 238,328 table entries of 4 bytes
HEX4_DIGITS = 4
HEX4_BITS = 16
HEX_TAIL_RADIX = 1 << HEX4_BITS
SCALAR_COUNT_MAX = 8
"""Batches of at most this many IDs are encoded per ID with Python ints (faster than setting up numpy)."""


@functools.cache
def _alphabet() -> npt.NDArray[np.uint8]:
    return np.frombuffer(BASE62_ALPHABET.encode("ascii"), dtype=np.uint8)


@functools.cache
def _tails(pad: int = NEWLINE) -> npt.NDArray[np.uint32]:
    """(62**3,) little-endian uint32: bytes 0..2 = the three base62 digits of the index, byte 3 = ``pad`` (a
    newline, or a JSON member's closing quote)."""
    alphabet = _alphabet()
    index = np.arange(TAIL_RADIX)
    table = np.full((TAIL_RADIX, 4), pad, dtype=np.uint8)
    for digit in range(TAIL_DIGITS):
        table[:, digit] = alphabet[index // BASE62_RADIX ** (TAIL_DIGITS - 1 - digit) % BASE62_RADIX]
    table.flags.writeable = False
    return table.view("<u4").reshape(TAIL_RADIX)


@functools.cache
def _pairs() -> npt.NDArray[np.uint16]:
    """(3844,) little-endian uint16: bytes 0, 1 = the two base62 digits of the index (most significant first)."""
    alphabet = _alphabet()
    index = np.arange(PAIR_RADIX)
    table = np.empty((PAIR_RADIX, 2), dtype=np.uint8)
    table[:, 0] = alphabet[index // BASE62_RADIX]
    table[:, 1] = alphabet[index % BASE62_RADIX]
    table.flags.writeable = False
    return table.view("<u2").reshape(PAIR_RADIX)


# --- general encoder: any KSUIDs --------------------------------------------------------------------------------


def limbs(values: Sequence[int]) -> npt.NDArray[np.uint64]:
    """``(5, n)`` uint64: row k holds bits ``159 - 32k .. 128 - 32k`` of each packed KSUID (ValueError if out of
    range)."""
    data = b"".join(value.to_bytes(PACKED_BYTES, "big") for value in values)
    return np.frombuffer(data, dtype=">u4").reshape(len(values), LIMBS).T.astype(np.uint64)


def base62_rows(columns: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint8]:
    """The base62 text of KSUIDs given as ``(5, n)`` limbs (see :func:`limbs`): ``(n, 28)`` uint8 rows, each the
    27 characters and a newline. Column-wise long division by 62**5; ``columns`` is not modified."""
    count = columns.shape[1]
    rows = np.empty((count, BASE62_LEN + 1), dtype=np.uint8)
    rows[:, BASE62_LEN] = NEWLINE
    if not count:
        return rows
    work = columns.copy()
    chunk = np.uint64(CHUNK)
    shift = np.uint64(LIMB_BITS)
    alphabet, pairs = _alphabet(), _pairs()
    for done in range(CHUNKS):
        # After `done` passes the value is below 2**160 / 62**(5 * done): its top limbs are zero, skip them.
        bits_left = PACKED_BITS - int(done * CHUNK_DIGITS * np.log2(BASE62_RADIX))
        start = max(0, LIMBS - -(-bits_left // LIMB_BITS))
        remainder = np.zeros(count, dtype=np.uint64)
        for k in range(start, LIMBS):
            current = (remainder << shift) | work[k]
            work[k] = current // chunk  # floor division by a scalar is much faster than np.divmod
            remainder = current - work[k] * chunk
        end = BASE62_LEN - done * CHUNK_DIGITS  # digits end .. end - 5 (exclusive) from the right
        if done == CHUNKS - 1:  # the last pass holds only the top 2 digits (the value is below 62**2 by now)
            _text.char_view(rows, 0, "<u2")[:] = pairs[remainder]
            continue
        top = remainder // np.uint64(PAIR_RADIX * PAIR_RADIX)
        rest = remainder - top * np.uint64(PAIR_RADIX * PAIR_RADIX)
        high = rest // np.uint64(PAIR_RADIX)
        low = rest - high * np.uint64(PAIR_RADIX)
        rows[:, end - CHUNK_DIGITS] = alphabet[top]
        _text.char_view(rows, end - 4, "<u2")[:] = pairs[high]
        _text.char_view(rows, end - 2, "<u2")[:] = pairs[low]
    return rows


def hex_rows(columns: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint8]:
    """The 40-digit lowercase hex text of KSUIDs given as ``(5, n)`` limbs: ``(n, 41)`` uint8 rows."""
    count = columns.shape[1]
    rows = np.empty((count, HEX_LEN + 1), dtype=np.uint8)
    rows[:, HEX_LEN] = NEWLINE
    if not count:
        return rows
    hex4 = _text.hex4_table()
    mask = np.uint64((1 << HEX4_BITS) - 1)
    for k in range(LIMBS):
        column = k * 2 * HEX4_DIGITS
        _text.char_view(rows, column)[:] = hex4[columns[k] >> np.uint64(HEX4_BITS)]
        _text.char_view(rows, column + HEX4_DIGITS)[:] = hex4[columns[k] & mask]
    return rows


# --- the batch: consecutive KSUIDs ------------------------------------------------------------------------------


class KsuidBatch(Batch):
    """The KSUIDs ``first .. first + count - 1`` issued by one :meth:`KsuidGenerator.generate` call (count may be 0
    before the clock passes the floor). Text is built column-wise on :meth:`encode`."""

    def __init__(self, first: int, count: int) -> None:
        self.first = first
        self.count = count

    def values(self) -> list[int]:
        return list(range(self.first, self.first + self.count))

    @property
    def high_water(self) -> int:
        """The Unix second of the last ID (-1 if empty)."""
        if not self.count:
            return -1
        return ((self.first + self.count - 1) >> TIMESTAMP_SHIFT) + EPOCH_S

    def encode(self, fmt: str) -> bytes:
        """The batch as ``base62`` or ``hex`` lines; InvalidOptionError for another format."""
        fmt = TEXT.resolve(fmt)
        if not self.count:
            return b""
        if self.count <= SCALAR_COUNT_MAX:
            encoder = encode_hex if fmt == "hex" else encode_base62
            if self.count == 1:
                return (encoder(self.first) + "\n").encode("ascii")
            return "".join([encoder(value) + "\n" for value in self.values()]).encode("ascii")
        if fmt == "hex":
            return self._hex()
        return self._base62()

    def encode_lines(self, fmt: str) -> bytes | memoryview:
        """:meth:`encode`'s text over a fresh buffer (``bytes`` for a batch small enough for the scalar path): the
        rows are written where the caller gets them, with no copy to ``bytes``."""
        fmt = TEXT.resolve(fmt)
        if self.count <= SCALAR_COUNT_MAX:
            return self.encode(fmt)
        rows = self._hex_rows(fresh=True) if fmt == "hex" else self._base62_rows(fresh=True)
        return rows.reshape(-1).data

    def _runs(self, radix: int) -> list[tuple[int, int, int]]:
        """``(head, low, count)`` runs of the batch: ``count`` consecutive IDs ``head + low ..`` whose value divided
        by ``radix`` is the same (``head`` = that quotient * radix, ``low`` < radix)."""
        runs = []
        done = 0
        while done < self.count:
            value = self.first + done
            low = value % radix
            taken = min(self.count - done, radix - low)
            runs.append((value - low, low, taken))
            done += taken
        return runs

    def json_members(self, fmt: str) -> memoryview | None:
        """The batch as JSON array members ``"ID1",...,"IDn"`` (see :meth:`Batch.json_members`): rows ``"ID",``
        from the same templates and tables as :meth:`encode`, the text one byte in. None for an empty batch or one
        small enough for the scalar path; InvalidOptionError for another format."""
        fmt = TEXT.resolve(fmt)
        if self.count <= SCALAR_COUNT_MAX:
            return None
        rows = self._hex_rows(True) if fmt == "hex" else self._base62_rows(True)
        return rows.reshape(-1).data[:-1]  # the last row's comma dropped

    def _rows(
        self,
        radix: int,
        encoder: Callable[[int], str],
        column: int,
        table: npt.NDArray[np.uint32],
        members: bool,
        fresh: bool = False,
    ) -> npt.NDArray[np.uint8]:
        """One row per ID: its text and a newline (a per-thread scratch array: callers copy it out; with ``fresh``
        over a fresh ``bytearray``), or with ``members`` its text as a JSON array member and comma, ``"ID",`` (a
        fresh array)."""
        runs = self._runs(radix)
        if members:
            rows = _text.json_rows([(encoder(head).encode("ascii"), n) for head, _, n in runs])
            column += 1  # byte 0 holds the opening quote
        else:
            lines = [((encoder(head) + "\n").encode("ascii"), n) for head, _, n in runs]
            rows = _text.fresh_rows(lines)[1] if fresh else _text.text_rows(lines, key="ksuid")
        _text.write_runs(rows, column, [(table, low, n) for _, low, n in runs])
        return rows

    def _base62_rows(self, members: bool = False, fresh: bool = False) -> npt.NDArray[np.uint8]:
        pad = _text.QUOTE if members else NEWLINE  # the table's 4th byte lands after the text
        return self._rows(TAIL_RADIX, encode_base62, BASE62_LEN - TAIL_DIGITS, _tails(pad), members, fresh)

    def _hex_rows(self, members: bool = False, fresh: bool = False) -> npt.NDArray[np.uint8]:
        return self._rows(HEX_TAIL_RADIX, encode_hex, HEX_LEN - HEX4_DIGITS, _text.hex4_table(), members, fresh)

    def _base62(self) -> bytes:
        return self._base62_rows().tobytes()

    def _hex(self) -> bytes:
        return self._hex_rows().tobytes()


# --- generator ----------------------------------------------------------------------------------------------------


class KsuidGenerator(Generator):
    """Issues monotonic KSUIDs (docs/schemes/ksuid.md "Generation").

    Per batch the clock is read (``now``, Unix seconds). ``now`` past the last second used: the first ID is
    ``(now, 16 fresh random bytes)``. Otherwise (same second, or the clock stepped back: a clock rollback, counted
    in :attr:`stats`) the first ID is the last packed value + 1. Within a batch each ID is the previous + 1; a payload
    passing 2**128 - 1 carries into the timestamp (counted as ``sequence_exhausted``), so issuing never fails
    for it and the IDs stay strictly increasing.

    ``floor`` (Unix seconds, the restored high-water mark): no ID is issued at or below it. While the clock is at
    or below the floor and nothing was issued yet, :meth:`generate` returns an empty batch and :meth:`wait_ns`
    says how long until the next second. ValueError for a floor out of range; OverflowError when the clock is
    before the KSUID epoch or the timestamp would pass 2150-06-19T23:21:35Z.
    """

    def __init__(self, *, clock: Clock = time.time_ns, random: RandomSource = csprng, floor: int = -1) -> None:
        if not (floor == -1 or TIMESTAMP_S_MIN - 1 <= floor <= TIMESTAMP_S_MAX):
            raise ValueError(f"floor must be -1 or in {TIMESTAMP_S_MIN - 1}..{TIMESTAMP_S_MAX} seconds, got {floor}")
        self._clock = clock
        self._random = random
        self._floor = floor
        self._last: int | None = None
        """The last packed value issued (None before the first)."""
        self.stats = GeneratorStats()

    def _last_second(self) -> int:
        if self._last is None:
            return self._floor
        return max(self._floor, (self._last >> TIMESTAMP_SHIFT) + EPOCH_S)

    def generate(self, count: int, **options: Any) -> KsuidBatch:
        """Issue ``count`` (1 .. 2**24) consecutive KSUIDs as a :class:`KsuidBatch`.

        Returns an empty batch only while the clock is at or below the floor before the first ID. Raises
        InvalidOptionError for a bad count or any option (ksuid has none), OverflowError past the last second.
        """
        if options:
            raise InvalidOptionError(f"ksuid takes no options, got {', '.join(sorted(options))}")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= BATCH_COUNT_MAX:
            raise InvalidOptionError(f"count must be in 1..{BATCH_COUNT_MAX} for ksuid, got {count!r}")
        now_ns = self._clock()
        self.stats.observe_clock(now_ns, NANOSECS_IN_SECS)
        now_s = now_ns // NANOSECS_IN_SECS
        if now_s > self._last_second():
            if now_s < TIMESTAMP_S_MIN:
                raise OverflowError(f"the clock ({now_s} s) is before the KSUID epoch ({EPOCH_S} s)")
            if now_s > TIMESTAMP_S_MAX:
                raise OverflowError(f"KSUID timestamp would pass {TIMESTAMP_S_MAX} s")
            drawn = self._random(PAYLOAD_BYTES)
            if len(drawn) != PAYLOAD_BYTES:
                raise ValueError(f"random returned {len(drawn)} bytes, asked for {PAYLOAD_BYTES}")
            first = pack(now_s, int.from_bytes(drawn, "big"))
            carried = False
        elif self._last is not None:
            first = self._last + 1
            carried = first >> TIMESTAMP_SHIFT != self._last >> TIMESTAMP_SHIFT
        else:
            return KsuidBatch(0, 0)  # the clock is at or below the floor: wait_ns() says how long
        last = first + count - 1
        if last > PACKED_MAX:
            raise OverflowError(f"KSUID timestamp would pass {TIMESTAMP_S_MAX} s")
        if carried or last >> TIMESTAMP_SHIFT != first >> TIMESTAMP_SHIFT:
            self.stats.sequence_exhausted += 1  # the payload ran past 2**128 - 1 and advanced the second
        self._last = last
        return KsuidBatch(first, count)

    def wait_ns(self) -> int:
        """0 once an ID was issued (the payload never runs out); before that, ns until the clock passes the floor."""
        if self._last is not None:
            return 0
        return max(0, (self._floor + 1) * NANOSECS_IN_SECS - self._clock())

    @property
    def high_water(self) -> int:
        """The Unix second of the last ID issued (or the floor)."""
        return self._last_second()
