"""Muid (Gink): 128-bit IDs made of a microsecond timestamp, a medallion and an offset.

Follows docs/schemes/muid.md and the Gink reference (``x5e/gink``, Python and TypeScript)::

    127                                 76 75                          32 31               0
    +-------------------------------------+------------------------------+-----------------+
    |       timestamp_us (52 bits)        |     medallion (44 bits)      | offset (32 bits)|
    +-------------------------------------+------------------------------+-----------------+
    canonical text:  TTTTTTTTTTTTT-MMMMMMMMMMM-OOOOOOOO   (13-11-8 uppercase hex, 34 characters)
    shorthands:      TTTTTTTTTTTTT-MMMMMMMMMMM             (offset 0)
                     TTTTTTTTTTTTT                         (medallion 0, offset 0)

* timestamp: microseconds since the Unix epoch, 0 .. 2**52 - 2; all-F is -1, Gink's "global" sentinel.
* medallion: the node identity, 0 .. 2**44 - 2; all-F is -1. New medallions are drawn uniformly from
  ``0x10000000000 .. 0x1FFFFFFFFFF`` (the document's decimal bound 2199023255552 is an erratum).
* offset: signed 32-bit two's complement; 0x80000000 .. 0xFFFFFFFF decode negative (all-F is -1).

Packed: ``timestamp << 76 | medallion << 32 | (offset & 0xFFFFFFFF)``, 16 bytes big-endian. Packed-byte order equals
canonical text order; it equals field-tuple order where no field is negative.

A request for n IDs is one Gink *bundle*: one timestamp strictly above the last one this medallion used
(``max(now_us, last + 1)``, never blocking), offsets 1..n; the bundle itself is the offset-0 Muid.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import Field

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import _text
from app.schemes import time_order as order
from app.schemes._text import NEWLINE
from app.schemes.base import (
    SMALL_BATCH,
    Batch,
    Clock,
    Generator,
    GeneratorStats,
    LayoutField,
    RandomSource,
    Scheme,
    SchemeSettings,
    csprng,
    grouped,
    hex_word,
    idmint_pool,
    scalar_lines,
)
from app.schemes.packed import PackedInt
from app.schemes.pool import IdentityPool

# --- layout -------------------------------------------------------------------------------------------------------

TIMESTAMP_BITS = 52
MEDALLION_BITS = 44
OFFSET_BITS = 32
PACKED_BITS = TIMESTAMP_BITS + MEDALLION_BITS + OFFSET_BITS
PACKED_BYTES = PACKED_BITS // 8

OFFSET_SHIFT = 0
MEDALLION_SHIFT = OFFSET_SHIFT + OFFSET_BITS
TIMESTAMP_SHIFT = MEDALLION_SHIFT + MEDALLION_BITS

TIMESTAMP_MASK = (1 << TIMESTAMP_BITS) - 1
MEDALLION_MASK = (1 << MEDALLION_BITS) - 1
OFFSET_MASK = (1 << OFFSET_BITS) - 1
PACKED_MAX = (1 << PACKED_BITS) - 1

SENTINEL = -1
"""The all-F value of the timestamp or medallion field (timestamp -1 = "global")."""
TIMESTAMP_US_MAX = TIMESTAMP_MASK - 1
"""Largest real timestamp, in microseconds (all-F is the sentinel)."""
MEDALLION_MAX = MEDALLION_MASK - 1
OFFSET_MIN = -(1 << (OFFSET_BITS - 1))
OFFSET_MAX = (1 << (OFFSET_BITS - 1)) - 1
OFFSET_SIGN_BIT = 1 << (OFFSET_BITS - 1)

NEW_MEDALLION_MIN = 0x10000000000
NEW_MEDALLION_MAX = 0x1FFFFFFFFFF
"""Range new medallions are drawn from, uniformly, with a CSPRNG."""

BUNDLE_COUNT_MAX = OFFSET_MAX
"""Most IDs one bundle (one generate call) may hold: offsets 1 .. 2**31 - 1."""

NANOSECS_IN_MICROSECS = 1_000

# --- text ---------------------------------------------------------------------------------------------------------

TIMESTAMP_HEX_LEN = TIMESTAMP_BITS // 4  # 13
MEDALLION_HEX_LEN = MEDALLION_BITS // 4  # 11
OFFSET_HEX_LEN = OFFSET_BITS // 4  # 8
SEPARATOR = "-"
SHORT_T_LEN = TIMESTAMP_HEX_LEN  # 13: "T"
SHORT_TM_LEN = TIMESTAMP_HEX_LEN + 1 + MEDALLION_HEX_LEN  # 25: "T-M"
CANONICAL_LEN = SHORT_TM_LEN + 1 + OFFSET_HEX_LEN  # 34: "T-M-O"
PREFIX_LEN = SHORT_TM_LEN + 1  # 26: "T-M-", shared by every ID of a bundle

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


# --- codec: fields <-> packed int ---------------------------------------------------------------------------------


PACKED = PackedInt("Muid", [("timestamp", TIMESTAMP_BITS), ("medallion", MEDALLION_BITS), ("offset", OFFSET_BITS)])
"""The layout's range check and bytes (the fields are signed: :func:`pack` and :func:`unpack` map -1)."""


