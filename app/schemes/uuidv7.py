"""UUIDv7: a 48-bit Unix-millisecond timestamp, version 7, variant 10 and 74 bits of counter and randomness.

Follows RFC 9562 section 5.7 (layout) and section 6.2 method 1 (monotonic counter), the generator as CPython
3.14's ``uuid.uuid7()``, and docs/schemes/uuidv7.md::

    127                         80 79  76 75        64 63 62 61                 32 31                  0
    +-----------------------------+------+------------+-----+---------------------+--------------------+
    |   unix_ts_ms (48 bits)      | ver  |  rand_a    | var |  rand_b (62 bits)                        |
    |                             | 0111 | (12 bits)  | 10  |                                          |
    +-----------------------------+------+------------+-----+---------------------+--------------------+
    generator's use:                     | counter bits 41..30  | counter bits 29..0  | tail (32 bits)     |
    uuid (canonical): 8-4-4-4-12 lowercase hex, e.g. 017f22e2-79b0-7cc3-98c4-dc0c0c07398f
    hex:              32 lowercase hex digits

* unix_ts_ms: milliseconds since the Unix epoch, 0 .. 2**48 - 1 (year 10889).
* ver: always 7; var: always binary 10 (RFC 9562 variant). Both are checked by the parser and are not fields.
* rand_a, rand_b: as issued here, a 42-bit counter (rand_a, then the top 30 bits of rand_b) and a 32-bit tail of
  fresh CSPRNG bits per ID (the low 32 bits of rand_b). Decoded as ``rand_a`` (int) and ``rand_b`` (16 hex digits).

Packed: ``unix_ts_ms << 80 | 7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b``, 16 bytes big-endian. Packed-byte
order, text order and issue order are the same order.

The parser accepts the canonical form in any case, wrapped in ``{...}`` or prefixed by ``urn:uuid:`` (any case),
and 32 hex digits in any case; only ASCII hex digits count. Another version or variant is refused with it named.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import _columns, _text
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
VERSION_BITS = 4
RAND_A_BITS = 12
VARIANT_BITS = 2
RAND_B_BITS = 62
PACKED_BITS = TIMESTAMP_BITS + VERSION_BITS + RAND_A_BITS + VARIANT_BITS + RAND_B_BITS  # 128
PACKED_BYTES = PACKED_BITS // 8

RAND_B_SHIFT = 0
VARIANT_SHIFT = RAND_B_SHIFT + RAND_B_BITS  # 62
RAND_A_SHIFT = VARIANT_SHIFT + VARIANT_BITS  # 64
VERSION_SHIFT = RAND_A_SHIFT + RAND_A_BITS  # 76
TIMESTAMP_SHIFT = VERSION_SHIFT + VERSION_BITS  # 80

VERSION = 7
VARIANT = 0b10
VERSION_MASK = (1 << VERSION_BITS) - 1
VARIANT_MASK = (1 << VARIANT_BITS) - 1
TIMESTAMP_MS_MAX = (1 << TIMESTAMP_BITS) - 1
RAND_A_MAX = (1 << RAND_A_BITS) - 1
RAND_B_MAX = (1 << RAND_B_BITS) - 1
BACKFILL_RANDOM_BYTES = -(-(RAND_A_BITS + RAND_B_BITS) // 8)  # 10
"""Random bytes drawn per back-dated UUIDv7 (rand_a and rand_b, all fresh: no counter)."""
PACKED_MAX = (1 << PACKED_BITS) - 1
FLAGS = VERSION << VERSION_SHIFT | VARIANT << VARIANT_SHIFT
PUBLIC_FAMILY = 4
"""The family code of UUIDv7 public forms (TypeID shares it: one generator)."""

# The generator's 42-bit counter (RFC 9562 section 6.2 method 1, as CPython 3.14): rand_a holds its top 12 bits,
# the top 30 bits of rand_b its low 30; the low 32 bits of rand_b are the per-ID random tail.
TAIL_BITS = 32
TAIL_BYTES = TAIL_BITS // 8
COUNTER_LOW_BITS = RAND_B_BITS - TAIL_BITS  # 30
COUNTER_BITS = RAND_A_BITS + COUNTER_LOW_BITS  # 42
COUNTER_MAX = (1 << COUNTER_BITS) - 1
COUNTER_SLOTS = 1 << COUNTER_BITS
COUNTER_LOW_MASK = (1 << COUNTER_LOW_BITS) - 1
COUNTER_SEED_MASK = (1 << (COUNTER_BITS - 1)) - 1
"""A new millisecond seeds the counter with 41 random bits: its top bit clear leaves room to count up."""
COUNTER_SEED_BYTES = 6

NANOSECS_IN_MILLISECS = 1_000_000
BATCH_COUNT_MAX = 1 << 24
"""Most IDs one :meth:`Uuidv7Generator.generate` call issues (bounds the random draw: 4 bytes per ID)."""
COUNTER_CHUNK_BITS = 16
COUNTER_CHUNK_SLOTS = 1 << COUNTER_CHUNK_BITS
COUNTER_CHUNK_MASK = COUNTER_CHUNK_SLOTS - 1
"""Counter bits 15..0 are 4 hex digits of their own (bits 47..32 of the value); a batch writes them per run."""
SCALAR_COUNT_MAX = 8
"""Batches up to this size are formatted per ID (cheaper than setting up the columns)."""

# --- text ---------------------------------------------------------------------------------------------------------

UUID_LEN = _columns.UUID_LEN  # 36
HEX_LEN = _columns.HEX_LEN  # 32
UUID_COUNTER_COLUMN, HEX_COUNTER_COLUMN = 24, 20
"""Text columns of hex digits 20..23 (bits 47..32: counter bits 15..0)."""
UUID_TAIL_COLUMN, HEX_TAIL_COLUMN = 28, 24
"""Text column of hex digits 24..31 (the 32-bit random tail, written as one 8-byte word per row)."""

_VERSION_REASONS = {
    0: "is the nil UUID's and carries no timestamp",
    1: "carries a Gregorian 100 ns timestamp, not Unix ms",
    6: "carries a Gregorian 100 ns timestamp, not Unix ms",
    15: "is the max UUID's and carries no timestamp",
}
"""Why a UUID of another version is refused (default: it carries no timestamp)."""


# --- codec: fields <-> packed int ---------------------------------------------------------------------------------


def pack(timestamp_ms: int, rand_a: int, rand_b: int) -> int:
    """Pack the three fields with version 7 and variant 10 into the 128-bit integer.

    ``timestamp_ms`` in 0 .. 2**48 - 1, ``rand_a`` in 0 .. 0xFFF, ``rand_b`` in 0 .. 2**62 - 1. Raises ValueError
    naming the field whose range is broken. Inverse of :func:`unpack`.
    """
    return PACKED.pack(timestamp_ms, rand_a, rand_b)


def unpack(value: int) -> tuple[int, int, int]:
    """Split a packed UUIDv7 into ``(timestamp_ms, rand_a, rand_b)``.

    Raises ValueError unless ``value`` is a 128-bit integer with version 7 and variant 10. Inverse of :func:`pack`.
    """
    PACKED.check(value)
    return value >> TIMESTAMP_SHIFT, (value >> RAND_A_SHIFT) & RAND_A_MAX, value & RAND_B_MAX


def version_problem(value: int) -> str | None:
    """The rule a 128-bit value breaks as a UUIDv7 (version nibble, then variant bits), or None."""
    version = (value >> VERSION_SHIFT) & VERSION_MASK
    if version != VERSION:
        reason = _VERSION_REASONS.get(version, "carries no timestamp")
        return f"UUID version {version} {reason}; expected {VERSION}"
    variant = (value >> VARIANT_SHIFT) & VARIANT_MASK
    if variant != VARIANT:
        return f"UUID variant (bits 63..62) must be 10 (RFC 9562), got {variant:02b}"
    return None


PACKED = PackedInt(
    "UUIDv7",
    [
        ("timestamp_ms", TIMESTAMP_BITS),
        ("version", VERSION_BITS, None, VERSION),
        ("rand_a", RAND_A_BITS),
        ("variant", VARIANT_BITS, None, VARIANT),
        ("rand_b", RAND_B_BITS),
    ],
    bytes_noun="a UUID",
    problem=version_problem,
)
"""The layout: range, version and variant check, pack/unpack, bytes and hex of a packed UUIDv7."""


# --- codec: packed int <-> bytes ----------------------------------------------------------------------------------


to_bytes = PACKED.to_bytes
"""The 16 big-endian bytes of a packed UUIDv7."""
from_bytes = PACKED.from_bytes
"""The packed UUIDv7 in 16 big-endian bytes; ValueError for another length, version or variant."""


# --- codec: packed int <-> text -----------------------------------------------------------------------------------


def encode_uuid(value: int) -> str:
    """The canonical text: 8-4-4-4-12 lowercase hex (RFC 9562 section 4)."""
    PACKED.check(value)
    return uuid_text(value)


def encode_hex(value: int) -> str:
    """32 lowercase hex digits."""
    return PACKED.hex(value)


def decode_uuid(text: str) -> int:
    """Parse a UUIDv7 in any accepted spelling: 8-4-4-4-12 (any case), ``{8-4-4-4-12}``, ``urn:uuid:8-4-4-4-12``
    or 32 hex digits; version 7, variant 10.

    Raises InvalidIdError naming the rule broken ("UUID version 4 carries no timestamp; expected 7").
    """
    value = read_uuid_text(text)
    problem = version_problem(value)
    if problem:
        raise InvalidIdError(problem)
    return value


# --- scheme -------------------------------------------------------------------------------------------------------


class Uuidv7Scheme(Scheme):
    """UUIDv7: metadata, strict parser, text forms, field decoding (RFC 9562 section 5.7)."""

    name = "uuidv7"
    packed_bytes = PACKED_BYTES
    formats = ("uuid", "hex")
    rising_formats = {"uuid": {}, "hex": {}}
    """Every form rises: the monotonic counter (RFC 9562 section 6.2 method 1), fixed-width lowercase hex."""
    text_width = {"uuid": UUID_LEN, "hex": HEX_LEN}
    public_split = PublicSplit(
        family=PUBLIC_FAMILY,
        bits=PACKED_BITS,
        time_bits=TIMESTAMP_BITS,
        fixed_mask=VERSION_MASK << VERSION_SHIFT | VARIANT_MASK << VARIANT_SHIFT,
        fixed_value=FLAGS,
    )
    """The public form masks unix_ts_ms and keeps rand_a and rand_b; version and variant are fixed (app.public)."""
    timestamp_digits = 3
    native_unit_ns = NANOSECS_IN_MILLISECS
    timestamp_native_max = TIMESTAMP_MS_MAX
    layout = (
        LayoutField("timestamp_ms", "127..80", "unix_ts_ms: milliseconds since the Unix epoch"),
        LayoutField("version", "79..76", "always 7"),
        LayoutField("rand_a", "75..64", "counter bits 41..30 (RFC 9562 section 6.2 method 1)"),
        LayoutField("variant", "63..62", "always binary 10"),
        LayoutField("rand_b", "61..0", "counter bits 29..0, then 32 fresh CSPRNG bits per ID"),
    )
    identity = None
    uniqueness_note = (
        "random bits in every ID (RFC 9562 method 1: a random counter seed and tail per millisecond); no slice needed"
    )
    reference = "RFC 9562 sections 5.7 and 6.2 (method 1, as CPython 3.14 uuid.uuid7()); docs/schemes/uuidv7.md"

    # --- what the service learns from the scheme (app/schemes/base.py) ---
    title = "UUIDv7 (RFC 9562)"
    example = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"
    captions = {
        "timestamp_ms": "Timestamp (unix_ts_ms, milliseconds since the Unix epoch)",
        "rand_a": "rand_a (12 bits: the counter's top bits when issued by a monotonic generator)",
        "rand_b": "rand_b (62 bits, hex: counter low bits and random)",
    }
    token_pattern: ClassVar[str | None] = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"

    def new_generator(
        self,
        settings: SchemeSettings,
        identities: list[int],
        floor: int,
        clock: Clock,
        random: RandomSource = csprng,
    ) -> Uuidv7Generator:
        """A generator for this node (no leased identity: ``identities`` must be empty); ``floor`` in ms."""
        if identities:
            raise ValueError(f"{self.name} leases no identity, got {identities}")
        return Uuidv7Generator(clock=clock, rng=random, floor=floor)

    # --- codec ---

    def parse(self, text: str) -> int:
        """Any accepted spelling (see :func:`decode_uuid`); InvalidIdError naming the rule broken."""
        return decode_uuid(text)

    def format(self, value: int, fmt: str) -> str:
        """``uuid`` (canonical, 8-4-4-4-12) or ``hex`` text of a packed UUIDv7; InvalidOptionError otherwise."""
        if self.resolve_format(fmt) == "hex":
            return encode_hex(value)
        return encode_uuid(value)

    def fields(self, value: int) -> dict[str, Any]:
        """``{"timestamp_ms": int, "rand_a": int, "rand_b": "<16 hex digits>"}``."""
        timestamp_ms, rand_a, rand_b = unpack(value)
        return {"timestamp_ms": timestamp_ms, "rand_a": rand_a, "rand_b": f"{rand_b:016x}"}

    def time_order(self, options: Mapping[str, str]) -> order.TimeOrder:
        """UUIDv7s sort by their ms timestamp (the top 48 bits) in uuid, bytea (16 bytes) and text (8-4-4-4-12
        lowercase) columns. Takes no options."""
        return order.sixteen_bytes(
            TIMESTAMP_SHIFT,
            NANOSECS_IN_MILLISECS,
            TIMESTAMP_MS_MAX,
            "uuid",
            uuid_text,
            note="Other UUID versions in the same column fall inside by their first 48 bits as if they were ms.",
        )

    def timestamp_ns(self, value: int) -> int:
        return unpack(value)[0] * NANOSECS_IN_MILLISECS

    backfills = True

    def backfill_value(
        self, settings: Any, tick: int, identity: int, sequence: int, random: RandomSource, options: Mapping[str, Any]
    ) -> int:
        """A UUIDv7 at ms ``tick`` whose 74 bits of rand_a and rand_b are all fresh from ``random``."""
        bits = int.from_bytes(random(BACKFILL_RANDOM_BYTES), "big")
        return pack(tick, bits >> RAND_B_BITS & RAND_A_MAX, bits & RAND_B_MAX)


SCHEME = Uuidv7Scheme()


# --- batch encoding -----------------------------------------------------------------------------------------------


_U2, _U4, _U8 = np.dtype("<u2"), np.dtype("<u4"), np.dtype("<u8")
TAIL_ARRAYS_MIN = 1 << 12
"""Halves the per-thread arrays of :meth:`Uuidv7Batch._tail_digits` hold at least (2,048 IDs)."""


class _TailArrays(threading.local):
    def __init__(self) -> None:
        self.index: npt.NDArray[np.intp] = np.empty(0, np.intp)
        self.digits: npt.NDArray[np.uint32] = np.empty(0, _U4)


_tail_arrays = _TailArrays()


class _Ramp(threading.local):
    def __init__(self) -> None:
        self.values: npt.NDArray[np.uint64] = np.arange(0, dtype=np.uint64)


_ramp = _Ramp()


def ramp(count: int) -> npt.NDArray[np.uint64]:
    """``0, 1, ..., count - 1`` as uint64 (read-only, cached per thread, grown by doubling)."""
    if _ramp.values.size < count:
        values = np.arange(max(count, 2 * _ramp.values.size, 1 << 16), dtype=np.uint64)
        values.flags.writeable = False
        _ramp.values = values
    return _ramp.values[:count]


Run3 = tuple[int, int, int]
"""A :meth:`Uuidv7Batch.runs16` run: (value with counter bits 15..0 and the tail zero, first counter bits 15..0,
count)."""


@functools.cache
def _hex4_swapped() -> npt.NDArray[np.uint32]:
    """:func:`app.schemes._text.hex4_table` indexed by a 16-bit value's bytes swapped: entry ``v`` holds the 4 hex
    digits of ``v`` byte-swapped, so big-endian halves read little-endian look their digits up directly."""
    swapped = np.arange(_text.TABLE_ROWS, dtype=np.uint16).byteswap().astype(np.intp)
    table = _text.hex4_table()[swapped]
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=2)
def _member_columns(fmt: str) -> np.dtype[np.void]:
    """A JSON array member ``"ID",`` of form ``fmt`` as a record: ``counter`` (``<u4``, hex digits 20..23) and
    ``tail`` (``<u8``, hex digits 24..31) at their bytes, the rest (the template's) left as it is."""
    width = UUID_LEN if fmt == "uuid" else HEX_LEN
    counter, tail = (UUID_COUNTER_COLUMN, UUID_TAIL_COLUMN) if fmt == "uuid" else (HEX_COUNTER_COLUMN, HEX_TAIL_COLUMN)
    return np.dtype(
        {
            "names": ["counter", "tail"],
            "formats": ["<u4", "<u8"],
            "offsets": [1 + counter, 1 + tail],  # byte 0 holds the opening quote
            "itemsize": width + _text.JSON_MEMBER_EXTRA,
        }
    )


class Uuidv7Batch(Batch):
    """UUIDv7s issued together: consecutive counters per millisecond, a fresh random tail per ID.

    ``segments`` lists the (millisecond, counters) runs, usually one (a counter overflow starts another);
    ``tails`` holds the big-endian 32-bit tails, 4 bytes per ID, in issue order (more bytes may follow).
    """

    def __init__(self, segments: tuple[Run, ...], tails: bytes) -> None:
        self.segments = segments
        self.count = runs_count(segments)
        self.tails = tails

    def runs(self) -> list[tuple[int, int]]:
        """``(value with the low 80 bits zero, count)`` per millisecond run (see :mod:`app.schemes._columns`)."""
        return [(seg.tick << TIMESTAMP_SHIFT | FLAGS, seg.count) for seg in self.segments]

    def columns(self) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """The varying bits of every ID: ``(hi16, lo64)`` uint64 columns (bits 79..64 and 63..0).

        Built in per-thread scratch buffers: valid until the next call on this thread.
        """
        count = self.count
        counters = _text.scratch("uuidv7-counters", count, np.uint64)
        hi16 = _text.scratch("uuidv7-hi16", count, np.uint64)
        lo64 = _text.scratch("uuidv7-lo64", count, np.uint64)
        start = 0
        for seg in self.segments:
            np.add(ramp(seg.count), np.uint64(seg.first), out=counters[start : start + seg.count])
            start += seg.count
        np.right_shift(counters, np.uint64(COUNTER_LOW_BITS), out=hi16)
        np.bitwise_or(hi16, np.uint64(VERSION << (VERSION_SHIFT - RAND_A_SHIFT)), out=hi16)
        np.bitwise_and(counters, np.uint64(COUNTER_LOW_MASK), out=lo64)
        np.left_shift(lo64, np.uint64(TAIL_BITS), out=lo64)
        np.bitwise_or(lo64, np.uint64(VARIANT << VARIANT_SHIFT), out=lo64)
        np.bitwise_or(lo64, np.frombuffer(self.tails, dtype=">u4", count=count), out=lo64)
        return hi16, lo64

    def runs16(self) -> list[Run3]:
        """``(value with counter bits 15..0 and the tail zero, first counter bits 15..0, count)`` per run of IDs
        whose counters agree above bit 15: in the text only counter bits 15..0 and the tail vary along a run."""
        out: list[Run3] = []
        for seg in self.segments:
            base = seg.tick << TIMESTAMP_SHIFT | FLAGS
            counter, end = seg.first, seg.first + seg.count
            while counter < end:
                high = counter >> COUNTER_CHUNK_BITS << COUNTER_CHUNK_BITS
                taken = min(end, high + COUNTER_CHUNK_SLOTS) - counter
                value = base | (high >> COUNTER_LOW_BITS) << RAND_A_SHIFT | (high & COUNTER_LOW_MASK) << TAIL_BITS
                out.append((value, counter - high, taken))
                counter += taken
        return out

    def encode(self, fmt: str) -> bytes:
        """The batch as ``uuid`` or ``hex`` lines (column-wise, numpy); InvalidOptionError for another format."""
        fmt = SCHEME.resolve_format(fmt)
        if self.count <= SCALAR_COUNT_MAX:
            return "".join([SCHEME.format(value, fmt) + "\n" for value in self.values()]).encode("ascii")
        runs = self.runs16()
        rows = _columns.template_rows(self._templates(fmt, runs))
        self._write_varying(rows, 0, fmt, runs)
        return rows.tobytes()

    def encode_lines(self, fmt: str) -> bytes | bytearray:
        """:meth:`encode`'s text in a fresh ``bytearray`` (``bytes`` for a batch small enough for the scalar path):
        the rows are written where the caller gets them, with no copy to ``bytes``."""
        fmt = SCHEME.resolve_format(fmt)
        if self.count <= SCALAR_COUNT_MAX:
            return self.encode(fmt)
        runs = self.runs16()
        buffer, rows = _text.fresh_rows(self._templates(fmt, runs))
        self._write_varying(rows, 0, fmt, runs)
        return buffer

    @staticmethod
    def _templates(fmt: str, runs: list[Run3]) -> list[tuple[bytes, int]]:
        """Each :meth:`runs16` run's template line (its text with counter bits 15..0 and the tail zero) and count."""
        encoder = encode_hex if fmt == "hex" else encode_uuid
        return [((encoder(value) + "\n").encode(), count) for value, _, count in runs]

    def json_members(self, fmt: str) -> memoryview | None:
        """The batch as JSON array members ``"ID1",...,"IDn"`` (see :meth:`Batch.json_members`), written in place:
        rows ``"ID",`` start as copies of a template per :meth:`runs16` run, then counter bits 15..0 and the tail
        are written into their columns, so the IDs are not framed in a second pass. None for a batch small enough
        for :meth:`encode`'s scalar path; InvalidOptionError for another format."""
        count = self.count
        fmt = SCHEME.resolve_format(fmt)
        if count <= SCALAR_COUNT_MAX:
            return None
        segments = self.segments
        encoder = encode_hex if fmt == "hex" else encode_uuid
        if len(segments) == 1:
            tick, counter, _ = segments[0]
            low = counter & COUNTER_CHUNK_MASK
            if low + count <= COUNTER_CHUNK_SLOTS:  # one run16: a template row and two column writes
                high = counter - low
                value = tick << TIMESTAMP_SHIFT | FLAGS | (high >> COUNTER_LOW_BITS) << RAND_A_SHIFT
                buffer = bytearray(b'"' + encoder(value | (high & COUNTER_LOW_MASK) << TAIL_BITS).encode() + b'",')
                buffer *= count
                rows = np.frombuffer(buffer, _member_columns(fmt))
                rows["counter"] = _text.hex4_table()[low : low + count]
                rows["tail"] = self._tail_digits()
                return memoryview(buffer)[:-1]  # the last row's comma dropped
        runs = self.runs16()
        members = _text.json_rows([(encoder(value).encode(), count) for value, _, count in runs])
        self._write_varying(members, 1, fmt, runs)  # column 0 holds the opening quote
        return members.reshape(-1).data[:-1]  # the last row's comma dropped

    def _tail_digits(self) -> npt.NDArray[np.uint64]:
        """Every ID's tail as its 8 hex digits, one ``<u8`` per ID (byte j = digit j), in a per-thread array
        (valid until the next call on this thread): the tails' 16-bit halves read as they lie (no byte swap) index
        :func:`_hex4_swapped`, one ``take`` for all. Fewer instructions than ``binascii.hexlify`` (14 a byte) and
        than indexing the hex table with byte-swapped halves, and less time for 1,000 IDs (docs/serving.md)."""
        halves = 2 * self.count
        held = _tail_arrays
        index, digits = held.index, held.digits
        if index.size < halves:
            size = max(halves, 2 * index.size, TAIL_ARRAYS_MIN)
            index, digits = np.empty(size, np.intp), np.empty(size, _U4)
            if index.nbytes <= _text.SCRATCH_KEPT_BYTES_MAX:
                held.index, held.digits = index, digits
        index, digits = index[:halves], digits[:halves]
        index[...] = np.frombuffer(self.tails, _U2, halves)
        _hex4_swapped().take(index, out=digits, mode="wrap")  # indices are in range: no check, no copy of out
        return digits.view(_U8)

    def _write_varying(self, rows: npt.NDArray[np.uint8], offset: int, fmt: str, runs: list[Run3]) -> None:
        """Write what varies along each of ``runs`` (:meth:`runs16`) into ``rows`` (one ID per row, its text at
        byte ``offset``): counter bits 15..0 copied from slices of the hex table, the tail's 8 hex digits
        (:meth:`_tail_digits`) written as one 8-byte word per row."""
        counter_column, tail_column = (
            (HEX_COUNTER_COLUMN, HEX_TAIL_COLUMN) if fmt == "hex" else (UUID_COUNTER_COLUMN, UUID_TAIL_COLUMN)
        )
        hex4 = _text.hex4_table()
        _text.write_runs(rows, offset + counter_column, [(hex4, first, count) for _, first, count in runs])
        _text.char_view(rows, offset + tail_column, "<u8")[...] = self._tail_digits()

    def values(self) -> list[int]:
        if self.count == 1:  # a single-ID request
            tick, counter, _ = self.segments[0]
            return [
                tick << TIMESTAMP_SHIFT
                | FLAGS
                | (counter >> COUNTER_LOW_BITS) << RAND_A_SHIFT
                | (counter & COUNTER_LOW_MASK) << TAIL_BITS
                | int.from_bytes(self.tails[:TAIL_BYTES], "big")
            ]
        if self.count <= SCALAR_COUNT_MAX:  # a small batch: numpy's set-up costs more than the work
            raw, ends = self.tails, range(TAIL_BYTES, TAIL_BYTES * self.count + 1, TAIL_BYTES)
            tails = [int.from_bytes(raw[end - TAIL_BYTES : end], "big") for end in ends]
        else:
            tails = np.frombuffer(self.tails, dtype=">u4", count=self.count).tolist()
        out: list[int] = []
        start = 0
        for seg in self.segments:
            base = seg.tick << TIMESTAMP_SHIFT | FLAGS
            for offset in range(seg.count):
                counter = seg.first + offset
                out.append(
                    base
                    | (counter >> COUNTER_LOW_BITS) << RAND_A_SHIFT
                    | (counter & COUNTER_LOW_MASK) << TAIL_BITS
                    | tails[start + offset]
                )
            start += seg.count
        return out

    @property
    def high_water(self) -> int:
        return self.segments[-1].tick if self.count else -1


# --- generator ----------------------------------------------------------------------------------------------------


class Uuidv7Generator(Generator):
    """Issues UUIDv7s: RFC 9562 section 6.2 method 1 with a 42-bit counter, as CPython 3.14's ``uuid.uuid7()``.

    For each batch the clock is read once (``now``, ms) and compared with the last millisecond used:

    * ``now > last``: the counter is seeded with 41 random bits (its top bit clear) in ``now``;
    * ``now == last`` or ``now < last`` (clock rollback): ``last`` is kept and the counter continues + 1 (CPython
      moves a rolled-back timestamp to ``last + 1``; docs/schemes/uuidv7.md says the same or an earlier millisecond
      increments the counter, which keeps the timestamp from running ahead of the clock);
    * the counter passing 2**42 - 1 moves to ``last + 1`` and reseeds it (never waits, never fails).

    A batch of n takes n consecutive counters; each ID gets 32 fresh random tail bits. All random bits of a batch
    come from one ``rng`` call (4 bytes per ID plus a 6-byte counter seed); only a counter overflow inside a batch
    draws again. ``floor`` (ms, the high-water mark restored after a restart): no ID is issued at or below it.
    ValueError for a floor out of range or an ``rng`` returning the wrong number of bytes.
    """

    def __init__(self, *, clock: Clock = time.time_ns, rng: RandomSource = csprng, floor: int = -1) -> None:
        if not -1 <= floor < TIMESTAMP_MS_MAX:
            raise ValueError(f"floor must be in -1..{TIMESTAMP_MS_MAX - 1} milliseconds, got {floor}")
        self._clock = clock
        self._rng = rng
        self._last_ms = floor
        self._counter: int | None = None
        """Counter of the last ID issued in ``_last_ms``; None = nothing issued yet (start above the floor)."""
        self.stats = GeneratorStats()

    def _draw(self, size: int) -> bytes:
        data = self._rng(size)
        if len(data) != size:
            raise ValueError(f"rng returned {len(data)} bytes, asked for {size}")
        return data

    @staticmethod
    def _seed(data: bytes) -> int:
        return int.from_bytes(data[-COUNTER_SEED_BYTES:], "big") & COUNTER_SEED_MASK

    def generate(self, count: int, **options: Any) -> Uuidv7Batch:
        """Issue ``count`` (1 .. 2**24) UUIDv7s; never partial, never waits.

        Raises InvalidOptionError for a bad count or any option (uuidv7 has none), OverflowError past the last
        48-bit millisecond (year 10889).
        """
        if options:
            raise InvalidOptionError(f"uuidv7 takes no options, got {', '.join(sorted(options))}")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= BATCH_COUNT_MAX:
            raise InvalidOptionError(f"count must be in 1..{BATCH_COUNT_MAX} for uuidv7, got {count!r}")
        now_ns = self._clock()
        self.stats.observe_clock(now_ns, NANOSECS_IN_MILLISECS)
        now_ms = now_ns // NANOSECS_IN_MILLISECS
        draw = self._draw(TAIL_BYTES * count + COUNTER_SEED_BYTES)
        if now_ms > self._last_ms:
            ms, counter = now_ms, self._seed(draw)
        elif self._counter is None:
            ms, counter = self._last_ms + 1, self._seed(draw)  # restored floor at or above the clock
        else:
            ms, counter = self._last_ms, self._counter + 1
        segments: list[Run] = []
        remaining = count
        while remaining:
            if counter > COUNTER_MAX:
                self.stats.sequence_exhausted += 1
                ms, counter = ms + 1, self._seed(self._draw(COUNTER_SEED_BYTES))
            taken = min(remaining, COUNTER_SLOTS - counter)
            segments.append(Run(ms, counter, taken))
            counter += taken
            remaining -= taken
        if ms > TIMESTAMP_MS_MAX:
            raise OverflowError(f"UUIDv7 timestamp would pass {TIMESTAMP_MS_MAX} ms (48 bits)")
        self._last_ms, self._counter = ms, counter - 1
        return Uuidv7Batch(tuple(segments), draw)

    @property
    def high_water(self) -> int:
        """The last millisecond issued (or the floor), in ms."""
        return self._last_ms
