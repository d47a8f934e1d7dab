"""ULID: a 48-bit Unix-millisecond timestamp and 80 bits of randomness, written in Crockford base32.

Follows the ULID specification (``github.com/ulid/spec``), its monotonic mode, python-ulid for the text forms, and
docs/schemes/ulid.md::

    127                                   80 79                                                       0
    +---------------------------------------+---------------------------------------------------------+
    |        timestamp_ms (48 bits)         |                 randomness (80 bits)                    |
    +---------------------------------------+---------------------------------------------------------+
    ulid (canonical): 26 uppercase Crockford base32 characters (2 zero bits prepended), e.g.
                      01ARZ3NDEKTSV4RRFFQ69G5FAV; characters 0..9 the timestamp, 10..25 the randomness
    uuid:             the same 128 bits as 8-4-4-4-12 lowercase hex (python-ulid's ``to_uuid()``)
    hex:              32 lowercase hex digits

* timestamp_ms: milliseconds since the Unix epoch, 0 .. 2**48 - 1 (year 10889).
* randomness: 80 bits; fresh CSPRNG bits for the first ID of a millisecond, + 1 for each later one (monotonic).

Packed: ``timestamp_ms << 80 | randomness``, 16 bytes big-endian. Packed-byte order, text order and issue order
are the same order.

Parsing is case-insensitive and, like python-ulid (the reference the house style names), reads only the 32
characters of the alphabet: no Crockford substitutions (``I``, ``L``, ``O`` are refused, not read as 1, 1, 0; ``U``
is refused). The first character must be 0..7 (26 characters carry 130 bits). The ``uuid`` (8-4-4-4-12) and
``hex`` (32 digits) forms are read in any case.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import _columns, _crockford, _text
from app.schemes import time_order as order
from app.schemes._uuid_text import read_uuid_text, uuid_text
from app.schemes.base import (
    Batch,
    Clock,
    Generator,
    GeneratorStats,
    LayoutField,
    PublicSplit,
    RandomSource,
    Run,
    Scheme,
    SchemeSettings,
    csprng,
    runs_count,
)
from app.schemes.packed import PackedInt

# --- layout -------------------------------------------------------------------------------------------------------

TIMESTAMP_BITS = 48
RANDOM_BITS = 80
PACKED_BITS = TIMESTAMP_BITS + RANDOM_BITS  # 128
PACKED_BYTES = PACKED_BITS // 8
RANDOM_BYTES = RANDOM_BITS // 8
TIMESTAMP_SHIFT = RANDOM_BITS
TIMESTAMP_MS_MAX = (1 << TIMESTAMP_BITS) - 1
RANDOM_MAX = (1 << RANDOM_BITS) - 1
RANDOM_SLOTS = 1 << RANDOM_BITS
PACKED_MAX = (1 << PACKED_BITS) - 1
RANDOM_HEX_LEN = RANDOM_BITS // 4  # 20

NANOSECS_IN_MILLISECS = 1_000_000
BATCH_COUNT_MAX = 1 << 24
"""Most IDs one :meth:`UlidGenerator.generate` call issues."""
SCALAR_COUNT_MAX = 8
"""Batches up to this size are formatted per ID (cheaper than setting up the columns)."""

# --- text ---------------------------------------------------------------------------------------------------------

ULID_LEN = _crockford.ENCODED_LEN  # 26
UUID_LEN = _columns.UUID_LEN  # 36
HEX_LEN = _columns.HEX_LEN  # 32

# A batch's randomness values are consecutive: only their low bits vary along a run, written from table slices.
BASE32_TAIL_CHAR = 23
BASE32_TAIL_BITS = _columns.TRIPLE_BITS  # 15: characters 23..25
HEX_TAIL_DIGITS = 4
HEX_TAIL_BITS = 4 * HEX_TAIL_DIGITS  # 16: the last 4 hex digits
UUID_TAIL_COLUMN = UUID_LEN - HEX_TAIL_DIGITS  # 32
HEX_TAIL_COLUMN = HEX_LEN - HEX_TAIL_DIGITS  # 28


# --- codec: fields <-> packed int ---------------------------------------------------------------------------------


PACKED = PackedInt("ULID", [("timestamp_ms", TIMESTAMP_BITS), ("randomness", RANDOM_BITS)], article="")
"""The layout: range check, pack/unpack, bytes and hex of a packed ULID."""


def pack(timestamp_ms: int, randomness: int) -> int:
    """Pack ``timestamp_ms`` (0 .. 2**48 - 1) and ``randomness`` (0 .. 2**80 - 1) into the 128-bit integer.

    Raises ValueError naming the field whose range is broken. Inverse of :func:`unpack`.
    """
    return PACKED.pack(timestamp_ms, randomness)


def unpack(value: int) -> tuple[int, int]:
    """Split a packed ULID into ``(timestamp_ms, randomness)``; ValueError unless ``0 <= value < 2**128``."""
    PACKED.check(value)
    return value >> TIMESTAMP_SHIFT, value & RANDOM_MAX


# --- codec: packed int <-> bytes ----------------------------------------------------------------------------------


to_bytes = PACKED.to_bytes
"""The 16 big-endian bytes of a packed ULID (the spec's binary layout)."""
from_bytes = PACKED.from_bytes
"""The packed ULID in 16 big-endian bytes; ValueError for any other length."""


# --- codec: packed int <-> text -----------------------------------------------------------------------------------


def encode_ulid(value: int) -> str:
    """The canonical text: 26 uppercase Crockford base32 characters."""
    PACKED.check(value)
    return _crockford.encode(value)


def decode_ulid(text: str) -> int:
    """Parse the 26-character form: any case, alphabet characters only (no I/L/O/U), first character 0..7.

    Raises InvalidIdError naming the rule broken.
    """
    return _crockford.decode(text, _crockford.STRICT_ULID)


def encode_uuid(value: int) -> str:
    """The same 128 bits as an 8-4-4-4-12 lowercase UUID (python-ulid's ``to_uuid()``; no version bits set)."""
    PACKED.check(value)
    return uuid_text(value)


def encode_hex(value: int) -> str:
    """32 lowercase hex digits."""
    return PACKED.hex(value)


def decode_uuid_or_hex(text: str) -> int:
    """Parse the ``uuid`` (8-4-4-4-12) or ``hex`` (32 digits) form, any case; InvalidIdError naming the rule."""
    if len(text) not in (UUID_LEN, HEX_LEN):
        raise InvalidIdError(
            f"ULID must be {ULID_LEN} base32 characters, {UUID_LEN} (8-4-4-4-12) or {HEX_LEN} hex digits long, "
            f"got {len(text)}"
        )
    return read_uuid_text(text, label="ULID in uuid/hex form")


# --- scheme -------------------------------------------------------------------------------------------------------


class UlidScheme(Scheme):
    """ULID: metadata, strict parser, text forms, field decoding (github.com/ulid/spec)."""

    name = "ulid"
    public_split = PublicSplit(family=5, bits=PACKED_BITS, time_bits=TIMESTAMP_BITS)
    """The public form masks timestamp_ms and keeps the 80 random bits (app.public)."""
    packed_bytes = PACKED_BYTES
    formats = ("ulid", "uuid", "hex")
    rising_formats = {"ulid": {}, "uuid": {}, "hex": {}}
    """Every form rises: monotonic mode, and packed order is the order of each fixed-width form."""
    text_width = {"ulid": ULID_LEN, "uuid": UUID_LEN, "hex": HEX_LEN}
    timestamp_digits = 3
    native_unit_ns = NANOSECS_IN_MILLISECS
    timestamp_native_max = TIMESTAMP_MS_MAX
    layout = (
        LayoutField("timestamp_ms", "127..80", "milliseconds since the Unix epoch"),
        LayoutField("random", "79..0", "randomness: fresh per millisecond, + 1 per later ID of it (monotonic)"),
    )
    identity = None
    uniqueness_note = "80 random bits per ID (monotonic within a millisecond from a random start); no slice needed"
    reference = "ULID specification (github.com/ulid/spec), monotonic mode; python-ulid; docs/schemes/ulid.md"

    # --- what the service learns from the scheme (app/schemes/base.py) ---
    title = "ULID"
    example = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    captions = {
        "timestamp_ms": "Timestamp (milliseconds since the Unix epoch)",
        "random": "Randomness (80 bits, hex)",
    }
    token_pattern: ClassVar[str | None] = r"[0-9A-Za-z]{26}"

    def new_generator(
        self,
        settings: SchemeSettings,
        identities: list[int],
        floor: int,
        clock: Clock,
        random: RandomSource = csprng,
    ) -> UlidGenerator:
        """A generator for this node (no leased identity: ``identities`` must be empty); ``floor`` in ms."""
        if identities:
            raise ValueError(f"{self.name} leases no identity, got {identities}")
        return UlidGenerator(clock=clock, rng=random, floor=floor)

    # --- codec ---

    def parse(self, text: str) -> int:
        """ulid (26 characters), uuid (36) or hex (32); InvalidIdError naming the rule broken."""
        if len(text) == ULID_LEN:
            return decode_ulid(text)
        return decode_uuid_or_hex(text)

    def format(self, value: int, fmt: str) -> str:
        """``ulid`` (canonical), ``uuid`` or ``hex`` text of a packed ULID; InvalidOptionError otherwise."""
        fmt = self.resolve_format(fmt)
        if fmt == "uuid":
            return encode_uuid(value)
        if fmt == "hex":
            return encode_hex(value)
        return encode_ulid(value)

    def fields(self, value: int) -> dict[str, Any]:
        """``{"timestamp_ms": int, "random": "<20 hex digits>"}``."""
        timestamp_ms, randomness = unpack(value)
        return {"timestamp_ms": timestamp_ms, "random": f"{randomness:0{RANDOM_HEX_LEN}x}"}

    def time_order(self, options: Mapping[str, str]) -> order.TimeOrder:
        """ULIDs sort by their ms timestamp (the top 48 bits) in uuid, bytea (16 bytes) and text (canonical
        Crockford base32, uppercase) columns. Takes no options."""
        return order.sixteen_bytes(TIMESTAMP_SHIFT, NANOSECS_IN_MILLISECS, TIMESTAMP_MS_MAX, "ulid", encode_ulid)

    def timestamp_ns(self, value: int) -> int:
        return unpack(value)[0] * NANOSECS_IN_MILLISECS

    backfills = True

    def backfill_value(
        self, settings: Any, tick: int, identity: int, sequence: int, random: RandomSource, options: Mapping[str, Any]
    ) -> int:
        """A ULID at ms ``tick`` with 80 fresh random bits."""
        return pack(tick, int.from_bytes(random(RANDOM_BYTES), "big"))


SCHEME = UlidScheme()


# --- batch encoding -----------------------------------------------------------------------------------------------


def split_runs(segments: tuple[Run, ...], low_bits: int) -> list[tuple[int, int, int]]:
    """``(value with the low ``low_bits`` zero, first low value, count)`` per run of IDs agreeing above them."""
    slots = 1 << low_bits
    out: list[tuple[int, int, int]] = []
    for seg in segments:
        random, end = seg.first, seg.first + seg.count
        while random < end:
            high = random >> low_bits << low_bits
            taken = min(end, high + slots) - random
            out.append((seg.tick << TIMESTAMP_SHIFT | high, random - high, taken))
            random += taken
    return out


class UlidBatch(Batch):
    """ULIDs issued together: per millisecond, consecutive randomness values (the spec's monotonic mode).

    Along a batch only the low bits of the randomness change from one ID to the next, so the text of every ID
    starts as a copy of its run's template row and only the last 3 base32 characters (or 4 hex digits) are
    written, from slices of a table: no per-ID arithmetic.
    """

    def __init__(self, segments: tuple[Run, ...]) -> None:
        self.segments = segments
        self.count = runs_count(segments)

    def encode(self, fmt: str) -> bytes:
        """The batch as ``ulid``, ``uuid`` or ``hex`` lines (column-wise, numpy); InvalidOptionError otherwise."""
        fmt = SCHEME.resolve_format(fmt)
        if self.count <= SCALAR_COUNT_MAX:
            return "".join(SCHEME.format(value, fmt) + "\n" for value in self.values()).encode("ascii")
        return self._rows(fmt, False).tobytes()

    def encode_lines(self, fmt: str) -> bytes | memoryview:
        """:meth:`encode`'s text over a fresh buffer (``bytes`` for a batch small enough for the scalar path): the
        rows are written where the caller gets them, with no copy to ``bytes``."""
        fmt = SCHEME.resolve_format(fmt)
        if self.count <= SCALAR_COUNT_MAX:
            return self.encode(fmt)
        return self._rows(fmt, False, fresh=True).reshape(-1).data

    def json_members(self, fmt: str) -> memoryview | None:
        """The batch as JSON array members ``"ID1",...,"IDn"`` (see :meth:`Batch.json_members`): rows ``"ID",``
        from the same templates and tables as :meth:`encode`, the text one byte in. None for a batch small enough
        for the scalar path; InvalidOptionError for another format."""
        fmt = SCHEME.resolve_format(fmt)
        if self.count <= SCALAR_COUNT_MAX:
            return None
        return self._rows(fmt, True).reshape(-1).data[:-1]  # the last row's comma dropped

    def _rows(self, fmt: str, members: bool, fresh: bool = False) -> npt.NDArray[np.uint8]:
        """One row per ID: its text and a newline (a per-thread scratch array: callers copy it out; with ``fresh``
        over a fresh ``bytearray``), or with ``members`` its text as a JSON array member and comma, ``"ID",`` (a
        fresh array)."""
        pad = _text.QUOTE if members else _text.NEWLINE
        if fmt == "ulid":
            encoder, bits, column, table = (
                encode_ulid,
                BASE32_TAIL_BITS,
                BASE32_TAIL_CHAR,
                _columns.base32_triples(pad=pad),
            )
        elif fmt == "uuid":
            encoder, bits, column, table = encode_uuid, HEX_TAIL_BITS, UUID_TAIL_COLUMN, _text.hex4_table()
        else:
            encoder, bits, column, table = encode_hex, HEX_TAIL_BITS, HEX_TAIL_COLUMN, _text.hex4_table()
        runs = split_runs(self.segments, bits)
        if members:
            rows = _text.json_rows([(encoder(value).encode(), count) for value, _, count in runs])
            column += 1  # byte 0 holds the opening quote
        else:
            lines = [((encoder(value) + "\n").encode(), count) for value, _, count in runs]
            rows = _text.fresh_rows(lines)[1] if fresh else _columns.template_rows(lines)
        # One <u4 per ID: base32 characters 23..25 and the byte after the text (the table's 4th byte: the row's
        # newline, or the member's closing quote), or the last 4 hex digits.
        _text.write_runs(rows, column, [(table, first, count) for _, first, count in runs])
        return rows

    def values(self) -> list[int]:
        return [
            seg.tick << TIMESTAMP_SHIFT | random
            for seg in self.segments
            for random in range(seg.first, seg.first + seg.count)
        ]

    @property
    def high_water(self) -> int:
        return self.segments[-1].tick if self.count else -1


# --- generator ----------------------------------------------------------------------------------------------------


class UlidGenerator(Generator):
    """Issues ULIDs in the spec's monotonic mode (github.com/ulid/spec, "Monotonicity").

    For each batch the clock is read once (``now``, ms) and compared with the last millisecond used:
    ``now > last`` draws 80 fresh random bits for the first ID in ``now``; ``now == last`` or ``now < last`` (clock
    rollback) keeps ``last`` and continues with the previous randomness + 1. A batch of n takes n consecutive
    randomness values. Where the spec would fail on an overflow of the 80 bits, this moves to ``last + 1`` with
    fresh random bits (never waits, never fails).

    ``floor`` (ms, the high-water mark restored after a restart): no ID is issued at or below it. ValueError for a
    floor out of range or an ``rng`` returning the wrong number of bytes.
    """

    def __init__(self, *, clock: Clock = time.time_ns, rng: RandomSource = csprng, floor: int = -1) -> None:
        if not -1 <= floor < TIMESTAMP_MS_MAX:
            raise ValueError(f"floor must be in -1..{TIMESTAMP_MS_MAX - 1} milliseconds, got {floor}")
        self._clock = clock
        self._rng = rng
        self._last_ms = floor
        self._last_random: int | None = None
        """Randomness of the last ULID issued in ``_last_ms``; None = nothing issued yet (start above the floor)."""
        self.stats = GeneratorStats()

    def _fresh(self) -> int:
        data = self._rng(RANDOM_BYTES)
        if len(data) != RANDOM_BYTES:
            raise ValueError(f"rng returned {len(data)} bytes, asked for {RANDOM_BYTES}")
        return int.from_bytes(data, "big")

    def generate(self, count: int, **options: Any) -> UlidBatch:
        """Issue ``count`` (1 .. 2**24) ULIDs; never partial, never waits.

        Raises InvalidOptionError for a bad count or any option (ulid has none), OverflowError past the last
        48-bit millisecond (year 10889).
        """
        if options:
            raise InvalidOptionError(f"ulid takes no options, got {', '.join(sorted(options))}")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= BATCH_COUNT_MAX:
            raise InvalidOptionError(f"count must be in 1..{BATCH_COUNT_MAX} for ulid, got {count!r}")
        now_ns = self._clock()
        self.stats.observe_clock(now_ns, NANOSECS_IN_MILLISECS)
        now_ms = now_ns // NANOSECS_IN_MILLISECS
        if now_ms > self._last_ms:
            ms, random = now_ms, self._fresh()
        elif self._last_random is None:
            ms, random = self._last_ms + 1, self._fresh()  # restored floor at or above the clock
        else:
            ms, random = self._last_ms, self._last_random + 1
        segments: list[Run] = []
        remaining = count
        while remaining:
            if random > RANDOM_MAX:
                self.stats.sequence_exhausted += 1
                ms, random = ms + 1, self._fresh()
            taken = min(remaining, RANDOM_SLOTS - random)
            segments.append(Run(ms, random, taken))
            random += taken
            remaining -= taken
        if ms > TIMESTAMP_MS_MAX:
            raise OverflowError(f"ULID timestamp would pass {TIMESTAMP_MS_MAX} ms (48 bits)")
        self._last_ms, self._last_random = ms, random - 1
        return UlidBatch(tuple(segments))

    @property
    def high_water(self) -> int:
        """The last millisecond issued (or the floor), in ms."""
        return self._last_ms