def pack(timestamp_us: int, medallion: int, offset: int) -> int:
    """Pack the three fields into the 128-bit integer.

    ``timestamp_us`` in -1 .. 2**52 - 2 (-1 = "global"), ``medallion`` in -1 .. 2**44 - 2, ``offset`` in
    -2**31 .. 2**31 - 1. Raises ValueError naming the field whose range is broken. Inverse of :func:`unpack`.
    """
    if not SENTINEL <= timestamp_us <= TIMESTAMP_US_MAX:
        raise ValueError(f"Muid timestamp_us must be in -1..{TIMESTAMP_US_MAX}, got {timestamp_us}")
    if not SENTINEL <= medallion <= MEDALLION_MAX:
        raise ValueError(f"Muid medallion must be in -1..{MEDALLION_MAX}, got {medallion}")
    if not OFFSET_MIN <= offset <= OFFSET_MAX:
        raise ValueError(f"Muid offset must be in {OFFSET_MIN}..{OFFSET_MAX}, got {offset}")
    return (
        (timestamp_us & TIMESTAMP_MASK) << TIMESTAMP_SHIFT
        | (medallion & MEDALLION_MASK) << MEDALLION_SHIFT
        | (offset & OFFSET_MASK) << OFFSET_SHIFT
    )


def unpack(value: int) -> tuple[int, int, int]:
    """Split a packed Muid into ``(timestamp_us, medallion, offset)``; all-F fields decode as -1.

    Raises ValueError unless ``0 <= value < 2**128``. Inverse of :func:`pack`.
    """
    PACKED.check(value)
    timestamp = (value >> TIMESTAMP_SHIFT) & TIMESTAMP_MASK
    medallion = (value >> MEDALLION_SHIFT) & MEDALLION_MASK
    offset = (value >> OFFSET_SHIFT) & OFFSET_MASK
    return (
        SENTINEL if timestamp == TIMESTAMP_MASK else timestamp,
        SENTINEL if medallion == MEDALLION_MASK else medallion,
        offset - (1 << OFFSET_BITS) if offset & OFFSET_SIGN_BIT else offset,
    )


# --- codec: packed int <-> bytes ----------------------------------------------------------------------------------


to_bytes = PACKED.to_bytes
"""The 16 big-endian bytes of a packed Muid."""
from_bytes = PACKED.from_bytes
"""The packed Muid in 16 big-endian bytes; ValueError for any other length."""


# --- codec: packed int <-> text -----------------------------------------------------------------------------------


def encode_canonical(value: int) -> str:
    """``TTTTTTTTTTTTT-MMMMMMMMMMM-OOOOOOOO``: uppercase 13-11-8 hex, 34 characters."""
    PACKED.check(value)
    digits = f"{value:032X}"
    t_end = TIMESTAMP_HEX_LEN
    m_end = t_end + MEDALLION_HEX_LEN
    return f"{digits[:t_end]}{SEPARATOR}{digits[t_end:m_end]}{SEPARATOR}{digits[m_end:]}"


