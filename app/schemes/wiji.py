"""Wiji v1: 128-bit IDs made of a microsecond timestamp, a sequence, a version nibble and a per-process random part.

Follows docs/schemes/wiji.md and the Wiji specification (``sangkan-dev/wiji``, WIJI_SPEC.md v1.0.0,
with the errata docs/schemes/wiji.md lists)::

    127                              72 71            56 55  52 51                                0
    +----------------------------------+----------------+------+-----------------------------------+
    |     timestamp_us (56 bits)       | sequence (16)  | ver  |   random (52 bits, per process)   |
    +----------------------------------+----------------+------+-----------------------------------+
    base32 (canonical): 26 uppercase Crockford characters, 2 zero bits prepended, e.g. 000S94VR000002M6NWVVR14D2G
    uuid:               8-4-4-4-12 lowercase hex, e.g. 0006524d-e000-0000-2a1a-bcdef0123450
    hex:                32 lowercase hex digits

* timestamp_us: microseconds since the Unix epoch. The field has 56 bits, but the base32 form must start with 0 or 1,
  which leaves the top two bits zero: valid timestamps are 0 .. 2**54 - 1 (year 2540) in every form.
* sequence: 0 .. 0xFFFF, orders IDs of one microsecond from one generator.
* version: always 1 (bits 55..52, the high nibble of byte 9); every form is rejected otherwise.
* random: 52 bits drawn once per generator instance from a CSPRNG; it keeps processes apart without coordination.

Packed: ``timestamp_us << 72 | sequence << 56 | 1 << 52 | random``, 16 bytes big-endian. Packed-byte order equals
field-tuple order and the order of every text form (compare IDs decoded, not as raw strings: input may be lowercase).

In the base32 text, characters 0..10 hold timestamp bits 55..3, 11..14 the timestamp's low 3 bits, the sequence and
the version's top bit, 15..25 the rest. Inside a batch only characters 11..14 change: one 4-byte write per ID.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import _crockford, _text
from app.schemes import time_order as order
from app.schemes.base import (
    SMALL_BATCH,
    Batch,
    Clock,
    Generator,
    GeneratorStats,
    LayoutField,
    RandomSource,
    Run,
    Scheme,
    SchemeSettings,
    csprng,
    grouped,
    hex_word,
    runs_count,
    scalar_lines,
)
from app.schemes.packed import PackedInt

# --- layout -------------------------------------------------------------------------------------------------------

TIMESTAMP_BITS = 56
SEQUENCE_BITS = 16
VERSION_BITS = 4
RANDOM_BITS = 52
PACKED_BITS = TIMESTAMP_BITS + SEQUENCE_BITS + VERSION_BITS + RANDOM_BITS
PACKED_BYTES = PACKED_BITS // 8

RANDOM_SHIFT = 0
VERSION_SHIFT = RANDOM_SHIFT + RANDOM_BITS
SEQUENCE_SHIFT = VERSION_SHIFT + VERSION_BITS
TIMESTAMP_SHIFT = SEQUENCE_SHIFT + SEQUENCE_BITS

VERSION = 1
VERSION_MASK = (1 << VERSION_BITS) - 1
SEQUENCE_MAX = (1 << SEQUENCE_BITS) - 1
SEQUENCE_SLOTS = 1 << SEQUENCE_BITS
"""IDs one generator can issue per microsecond."""
RANDOM_MAX = (1 << RANDOM_BITS) - 1
RANDOM_DRAW_BYTES = 7
"""Bytes drawn for the random part (the reference's ``random_bytes(7)``, top nibble dropped)."""
TIMESTAMP_USABLE_BITS = TIMESTAMP_BITS - _crockford.PAD_BITS  # 54
TIMESTAMP_US_MAX = (1 << TIMESTAMP_USABLE_BITS) - 1
"""Largest timestamp whose base32 form starts with 0 or 1 (docs/schemes/wiji.md "Text forms": "the first character
must decode to 0 or 1")."""
PACKED_MAX = (1 << PACKED_BITS) - 1

NANOSECS_IN_MICROSECS = 1_000
SPIN_LIMIT_NS = 50_000
"""Longest real wait (ns) for the next microsecond when the sequence runs out; beyond it, a partial batch."""
BATCH_COUNT_MAX = 1 << 24
"""Most IDs one :meth:`WijiGenerator.generate` call may be asked for."""

# --- text ---------------------------------------------------------------------------------------------------------

BASE32_LEN = _crockford.ENCODED_LEN  # 26
HEX_LEN = 2 * PACKED_BYTES  # 32
UUID_GROUP_LENS = (8, 4, 4, 4, 12)
UUID_LEN = HEX_LEN + len(UUID_GROUP_LENS) - 1  # 36
_UUID_GROUP_ENDS = tuple(itertools.accumulate(UUID_GROUP_LENS))[:-1]  # after hex digits 8, 12, 16, 20
UUID_SEPARATOR_POSITIONS = tuple(end + i for i, end in enumerate(_UUID_GROUP_ENDS))  # 8, 13, 18, 23
SEPARATOR = "-"
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")

SEQUENCE_CHAR = 11
"""Base32 characters 11..14 hold timestamp bits 2..0, the sequence and version bit 3."""
SEQUENCE_CHARS = 4
SEQUENCE_HEX_COLUMN = TIMESTAMP_BITS // 4  # 14: the sequence is bytes 7..8, hex digits 14..17
UUID_SEQUENCE_COLUMNS = tuple(
    digit + sum(end <= digit for end in _UUID_GROUP_ENDS) for digit in (SEQUENCE_HEX_COLUMN, SEQUENCE_HEX_COLUMN + 2)
)
"""16, 19: in the uuid form the sequence's hex digits sit at columns 16..17 (high byte) and 19..20 (low byte)."""


# --- codec: fields <-> packed int ---------------------------------------------------------------------------------


def pack(timestamp_us: int, sequence: int, random: int) -> int:
    """Pack the fields of a Wiji v1 (version 1) into the 128-bit integer.

    ``timestamp_us`` in 0 .. 2**54 - 1, ``sequence`` in 0 .. 0xFFFF, ``random`` in 0 .. 2**52 - 1. Raises ValueError
    naming the field whose range is broken. Inverse of :func:`unpack`.
    """
    return PACKED.pack(timestamp_us, sequence, random)


def unpack(value: int) -> tuple[int, int, int]:
    """Split a packed Wiji v1 into ``(timestamp_us, sequence, random)``.

    Raises ValueError unless ``value`` is a valid Wiji v1 (0 <= value < 2**128, version nibble 1, timestamp below
    2**54 µs). Inverse of :func:`pack`.
    """
    PACKED.check(value)
    return (
        value >> TIMESTAMP_SHIFT,
        (value >> SEQUENCE_SHIFT) & SEQUENCE_MAX,
        (value >> RANDOM_SHIFT) & RANDOM_MAX,
    )


def _v1_problem(value: int) -> str | None:
    """The rule a 128-bit value breaks as a Wiji v1 (version nibble, timestamp range), or None."""
    version = (value >> VERSION_SHIFT) & VERSION_MASK
    if version != VERSION:
        return f"Wiji version nibble (bits 55..52) must be {VERSION}, got {version}"
    if value >> TIMESTAMP_SHIFT > TIMESTAMP_US_MAX:
        return (
            f"Wiji timestamp must be below 2**{TIMESTAMP_USABLE_BITS} µs (the base32 form starts with 0 or 1), "
            f"got {value >> TIMESTAMP_SHIFT}"
        )
    return None


PACKED = PackedInt(
    "Wiji",
    [
        ("timestamp_us", TIMESTAMP_BITS, TIMESTAMP_US_MAX),
        ("sequence", SEQUENCE_BITS),
        ("version", VERSION_BITS, None, VERSION),
        ("random", RANDOM_BITS),
    ],
    problem=_v1_problem,
)
"""The layout: range and v1 check, pack/unpack, bytes and hex of a packed Wiji."""


# --- codec: packed int <-> bytes ----------------------------------------------------------------------------------


to_bytes = PACKED.to_bytes
"""The 16 big-endian bytes of a packed Wiji (WIJI_SPEC section 4)."""
from_bytes = PACKED.from_bytes
"""The packed Wiji in 16 big-endian bytes; ValueError for another length or an invalid Wiji v1."""


# --- codec: packed int <-> text -----------------------------------------------------------------------------------


def encode_base32(value: int) -> str:
    """The canonical text: 26 uppercase Crockford characters, 2 zero bits prepended (WIJI_SPEC section 5.1)."""
    PACKED.check(value)
    return _crockford.encode(value)


def decode_base32(text: str) -> int:
    """Parse the base32 form: 26 characters, any case, I/L->1, O->0, U->V, first character 0 or 1, version 1.

    Raises InvalidIdError naming the rule broken.
    """
    return _check_v1(_crockford.decode(text, _crockford.WIJI))


def encode_hex(value: int) -> str:
    """32 lowercase hex digits (WIJI_SPEC section 5.3)."""
    return PACKED.hex(value)


def decode_hex(text: str) -> int:
    """Parse the 32-digit hex form (any case); InvalidIdError naming the rule broken."""
    if len(text) != HEX_LEN:
        raise InvalidIdError(f"Wiji hex must be exactly {HEX_LEN} characters long, got {len(text)}")
    _check_hex_digits(text, "Wiji hex must contain only hex digits 0-9 a-f (any case)")
    return _check_v1(int(text, 16))


def encode_uuid(value: int) -> str:
    """The UUID-shaped form ``xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``, lowercase (WIJI_SPEC section 5.2)."""
    digits = encode_hex(value)
    for position in UUID_SEPARATOR_POSITIONS:
        digits = digits[:position] + SEPARATOR + digits[position:]
    return digits


def decode_uuid(text: str) -> int:
    """Parse the UUID-shaped form: exactly 8-4-4-4-12 hex digits (any case) separated by ``-``.

    Raises InvalidIdError naming the rule broken.
    """
    if len(text) != UUID_LEN:
        raise InvalidIdError(f"Wiji uuid must be exactly {UUID_LEN} characters long (8-4-4-4-12), got {len(text)}")
    for position in UUID_SEPARATOR_POSITIONS:
        if text[position] != SEPARATOR:
            raise InvalidIdError(
                f"Wiji uuid must be 8-4-4-4-12 hex digits separated by '-': expected '-' at position {position}, "
                f"got {text[position]!r}"
            )
    _check_hex_digits(
        text,
        "Wiji uuid must contain only hex digits 0-9 a-f (any case) besides the '-' separators",
        skip=UUID_SEPARATOR_POSITIONS,
    )
    return _check_v1(int(text.replace(SEPARATOR, ""), 16))


def _check_hex_digits(text: str, rule: str, skip: tuple[int, ...] = ()) -> None:
    for position, char in enumerate(text):
        if position not in skip and char not in _HEX_DIGITS:
            raise InvalidIdError(f"{rule}, got {char!r} at position {position}")


def _check_v1(value: int) -> int:
    problem = _v1_problem(value)
    if problem:
        raise InvalidIdError(problem)
    return value


# --- scheme -------------------------------------------------------------------------------------------------------


class WijiScheme(Scheme):
    """Wiji v1: metadata, strict parser, text forms, field decoding (docs/schemes/wiji.md)."""

    name = "wiji"
    packed_bytes = PACKED_BYTES
    formats = ("base32", "uuid", "hex")
    rising_formats = {"base32": {}, "uuid": {}, "hex": {}}
    """Every form rises: (timestamp, sequence) from one generator, its random part fixed, packed order = text order."""
    text_width = {"base32": BASE32_LEN, "uuid": UUID_LEN, "hex": HEX_LEN}
    timestamp_digits = 6
    native_unit_ns = NANOSECS_IN_MICROSECS
    timestamp_native_max = TIMESTAMP_US_MAX
    layout = (
        LayoutField("timestamp_us", "127..72", "microseconds since the Unix epoch (top 2 bits zero: below 2**54)"),
        LayoutField("sequence", "71..56", "order within one microsecond of one generator"),
        LayoutField("version", "55..52", "always 1 (Wiji v1)"),
        LayoutField("random", "51..0", "52 bits drawn once per generator instance from a CSPRNG"),
    )
    identity = None
    uniqueness_note = "a random part drawn per generator (nothing leased), published for operators; no slice needed"
    reference = "Wiji specification v1.0.0 (sangkan-dev/wiji, WIJI_SPEC.md); docs/schemes/wiji.md"

    def parse(self, text: str) -> int:
        """base32 (26 characters), uuid (36) or hex (32); InvalidIdError naming the rule broken."""
        if len(text) == BASE32_LEN:
            return decode_base32(text)
        if len(text) == HEX_LEN:
            return decode_hex(text)
        if len(text) == UUID_LEN:
            return decode_uuid(text)
        raise InvalidIdError(f"Wiji ID must be {BASE32_LEN}, {HEX_LEN} or {UUID_LEN} characters long, got {len(text)}")

    def format(self, value: int, fmt: str) -> str:
        """``base32`` (canonical), ``uuid`` or ``hex`` text of a packed Wiji; InvalidOptionError for another format."""
        fmt = self.resolve_format(fmt)
        if fmt == "uuid":
            return encode_uuid(value)
        if fmt == "hex":
            return encode_hex(value)
        return encode_base32(value)

    def fields(self, value: int) -> dict[str, Any]:
        """``{"timestamp_us", "sequence", "version", "random"}`` as ints (version is always 1)."""
        timestamp_us, sequence, random = unpack(value)
        return {"timestamp_us": timestamp_us, "sequence": sequence, "version": VERSION, "random": random}

    def time_order(self, options: Mapping[str, str]) -> order.TimeOrder:
        """Wiji IDs sort by their µs timestamp (the top 56 bits) in uuid, bytea (16 bytes) and text (base32)
        columns. Takes no options."""
        base32 = _crockford.encode  # not encode_base32: a bound has no version nibble
        return order.sixteen_bytes(TIMESTAMP_SHIFT, NANOSECS_IN_MICROSECS, TIMESTAMP_US_MAX, "base32", base32)

    def timestamp_ns(self, value: int) -> int:
        return unpack(value)[0] * NANOSECS_IN_MICROSECS

    title = "Wiji v1"
    example = "000S94VR000002M6NWVVR14D2G"
    # the UUID-shaped form, and ~26 mixed base32 characters (also near misses)
    token_pattern = (
        r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
        r"|(?=[0-9A-Za-z]*[0-9])(?=[0-9A-Za-z]*[A-Za-z])[0-9A-Za-z]{24,28}"
    )
    captions = {
        "timestamp_us": "Microseconds since 1970-01-01 UTC (56 bits).",
        "sequence": "Counter within one microsecond for one process (16 bits).",
        "version": "Format version (4 bits); always 1.",
        "random": "52 random bits drawn once per generator process: IDs sharing them came from the same process.",
    }

    def new_generator(
        self,
        settings: SchemeSettings,
        identities: list[int],
        floor: int,
        clock: Clock,
        random: RandomSource = csprng,
    ) -> Generator:
        """No claimed identity: a random part drawn once per generator (52 bits)."""
        return WijiGenerator(clock=clock, rng=random)

    def node_info(self, settings: SchemeSettings, generator: Generator | None) -> dict[str, Any]:
        return {"random_part": self.registration(generator)} if generator is not None else {}

    def registration(self, generator: Generator) -> str | None:
        """The random part, 13 lowercase hex digits (published so an operator can tell replicas apart)."""
        return f"{generator.random_part:013x}"  # type: ignore[attr-defined]

    def words(self, fields: dict[str, Any]) -> dict[str, str]:
        version = fields["version"]
        return {
            "timestamp_us": f"{grouped(fields['timestamp_us'])} µs since the Unix epoch",
            "sequence": f"sequence {fields['sequence']} in its microsecond",
            "version": "version 1 (Wiji v1)" if version == VERSION else f"version {version}",
            "random": f"process {hex_word(fields['random'], 13)}",
        }

    def summary(self, fields: dict[str, Any]) -> str:
        return f"{self.words(fields)['random']}, sequence {fields['sequence']}"


SCHEME = WijiScheme()


# --- batch encoding -----------------------------------------------------------------------------------------------


class WijiBatch(Batch):
    """Wiji IDs of one generator issued together: consecutive sequences, one random part.

    ``segments`` lists the (microsecond, sequences) runs, usually one; empty for a partial batch of 0 IDs.
    """

    def __init__(self, random: int, segments: tuple[Run, ...]) -> None:
        self.random = random
        self.segments = segments
        self.count = segments[0].count if len(segments) == 1 else runs_count(segments)

    def _base(self, segment: Run) -> int:
        """The packed ID of sequence 0 in ``segment`` (fields valid by construction: the generator checked them)."""
        return segment.tick << TIMESTAMP_SHIFT | VERSION << VERSION_SHIFT | self.random

    def encode(self, fmt: str) -> bytes:
        """The batch as ``base32``, ``uuid`` or ``hex`` lines (column-wise, numpy); InvalidOptionError otherwise."""
        if self.count == 1:  # a single-ID request: its one value, valid by construction, through the form's encoder
            one = _ONE_ID.get(fmt)
            if one is not None:
                seg = self.segments[0]
                return (one(self._base(seg) | seg.first << SEQUENCE_SHIFT) + "\n").encode()
        if self.count <= SMALL_BATCH:  # per-ID formatting beats the column-wise encoder's fixed cost
            return scalar_lines(SCHEME.format, self.values(), fmt)
        fmt = SCHEME.resolve_format(fmt)
        if not self.count:
            return b""
        return self._rows(fmt, False).tobytes()

    def encode_lines(self, fmt: str) -> bytes | memoryview:
        """:meth:`encode`'s text over a fresh buffer (``bytes`` for a batch small enough for the scalar path): the
        rows are written where the caller gets them, with no copy to ``bytes``."""
        if self.count <= SMALL_BATCH:
            return self.encode(fmt)
        return self._rows(SCHEME.resolve_format(fmt), False, fresh=True).reshape(-1).data

    def json_members(self, fmt: str) -> memoryview | None:
        """The batch as JSON array members ``"ID1",...,"IDn"`` (see :meth:`Batch.json_members`): rows ``"ID",``
        from the same templates and tables as :meth:`encode`, the text one byte in. None for a batch small enough
        for the scalar path; InvalidOptionError for another format."""
        fmt = SCHEME.resolve_format(fmt)
        if self.count <= SMALL_BATCH:
            return None
        return self._rows(fmt, True).reshape(-1).data[:-1]  # the last row's comma dropped

    def _rows(self, fmt: str, members: bool, fresh: bool = False) -> npt.NDArray[np.uint8]:
        """One row per ID: its text and a newline (a per-thread scratch array: callers copy it out; with ``fresh``
        over a fresh ``bytearray``), or with ``members`` its text as a JSON array member and comma, ``"ID",`` (a
        fresh array). The sequence's characters are whole table entries (4 base32 characters, or hex digits), so
        nothing spills past them."""
        encoder = {"base32": encode_base32, "uuid": encode_uuid, "hex": encode_hex}[fmt]
        if members:
            rows = _text.json_rows([(encoder(self._base(seg)).encode(), seg.count) for seg in self.segments])
        else:
            lines = [((encoder(self._base(seg)) + "\n").encode(), seg.count) for seg in self.segments]
            rows = _text.fresh_rows(lines)[1] if fresh else _text.text_rows(lines)
        at = 1 if members else 0  # a member's byte 0 holds the opening quote
        hex4 = _text.hex4_table()
        if fmt == "base32":
            runs = [
                (
                    _crockford.column_table(self._base(seg), SEQUENCE_SHIFT, SEQUENCE_CHAR, SEQUENCE_CHARS),
                    seg.first,
                    seg.count,
                )
                for seg in self.segments
            ]
            _text.write_runs(rows, at + SEQUENCE_CHAR, runs)
        elif fmt == "hex":
            _text.write_runs(rows, at + SEQUENCE_HEX_COLUMN, [(hex4, s.first, s.count) for s in self.segments])
        else:
            digit_pairs = hex4.view("<u2")  # entry 2v: hex digits 0..1 of v, entry 2v + 1: digits 2..3
            for half, column in enumerate(UUID_SEQUENCE_COLUMNS):
                table = digit_pairs[half::2]
                _text.write_runs(rows, at + column, [(table, s.first, s.count) for s in self.segments])
        return rows

    def values(self) -> list[int]:
        return [
            self._base(seg) | sequence << SEQUENCE_SHIFT
            for seg in self.segments
            for sequence in range(seg.first, seg.first + seg.count)
        ]

    @property
    def high_water(self) -> int:
        return self.segments[-1].tick if self.count else -1


_run = functools.partial(tuple.__new__, Run)
"""``Run`` of a (tick, first, count) tuple, without the Python frame of its ``__new__``."""
_ONE_ID = {"base32": _crockford.encode, "canonical": _crockford.encode, "uuid": encode_uuid, "hex": encode_hex}
"""A form's encoder of one value the generator made (the range check of :func:`encode_base32` holds by construction)."""


# --- generator ----------------------------------------------------------------------------------------------------


class WijiGenerator(Generator):
    """Issues Wiji v1 IDs (WIJI_SPEC section 3.2 and its clock drift rule; docs/schemes/wiji.md "Generation").

    ``random_part`` (52 bits) is drawn once from ``rng`` when the generator is made. Per batch the clock is read
    (``now``, µs): ``now > last`` starts at sequence 0 in ``now``; ``now == last`` continues with sequence + 1; ``now <
    last`` (the clock stepped back) keeps ``last`` and continues with sequence + 1. A sequence passing 0xFFFF waits
    for a later microsecond: a real clock gets there within a microsecond, so :meth:`generate` spins (at most
    :data:`SPIN_LIMIT_NS` of real time); a clock further behind ``last`` (rollback, floor) or a fake clock gets a
    partial batch and :meth:`wait_ns` says how long to wait.

    ``floor`` (µs, the high-water mark restored after a restart): no ID is issued at or below it. ValueError for a
    floor out of range or an ``rng`` returning the wrong number of bytes.

    ``stats.clock_rollbacks`` counts clock readings below the largest earlier reading (µs); ``sequence_exhausted``
    counts each microsecond whose sequences ran out while more IDs were asked for (a floor above the clock is not).
    """

    def __init__(self, *, clock: Clock = time.time_ns, rng: RandomSource = csprng, floor: int = -1) -> None:
        if not -1 <= floor < TIMESTAMP_US_MAX:
            raise ValueError(f"floor must be in -1..{TIMESTAMP_US_MAX - 1} microseconds, got {floor}")
        drawn = rng(RANDOM_DRAW_BYTES)
        if len(drawn) != RANDOM_DRAW_BYTES:
            raise ValueError(f"rng returned {len(drawn)} bytes, asked for {RANDOM_DRAW_BYTES}")
        self.random_part = int.from_bytes(drawn, "big") & RANDOM_MAX
        self._clock = clock
        self._last_us = floor
        self._next_sequence = SEQUENCE_SLOTS
        """Next free sequence in ``_last_us``; SEQUENCE_SLOTS = none left (also at the floor: start above it)."""
        self._exhausted_us = floor
        """The microsecond whose running out was last counted (each is counted once; the floor is not)."""
        self.stats = GeneratorStats()

    def generate(self, count: int, **options: Any) -> WijiBatch:
        """Issue up to ``count`` (1 .. 2**24) IDs; fewer (even 0) when the sequence ran out and the clock is behind.

        Raises InvalidOptionError for a bad count or any option (Wiji has none), OverflowError past the last
        timestamp (2**54 - 1 µs, year 2540).
        """
        if options:
            raise InvalidOptionError(f"wiji takes no options, got {', '.join(sorted(options))}")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= BATCH_COUNT_MAX:
            raise InvalidOptionError(f"count must be in 1..{BATCH_COUNT_MAX} for wiji, got {count!r}")
        now_ns = self._clock()
        stats = self.stats
        if now_ns > stats.clock_high_ns:  # observe_clock's common case, inline
            stats.clock_high_ns = now_ns
        else:
            stats.observe_clock(now_ns, NANOSECS_IN_MICROSECS)
        last, sequence = self._last_us, self._next_sequence
        if count == 1:  # a single ID: a new microsecond, or the next sequence of the last one
            now_us = now_ns // NANOSECS_IN_MICROSECS
            if last < now_us <= TIMESTAMP_US_MAX:
                self._last_us, self._next_sequence = now_us, 1
                return WijiBatch(self.random_part, (_run((now_us, 0, 1)),))
            if now_us <= last and sequence < SEQUENCE_SLOTS:
                self._next_sequence = sequence + 1
                return WijiBatch(self.random_part, (_run((last, sequence, 1)),))
        segments: list[Run] = []
        remaining = count
        while remaining:
            now_us = now_ns // NANOSECS_IN_MICROSECS
            if now_us > last:
                if now_us > TIMESTAMP_US_MAX:
                    raise OverflowError(f"Wiji timestamp would pass {TIMESTAMP_US_MAX} µs")
                last, sequence = now_us, 0
            if sequence == SEQUENCE_SLOTS:
                if self._exhausted_us != last:
                    self.stats.sequence_exhausted += 1
                    self._exhausted_us = last
                now_ns = self._await_microsecond_after(last, now_ns)
                if now_ns // NANOSECS_IN_MICROSECS <= last:
                    break  # partial batch: wait_ns() says how long
                continue
            taken = min(remaining, SEQUENCE_SLOTS - sequence)
            segments.append(Run(last, sequence, taken))
            sequence += taken
            remaining -= taken
        self._last_us, self._next_sequence = last, sequence
        return WijiBatch(self.random_part, tuple(segments))

    def _await_microsecond_after(self, last_us: int, now_ns: int) -> int:
        """Re-read the clock until it passes ``last_us`` if that is at most SPIN_LIMIT_NS away; the last reading."""
        target_ns = (last_us + 1) * NANOSECS_IN_MICROSECS
        deadline = time.perf_counter_ns() + SPIN_LIMIT_NS
        while now_ns < target_ns and target_ns - now_ns <= SPIN_LIMIT_NS and time.perf_counter_ns() < deadline:
            now_ns = self._clock()
            self.stats.observe_clock(now_ns, NANOSECS_IN_MICROSECS)
        return now_ns

    def wait_ns(self) -> int:
        """0 while the current microsecond has sequences left; else ns until the clock passes the last one used."""
        if self._next_sequence < SEQUENCE_SLOTS:
            return 0
        return max(0, (self._last_us + 1) * NANOSECS_IN_MICROSECS - self._clock())

    @property
    def high_water(self) -> int:
        """The last microsecond issued (or the floor), in µs."""
        return self._last_us