def decode_canonical(text: str) -> int:
    """Parse ``T-M-O`` (34 chars), ``T-M`` (25, offset 0) or ``T`` (13, medallion and offset 0), any case.

    Exact widths and hex digits only; returns the packed integer. Raises InvalidIdError naming the rule broken.
    """
    length = len(text)
    if length not in (SHORT_T_LEN, SHORT_TM_LEN, CANONICAL_LEN):
        raise InvalidIdError(
            f"Muid must be {CANONICAL_LEN} (T-M-O), {SHORT_TM_LEN} (T-M) or {SHORT_T_LEN} (T) characters long, "
            f"got {length}"
        )
    for position in (SHORT_T_LEN, SHORT_TM_LEN):
        if position < length and text[position] != SEPARATOR:
            raise InvalidIdError(
                f"Muid must be 13-11-8 hex digits separated by '-': expected '-' at position {position}, "
                f"got {text[position]!r}"
            )
    for position, char in enumerate(text):
        if position in (SHORT_T_LEN, SHORT_TM_LEN):
            continue
        if char not in _HEX_DIGITS:
            raise InvalidIdError(
                f"Muid must contain only hex digits 0-9 A-F besides the '-' separators, "
                f"got {char!r} at position {position}"
            )
    timestamp = int(text[:SHORT_T_LEN], 16)
    medallion = int(text[SHORT_T_LEN + 1 : SHORT_TM_LEN], 16) if length > SHORT_T_LEN else 0
    offset = int(text[SHORT_TM_LEN + 1 :], 16) if length > SHORT_TM_LEN else 0
    return timestamp << TIMESTAMP_SHIFT | medallion << MEDALLION_SHIFT | offset << OFFSET_SHIFT


# --- scheme -------------------------------------------------------------------------------------------------------


class MuidSettings(SchemeSettings):
    """Muid settings (joined into :class:`app.settings.Settings`; env ``IDMINT_MUID_*``)."""

    muid_medallion: int | None = Field(
        None,
        ge=NEW_MEDALLION_MIN,
        le=NEW_MEDALLION_MAX,
        description="Static Muid medallion (0x10000000000..0x1FFFFFFFFFF); unset = draw and claim one.",
    )


class MuidScheme(Scheme):
    """Muid: metadata, strict parser, canonical text, field decoding (docs/schemes/muid.md)."""

    name = "muid"
    packed_bytes = PACKED_BYTES
    formats = ("canonical",)
    rising_formats = {"canonical": {}}
    identity_fields = ("medallion",)
    identity_rising_formats = {"canonical": {}}
    """Its only form rises: one bundle's offsets 1..n, each bundle's timestamp above the last (fixed-width hex)."""
    text_width = {"canonical": CANONICAL_LEN}
    timestamp_digits = 6
    native_unit_ns = NANOSECS_IN_MICROSECS
    timestamp_native_max = TIMESTAMP_US_MAX
    layout = (
        LayoutField("timestamp_us", "127..76", 'microseconds since the Unix epoch; all-F = -1 ("global")'),
        LayoutField("medallion", "75..32", "node identity; new ones uniform in 0x10000000000..0x1FFFFFFFFFF"),
        LayoutField("offset", "31..0", "position in the bundle; signed 32-bit two's complement (bundle = 0)"),
    )
    uniqueness_note = (
        "a medallion of 40 random bits per node (leased within a fleet, not sliced by regions): two fleets share one "
        "with odds of about 1 in 2**40 per pair of nodes"
    )
    reference = "Gink Muid (x5e/gink, docs/muid.md); docs/schemes/muid.md"

    def parse(self, text: str) -> int:
        return decode_canonical(text)

    def format(self, value: int, fmt: str) -> str:
        self.resolve_format(fmt)
        return encode_canonical(value)

    def fields(self, value: int) -> dict[str, Any]:
        """``{"timestamp_us", "medallion", "offset"}`` as ints; -1 for the all-F sentinels."""
        timestamp_us, medallion, offset = unpack(value)
        return {"timestamp_us": timestamp_us, "medallion": medallion, "offset": offset}

    def time_order(self, options: Mapping[str, str]) -> order.TimeOrder:
        """Muids sort by their µs timestamp (the top 52 bits; the all-F "global" sentinel after every time) in uuid,
        bytea (16 bytes) and text (canonical) columns. Takes no options."""
        return order.sixteen_bytes(
            TIMESTAMP_SHIFT, NANOSECS_IN_MICROSECS, TIMESTAMP_US_MAX, "canonical", encode_canonical
        )

    def timestamp_ns(self, value: int) -> int | None:
        """ns since the epoch; None for the -1 ("global") timestamp."""
        timestamp_us = unpack(value)[0]
        return None if timestamp_us == SENTINEL else timestamp_us * NANOSECS_IN_MICROSECS

    title = "Muid (Gink)"
    example = "5D5EAC793E61F-1BFC71B112D-0000000B"
    token_pattern = r"[0-9A-Fa-f]{12,14}(?:-[0-9A-Fa-f]{3,13}){1,2}"  # T-M-O / T-M (and near misses)
    settings_model = MuidSettings
    captions = {
        "timestamp_us": "Microseconds since 1970-01-01 UTC: when the bundle was made (52 bits).",
        "medallion": "The node that made the ID: 44 bits drawn at random and held under a lease.",
        "offset": "Position in the bundle of IDs issued together by one request (signed 32 bits; 0 names the bundle).",
    }

    def identity_pool(self, settings: MuidSettings) -> IdentityPool:
        """Medallions drawn at random from 0x10000000000..0x1FFFFFFFFFF, keys ``idmint/muid/<11 HEX>``; not sliced
        by regions (uniqueness rests on the random draw)."""
        return idmint_pool(
            self.name,
            "medallion",
            (NEW_MEDALLION_MIN, NEW_MEDALLION_MAX),
            settings,
            sliced=False,
            static_setting="IDMINT_MUID_MEDALLION",
            key_format="{:011X}",
            draw="random",
            static=settings.muid_medallion,
        )

    def new_generator(
        self, settings: MuidSettings, identities: list[int], floor: int, clock: Clock, random: RandomSource = csprng
    ) -> Generator:
        return MuidGenerator(identities[0], clock=clock, floor=floor)

    def words(self, fields: dict[str, Any]) -> dict[str, str]:
        ts, medallion, offset = fields["timestamp_us"], fields["medallion"], fields["offset"]
        return {
            "timestamp_us": (
                "global: no time (the all-F sentinel)" if ts == SENTINEL else f"{grouped(ts)} µs since the Unix epoch"
            ),
            "medallion": (
                "every medallion (the all-F sentinel)"
                if medallion == SENTINEL
                else f"medallion {hex_word(medallion, MEDALLION_HEX_LEN)}"
            ),
            "offset": (
                "offset 0: the bundle itself"
                if offset == 0
                else f"ID number {grouped(offset)} of its bundle"
                if offset > 0
                else f"offset {offset} (negative)"
            ),
        }

    def summary(self, fields: dict[str, Any]) -> str:
        words = self.words(fields)
        return f"{words['medallion']}, {words['offset']}"


SCHEME = MuidScheme()


# --- batch encoding -----------------------------------------------------------------------------------------------

CHUNK_ROWS = 1 << 16
"""Offsets 1..65536 share their low four hex digits with every later run of 65536 offsets."""
_TEMPLATE_SLACK = 8
"""A generator's cached rows are used when the request needs at least 1/8 of them."""
_COLUMN_FILLS_MAX = 8
"""Past this many changed prefix columns one broadcast write of the whole prefix is cheaper."""

_offset_rows_table: npt.NDArray[np.uint8] | None = None


def _hex4() -> npt.NDArray[np.uint8]:
    """(65536, 4) uint8: the 4 uppercase hex digits of every 16-bit value (the shared table, as rows)."""
    return _text.hex4_table(upper=True).view(np.uint8).reshape(-1, 4)


def _offset_rows() -> npt.NDArray[np.uint8]:
    """(65536, 9) uint8: ``OOOOOOOO\\n`` for offsets 1..65536 (built once, lazily)."""
    global _offset_rows_table
    if _offset_rows_table is None:
        table = _hex4()
        offsets = np.arange(1, CHUNK_ROWS + 1, dtype=np.uint32)
        rows = np.empty((CHUNK_ROWS, OFFSET_HEX_LEN + 1), dtype=np.uint8)
        rows[:, 0:4] = table[offsets >> 16]
        rows[:, 4:8] = table[offsets & 0xFFFF]
        rows[:, OFFSET_HEX_LEN] = NEWLINE
        _offset_rows_table = rows
    return _offset_rows_table


def _first_rows(prefix: bytes, count: int) -> npt.NDArray[np.uint8]:
    """(count, 35) uint8, count <= 65536: ``prefix`` + ``OOOOOOOO\\n`` for offsets 1..count."""
    rows = np.empty((count, CANONICAL_LEN + 1), dtype=np.uint8)
    rows[:, :PREFIX_LEN] = np.frombuffer(prefix, dtype=np.uint8)
    rows[:, PREFIX_LEN:] = _offset_rows()[:count]
    return rows


def _render(first: npt.NDArray[np.uint8], count: int) -> bytes:
    """Text of offsets 1..count given ``first``, the rows of offsets 1..min(count, 65536) (or more).

    Rows past 65536 repeat the first 65536 with the high four offset digits rewritten per run (column fills).
    """
    if count <= CHUNK_ROWS:
        return first[:count].tobytes()
    table = _hex4()
    high = slice(PREFIX_LEN, PREFIX_LEN + 4)
    out = np.empty((count, CANONICAL_LEN + 1), dtype=np.uint8)
    for run, start in enumerate(range(0, count, CHUNK_ROWS)):
        block = out[start : start + CHUNK_ROWS]
        rows = len(block)
        block[:] = first[:rows]
        if run:
            # Offset run * 65536 + i + 1: high digits = run, except the run's last row (offset (run + 1) * 65536).
            for column in range(4):
                block[: CHUNK_ROWS - 1, PREFIX_LEN + column] = table[run, column]
            if rows == CHUNK_ROWS:
                block[CHUNK_ROWS - 1, high] = table[run + 1]
    return out.tobytes()


class _BundleText:
    """A generator's reusable text rows ``T-M-OOOOOOOO\\n`` for offsets 1..k (k up to 65536).

    Consecutive bundles of one medallion differ only in the low digits of their timestamp, so encoding a bundle
    rewrites just the prefix columns that changed (one fast strided fill each) and copies rows out. Guarded by a
    lock, so batches of one generator may be encoded from several threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: npt.NDArray[np.uint8] | None = None
        self._prefix = b""

    def render(self, prefix: bytes, count: int) -> bytes:
        """The text of offsets 1..count after ``prefix`` (the 26-character ``T-M-``)."""
        need = min(count, CHUNK_ROWS)
        with self._lock:
            rows = self._rows
            if rows is None or len(rows) < need:
                rows = self._rows = _first_rows(prefix, min(CHUNK_ROWS, 1 << (need - 1).bit_length()))
            elif need * _TEMPLATE_SLACK < len(rows):
                return _render(_first_rows(prefix, need), count)
            elif prefix != self._prefix:
                changed = [i for i in range(PREFIX_LEN) if prefix[i] != self._prefix[i]]
                if len(changed) > _COLUMN_FILLS_MAX:
                    rows[:, :PREFIX_LEN] = np.frombuffer(prefix, dtype=np.uint8)
                else:
                    for column in changed:
                        rows[:, column] = prefix[column]
            self._prefix = prefix
            return _render(rows, count)


class MuidBatch(Batch):
    """One Gink bundle: ``count`` Muids sharing timestamp and medallion, offsets 1..count."""

    def __init__(self, timestamp_us: int, medallion: int, count: int, text: _BundleText | None = None) -> None:
        self.timestamp_us = timestamp_us
        self.medallion = medallion
        self.count = count
        self._text = text

    @property
    def bundle(self) -> int:
        """The packed offset-0 Muid naming the bundle itself."""
        return pack(self.timestamp_us, self.medallion, 0)

    def encode(self, fmt: str) -> bytes:
        if self.count <= SMALL_BATCH:  # per-ID formatting beats the column-wise encoder's fixed cost
            return scalar_lines(SCHEME.format, self.values(), fmt)
        SCHEME.resolve_format(fmt)
        prefix = encode_canonical(self.bundle)[:PREFIX_LEN].encode("ascii")
        if self._text is not None:
            return self._text.render(prefix, self.count)
        return _render(_first_rows(prefix, min(self.count, CHUNK_ROWS)), self.count)

    def values(self) -> list[int]:
        base = self.bundle
        return [base | offset for offset in range(1, self.count + 1)]

    @property
    def high_water(self) -> int:
        return self.timestamp_us if self.count else -1

    def extra(self, fmt: str) -> dict[str, Any]:
        """``{"bundle": "<canonical text of the offset-0 Muid>"}``."""
        SCHEME.resolve_format(fmt)
        return {"bundle": encode_canonical(self.bundle)}


# --- generator ----------------------------------------------------------------------------------------------------


class MuidGenerator(Generator):
    """Issues Gink bundles for one medallion (docs/schemes/muid.md "Generation").

    Each :meth:`generate` call is one bundle whose timestamp is ``max(now_us, last + 1)``, ``last`` being the
    previous bundle's timestamp (or ``floor``, in µs, after a restart): strictly increasing, never blocking, so a
    clock that steps back or a floor above the clock only pushes timestamps ahead of the clock. A clock reading
    in an earlier µs than the highest earlier reading counts as a clock rollback in :attr:`stats` (timestamps
    running ahead of the clock because requests come faster than one per µs, or because of the floor, do not).
    Raises ValueError unless ``medallion`` is in 0x10000000000..0x1FFFFFFFFFF and ``floor >= -1``.
    """

    def __init__(self, medallion: int, *, clock: Clock = time.time_ns, floor: int = -1) -> None:
        if not NEW_MEDALLION_MIN <= medallion <= NEW_MEDALLION_MAX:
            raise ValueError(f"medallion must be in {NEW_MEDALLION_MIN:#x}..{NEW_MEDALLION_MAX:#x}, got {medallion:#x}")
        if not SENTINEL <= floor <= TIMESTAMP_US_MAX:
            raise ValueError(f"floor must be in -1..{TIMESTAMP_US_MAX} microseconds, got {floor}")
        self.medallion = medallion
        self._clock = clock
        self._floor = floor
        self._last_issued: int | None = None
        self._text = _BundleText()
        self.stats = GeneratorStats()

    def generate(self, count: int, **options: Any) -> MuidBatch:
        """One bundle of ``count`` Muids (1 .. 2**31 - 1), offsets 1..count; never partial, never blocks.

        Raises InvalidOptionError for a count out of range or any option (Muid has none), OverflowError past
        the last representable timestamp (year 2112).
        """
        if options:
            raise InvalidOptionError(f"muid takes no options, got {', '.join(sorted(options))}")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= BUNDLE_COUNT_MAX:
            raise InvalidOptionError(f"count must be in 1..{BUNDLE_COUNT_MAX} for muid, got {count}")
        now_ns = self._clock()
        now_us = now_ns // NANOSECS_IN_MICROSECS
        last = self.high_water
        self.stats.observe_clock(now_ns, NANOSECS_IN_MICROSECS)
        timestamp_us = max(now_us, last + 1)
        if timestamp_us > TIMESTAMP_US_MAX:
            raise OverflowError(f"Muid timestamp would pass {TIMESTAMP_US_MAX} microseconds")
        self._last_issued = timestamp_us
        return MuidBatch(timestamp_us, self.medallion, count, self._text)

    @property
    def high_water(self) -> int:
        return self._floor if self._last_issued is None else max(self._floor, self._last_issued)
