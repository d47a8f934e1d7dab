"""HLC-ULID: a ULID whose 80 entropy bits carry a hybrid-logical-clock counter, a publisher ID and randomness.

Follows SPEC_NOTES.md "HLC-ULID, 128 bits", the HLC-ULID document and its reference implementation
(``ajzawawi/flink-amps-source``, ``HlcUlid.scala``)::

    127                        80 79            64 63            48 47                         0
    +----------------------------+----------------+----------------+----------------------------+
    |   timestamp_ms (48 bits)   | counter (16)   | publisher_id   |   random (48 bits)         |
    +----------------------------+----------------+----------------+----------------------------+
    ulid (canonical):  26 uppercase Crockford base32 characters, e.g. 01FZ11RQKT000002NAM48H248H
    hex:               TTTTTTTTTTTT-CCCC-PPPP-RRRRRRRRRRRR  (12-4-4-12, 35 characters, lowercase)

* timestamp_ms: milliseconds since the Unix epoch (the ULID timestamp), 0 .. 2**48 - 1.
* counter: the HLC logical counter, 0 .. 0xFFFF, ordering IDs of one logical millisecond.
* publisher_id: the node identity, 0 .. 0xFFFF, leased.
* random: 48 fresh bits from a CSPRNG per ID (tie-breaker).

Packed: ``timestamp_ms << 80 | counter << 64 | publisher_id << 48 | random``, 16 bytes big-endian. Packed-byte order,
field-tuple order, ULID text order and hex text order are the same order.

In the ULID text, characters 0..9 hold the timestamp, 10..13 the counter (13 also the publisher ID's top 4 bits),
14..15 the publisher ID, 16..19 its low 2 bits and random bits 47..30, 20..22 random bits 29..15 and 23..25 random
bits 14..0. A batch encodes each of those groups with one table lookup and one 4-byte write per ID.

The random field is drawn as 6 bytes per ID from the CSPRNG, read as three planes of little-endian 16-bit words
``w0, w1, w2`` (one word of each per ID) and placed so that each character group is one lookup::

    random = (w2 >> 15) << 47 | (w1 >> 15) << 46 | w0 << 30 | (w1 & 0x7FFF) << 15 | (w2 & 0x7FFF)

(a bijection of the 48 drawn bits: every ID gets 48 fresh uniform bits).
"""

from __future__ import annotations

import os
import time
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

import numpy as np
import numpy.typing as npt

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import _crockford
from app.schemes.base import (
    SMALL_BATCH,
    scalar_lines,
    Clock,
    Generator,
    IdentityPlan,
    RandomSource,
    SchemeOption,
    grouped,
    hex_word,
    idmint_plan,

    Batch,
    Clock,
    Generator,
    GeneratorStats,
    IdentitySpec,
    LayoutField,
    RandomSource,
    Scheme,
)

# --- layout -------------------------------------------------------------------------------------------------------

TIMESTAMP_BITS = 48
COUNTER_BITS = 16
PUBLISHER_ID_BITS = 16
RANDOM_BITS = 48
PACKED_BITS = TIMESTAMP_BITS + COUNTER_BITS + PUBLISHER_ID_BITS + RANDOM_BITS
PACKED_BYTES = PACKED_BITS // 8

RANDOM_SHIFT = 0
PUBLISHER_ID_SHIFT = RANDOM_SHIFT + RANDOM_BITS
COUNTER_SHIFT = PUBLISHER_ID_SHIFT + PUBLISHER_ID_BITS
TIMESTAMP_SHIFT = COUNTER_SHIFT + COUNTER_BITS

TIMESTAMP_MS_MAX = (1 << TIMESTAMP_BITS) - 1
COUNTER_MAX = (1 << COUNTER_BITS) - 1
COUNTER_SLOTS = 1 << COUNTER_BITS
"""(ms, counter) slots per logical millisecond."""
PUBLISHER_ID_MAX = (1 << PUBLISHER_ID_BITS) - 1
RANDOM_MAX = (1 << RANDOM_BITS) - 1
PACKED_MAX = (1 << PACKED_BITS) - 1

NANOSECS_IN_MILLISECS = 1_000_000
MAX_DRIFT_MS_DEFAULT = 60_000
"""How far (ms) an ``after`` ID may be ahead of this node's clock before it is refused."""
BATCH_COUNT_MAX = 1 << 24
"""Most IDs one :meth:`HlcUlidGenerator.generate` call issues (bounds the random draw: 6 bytes per ID)."""

# The random field is drawn as three 16-bit words per ID (see the module docstring for the placement).
RANDOM_WORDS = 3
RANDOM_WORD_BITS = 16
RANDOM_BYTES_PER_ID = RANDOM_WORDS * RANDOM_WORD_BITS // 8  # 6
RANDOM_GROUP_BITS = 15
"""Random bits in one 3-character group (characters 20..22: bits 29..15; 23..25: bits 14..0)."""
RANDOM_GROUP_MASK = (1 << RANDOM_GROUP_BITS) - 1
RANDOM_HEAD_SHIFT = 2 * RANDOM_GROUP_BITS  # 30
RANDOM_HEAD_BITS = RANDOM_BITS - RANDOM_HEAD_SHIFT  # 18: bits 47..30, in characters 16..19
WORD_TOP_SHIFT = RANDOM_WORD_BITS - 1
"""A word's top bit: w1's and w2's are random bits 46 and 47 (the head's bits 16 and 17)."""
W0_OFFSET_BITS = 2 * RANDOM_WORD_BITS - RANDOM_HEAD_SHIFT  # 2: w0 is bits 45..30, 2 below the chunk edge at 32
GROUP_OFFSET_BITS = RANDOM_WORD_BITS - RANDOM_GROUP_BITS  # 1: w1's group is bits 29..15, 1 below the edge at 16
_RANDOM_WORD_DTYPE = "<u2"

# --- text ---------------------------------------------------------------------------------------------------------

ULID_LEN = _crockford.ENCODED_LEN  # 26
TIMESTAMP_HEX_LEN = TIMESTAMP_BITS // 4  # 12
COUNTER_HEX_LEN = COUNTER_BITS // 4  # 4
PUBLISHER_ID_HEX_LEN = PUBLISHER_ID_BITS // 4  # 4
RANDOM_HEX_LEN = RANDOM_BITS // 4  # 12
SEPARATOR = "-"
HEX_LEN = TIMESTAMP_HEX_LEN + COUNTER_HEX_LEN + PUBLISHER_ID_HEX_LEN + RANDOM_HEX_LEN + 3  # 35
HEX_SEPARATOR_POSITIONS = (
    TIMESTAMP_HEX_LEN,
    TIMESTAMP_HEX_LEN + 1 + COUNTER_HEX_LEN,
    TIMESTAMP_HEX_LEN + 1 + COUNTER_HEX_LEN + 1 + PUBLISHER_ID_HEX_LEN,
)  # 12, 17, 22
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")

# ULID columns that vary inside a batch (see the module docstring).
COUNTER_CHAR = 10
COUNTER_CHARS = 4
RANDOM_HEAD_CHAR = 16
RANDOM_HEAD_CHARS = 4
PUBLISHER_LOW_BITS_MASK = 0b11
"""The publisher ID's low 2 bits share character 16 with random bits 47..45."""
RANDOM_GROUP_CHARS = (20, 23)
CHARS_PER_GROUP = RANDOM_GROUP_BITS // _crockford.CHAR_BITS  # 3

# Hex columns that vary inside a batch.
COUNTER_HEX_COLUMN = HEX_SEPARATOR_POSITIONS[0] + 1  # 13
RANDOM_HEX_COLUMN = HEX_SEPARATOR_POSITIONS[2] + 1  # 23
HEX_CHUNK_DIGITS = 4
"""The random field's hex is written as three 4-digit chunks (bits 47..32, 31..16, 15..0)."""


# --- codec: fields <-> packed int ---------------------------------------------------------------------------------


def pack(timestamp_ms: int, counter: int, publisher_id: int, random: int) -> int:
    """Pack the four fields into the 128-bit integer.

    ``timestamp_ms`` in 0 .. 2**48 - 1, ``counter`` and ``publisher_id`` in 0 .. 0xFFFF, ``random`` in
    0 .. 2**48 - 1. Raises ValueError naming the field whose range is broken. Inverse of :func:`unpack`.
    """
    for name, value, maximum in (
        ("timestamp_ms", timestamp_ms, TIMESTAMP_MS_MAX),
        ("counter", counter, COUNTER_MAX),
        ("publisher_id", publisher_id, PUBLISHER_ID_MAX),
        ("random", random, RANDOM_MAX),
    ):
        if not 0 <= value <= maximum:
            raise ValueError(f"HLC-ULID {name} must be in 0..{maximum}, got {value}")
    return (
        timestamp_ms << TIMESTAMP_SHIFT
        | counter << COUNTER_SHIFT
        | publisher_id << PUBLISHER_ID_SHIFT
        | random << RANDOM_SHIFT
    )


def unpack(value: int) -> tuple[int, int, int, int]:
    """Split a packed HLC-ULID into ``(timestamp_ms, counter, publisher_id, random)``.

    Raises ValueError unless ``0 <= value < 2**128``. Inverse of :func:`pack`.
    """
    _check_packed(value)
    return (
        value >> TIMESTAMP_SHIFT,
        (value >> COUNTER_SHIFT) & COUNTER_MAX,
        (value >> PUBLISHER_ID_SHIFT) & PUBLISHER_ID_MAX,
        (value >> RANDOM_SHIFT) & RANDOM_MAX,
    )


def _check_packed(value: int) -> None:
    if not 0 <= value <= PACKED_MAX:
        raise ValueError(f"a packed HLC-ULID must be in 0..2**{PACKED_BITS}-1, got {value}")


# --- codec: packed int <-> bytes ----------------------------------------------------------------------------------


def to_bytes(value: int) -> bytes:
    """The 16 big-endian bytes of a packed HLC-ULID."""
    _check_packed(value)
    return value.to_bytes(PACKED_BYTES, "big")


def from_bytes(data: bytes) -> int:
    """The packed HLC-ULID in 16 big-endian bytes; ValueError for any other length."""
    if len(data) != PACKED_BYTES:
        raise ValueError(f"an HLC-ULID has to be exactly {PACKED_BYTES} bytes long, got {len(data)}")
    return int.from_bytes(data, "big")


# --- codec: packed int <-> text -----------------------------------------------------------------------------------


def encode_ulid(value: int) -> str:
    """The canonical text: 26 uppercase Crockford base32 characters (ULID)."""
    _check_packed(value)
    return _crockford.encode(value)


def decode_ulid(text: str) -> int:
    """Parse a ULID string with ULID rules: exactly 26 characters, any case, O->0, I/L->1, first character 0..7.

    Raises InvalidIdError naming the rule broken.
    """
    return _crockford.decode(text, _crockford.ULID)


def encode_hex(value: int) -> str:
    """The document's hyphenated hex ``TTTTTTTTTTTT-CCCC-PPPP-RRRRRRRRRRRR`` (12-4-4-12, 35 characters), lowercase."""
    _check_packed(value)
    digits = f"{value:032x}"
    t, c, p = TIMESTAMP_HEX_LEN, TIMESTAMP_HEX_LEN + COUNTER_HEX_LEN, TIMESTAMP_HEX_LEN + 2 * COUNTER_HEX_LEN
    return f"{digits[:t]}{SEPARATOR}{digits[t:c]}{SEPARATOR}{digits[c:p]}{SEPARATOR}{digits[p:]}"


def decode_hex(text: str) -> int:
    """Parse the hyphenated hex form: exactly 12-4-4-12 hex digits (any case) separated by ``-``.

    Raises InvalidIdError naming the rule broken.
    """
    if len(text) != HEX_LEN:
        raise InvalidIdError(f"HLC-ULID hex must be exactly {HEX_LEN} characters long (12-4-4-12), got {len(text)}")
    for position, char in enumerate(text):
        if position in HEX_SEPARATOR_POSITIONS:
            if char != SEPARATOR:
                raise InvalidIdError(
                    f"HLC-ULID hex must be 12-4-4-12 hex digits separated by '-': expected '-' at position "
                    f"{position}, got {char!r}"
                )
        elif char not in _HEX_DIGITS:
            raise InvalidIdError(
                f"HLC-ULID hex must contain only hex digits 0-9 a-f (any case) besides the '-' separators, "
                f"got {char!r} at position {position}"
            )
    return int(text.replace(SEPARATOR, ""), 16)


# --- scheme -------------------------------------------------------------------------------------------------------


class HlcUlidSettings(BaseModel):
    """HLC-ULID settings (joined into :class:`app.settings.Settings`; env ``IDMINT_HLC_ULID_*``)."""

    hlc_ulid_publisher_id: int | None = Field(
        None, ge=0, le=PUBLISHER_ID_MAX, description="Static HLC-ULID publisher ID (0..65535); unset = claim one."
    )
    hlc_ulid_max_drift_ms: int = Field(
        MAX_DRIFT_MS_DEFAULT, ge=0,
        description="HLC-ULID: refuse `after` IDs more than this many ms ahead of our clock.",
    )


class HlcUlidScheme(Scheme):
    """HLC-ULID: metadata, strict parser, text forms, field decoding (SPEC_NOTES.md "HLC-ULID")."""

    name = "hlc-ulid"
    packed_bytes = PACKED_BYTES
    formats = ("ulid", "hex")
    text_width = {"ulid": ULID_LEN, "hex": HEX_LEN}
    timestamp_digits = 3
    native_unit_ns = NANOSECS_IN_MILLISECS
    layout = (
        LayoutField("timestamp_ms", "127..80", "milliseconds since the Unix epoch (the ULID timestamp)"),
        LayoutField("counter", "79..64", "HLC logical counter within the logical millisecond"),
        LayoutField("publisher_id", "63..48", "node identity (leased)"),
        LayoutField("random", "47..0", "tie-breaker: 48 fresh bits from a CSPRNG per ID"),
    )
    identity = IdentitySpec("publisher_id", 0, PUBLISHER_ID_MAX, draw="scan")
    reference = (
        "HLC-ULID document and HlcUlid.scala (ajzawawi/flink-amps-source); SPEC_NOTES.md \"HLC-ULID, 128 bits\""
    )

    def parse(self, text: str) -> int:
        """ULID (26 characters) or hyphenated hex (35); InvalidIdError naming the rule broken."""
        if len(text) == ULID_LEN:
            return decode_ulid(text)
        if len(text) == HEX_LEN:
            return decode_hex(text)
        raise InvalidIdError(
            f"HLC-ULID must be {ULID_LEN} (ULID) or {HEX_LEN} (12-4-4-12 hex) characters long, got {len(text)}"
        )

    def format(self, value: int, fmt: str) -> str:
        """``ulid`` (canonical) or ``hex`` text of a packed HLC-ULID; InvalidOptionError for another format."""
        if self.resolve_format(fmt) == "hex":
            return encode_hex(value)
        return encode_ulid(value)

    def fields(self, value: int) -> dict[str, Any]:
        """``{"timestamp_ms", "counter", "publisher_id", "random"}`` as ints."""
        timestamp_ms, counter, publisher_id, random = unpack(value)
        return {"timestamp_ms": timestamp_ms, "counter": counter, "publisher_id": publisher_id, "random": random}

    def timestamp_ns(self, value: int) -> int:
        """The physical/logical millisecond as ns since the epoch."""
        return unpack(value)[0] * NANOSECS_IN_MILLISECS

    title = "HLC-ULID"
    example = "01FZ11RQKT000002NAM48H248H"
    # the hex form, and ~26 mixed base32 characters (a ULID-shaped token, also near misses)
    token_pattern = (r"[0-9A-Fa-f]{11,13}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{11,13}"
                     r"|(?=[0-9A-Za-z]*[0-9])(?=[0-9A-Za-z]*[A-Za-z])[0-9A-Za-z]{24,28}")
    settings_model = HlcUlidSettings
    options = (
        SchemeOption("after", "after", "An HLC-ULID (any accepted form): every returned ID sorts after it (the HLC "
                     "receive rule merges its time into this node's clock)."),
    )
    captions = {
        "timestamp_ms": "Hybrid logical clock time: milliseconds since 1970-01-01 UTC (48 bits).",
        "counter": "Logical counter of the hybrid logical clock (16 bits).",
        "publisher_id": "Publisher ID (16 bits) of the node that made it, leased so no two nodes share one.",
        "random": "Tie-breaker drawn fresh from a CSPRNG for every ID (48 bits); it carries no meaning.",
    }

    def parse_option(self, name: str, text: str) -> Any:
        """``after``: the packed HLC-ULID. Raises InvalidOptionError for another option or an unparsable ID."""
        if name != "after":
            return super().parse_option(name, text)
        try:
            return self.parse(text.strip())
        except InvalidIdError as exc:
            raise InvalidOptionError(f"after must be an HLC-ULID: {exc}") from exc

    def identity_plan(self, settings: Any) -> IdentityPlan:
        """Publisher IDs 0..65535 at ``idmint/hlc-ulid/<n>``."""
        return idmint_plan(self.name, "publisher_id", 0, PUBLISHER_ID_MAX, static=settings.hlc_ulid_publisher_id)

    def new_generator(self, settings: Any, identities: list[int], floor: int, clock: Clock,
                      random: RandomSource = os.urandom) -> Generator:
        return HlcUlidGenerator(identities[0], clock=clock, floor=floor, max_drift_ms=settings.hlc_ulid_max_drift_ms)

    def words(self, fields: dict[str, Any]) -> dict[str, str]:
        counter = fields["counter"]
        before = "1 ID" if counter == 1 else f"{grouped(counter)} IDs"
        return {
            "timestamp_ms": f"{grouped(fields['timestamp_ms'])} ms since the Unix epoch",
            "counter": ("counter 0: first ID of its logical millisecond" if counter == 0
                        else f"counter {counter}: {before} before it in the same logical millisecond"),
            "publisher_id": f"publisher {hex_word(fields['publisher_id'], PUBLISHER_ID_HEX_LEN)}",
            "random": f"random {hex_word(fields['random'], RANDOM_HEX_LEN)}",
        }

    def summary(self, fields: dict[str, Any]) -> str:
        return f"{self.words(fields)['publisher_id']}, counter {fields['counter']}"


SCHEME = HlcUlidScheme()


# --- batch encoding -----------------------------------------------------------------------------------------------


class Segment(NamedTuple):
    """``count`` consecutive (ms, counter) slots of one logical millisecond: counters first .. first + count - 1."""

    timestamp_ms: int
    first_counter: int
    count: int


def random_chunks(words: npt.NDArray[np.uint16], key: str = "hlc-ulid-random-chunks") -> npt.NDArray[np.uint16]:
    """The random fields of a batch as 16-bit chunks: ``(3, n)`` uint16, rows = bits 47..32, 31..16, 15..0.

    ``words`` is the batch's ``(3, n)`` draw, placed as the module docstring says::

        bits 47..32 = w2 >> 15 << 15 | w1 >> 15 << 14 | w0 >> 2
        bits 31..16 = (w0 & 3) << 14 | (w1 & 0x7FFF) >> 1
        bits 15..0  = (w1 & 1) << 15 | (w2 & 0x7FFF)

    The result lives in a per-thread scratch buffer (see :func:`app.schemes._crockford.scratch`).
    """
    w0, w1, w2 = words
    count = words.shape[1]
    chunks = _crockford.scratch(key, RANDOM_WORDS * count, np.uint16).reshape(RANDOM_WORDS, count)
    bits = _crockford.scratch(key + "-bits", count, np.uint16)
    high, middle, low = chunks
    # uint16 left shifts drop what passes bit 15: w0 << 14 keeps w0 & 3, w1 << 15 keeps w1 & 1.
    np.right_shift(w0, W0_OFFSET_BITS, out=high)
    for word, position in ((w1, RANDOM_WORD_BITS - W0_OFFSET_BITS), (w2, RANDOM_WORD_BITS - W0_OFFSET_BITS + 1)):
        np.right_shift(word, WORD_TOP_SHIFT, out=bits)
        np.left_shift(bits, position, out=bits)
        np.bitwise_or(high, bits, out=high)
    np.bitwise_and(w1, RANDOM_GROUP_MASK, out=middle)
    np.right_shift(middle, GROUP_OFFSET_BITS, out=middle)
    np.left_shift(w0, RANDOM_WORD_BITS - W0_OFFSET_BITS, out=bits)
    np.bitwise_or(middle, bits, out=middle)
    np.left_shift(w1, RANDOM_WORD_BITS - GROUP_OFFSET_BITS, out=low)
    np.bitwise_and(w2, RANDOM_GROUP_MASK, out=bits)
    np.bitwise_or(low, bits, out=low)
    return chunks


def random_field(words: npt.NDArray[np.uint16]) -> list[int]:
    """The 48-bit random fields of a batch's ``(3, n)`` random words, as ints (slow path)."""
    high, middle, low = random_chunks(words).tolist()
    return [h << (2 * RANDOM_WORD_BITS) | m << RANDOM_WORD_BITS | lo for h, m, lo in zip(high, middle, low)]


def _counter_table(publisher_id: int) -> npt.NDArray[np.uint32]:
    """ULID characters 10..13 for every counter value (character 13 also holds the publisher ID's top 4 bits)."""
    return _crockford.column_table(publisher_id << PUBLISHER_ID_SHIFT, COUNTER_SHIFT, COUNTER_CHAR, COUNTER_CHARS)


def _random_head_table(publisher_id: int) -> npt.NDArray[np.uint32]:
    """ULID characters 16..19 for every 18-bit value of random bits 47..30 (16 also holds 2 publisher ID bits)."""
    return _crockford.column_table(
        publisher_id << PUBLISHER_ID_SHIFT,
        RANDOM_HEAD_SHIFT,
        RANDOM_HEAD_CHAR,
        RANDOM_HEAD_CHARS,
        index_bits=RANDOM_HEAD_BITS,
    )


def _random_group_table() -> npt.NDArray[np.uint32]:
    """3 characters for the low 15 bits of every 16-bit word, then a newline (overwritten unless last)."""
    return _crockford.column_table(0, RANDOM_SHIFT, RANDOM_GROUP_CHARS[-1], CHARS_PER_GROUP)


class HlcUlidBatch(Batch):
    """HLC-ULIDs of one publisher issued together: consecutive (ms, counter) slots, fresh random per ID.

    ``segments`` lists the slots (usually one logical millisecond; a counter overflow starts another);
    ``random_words`` is the ``(3, count)`` uint16 draw the random fields are made of.
    """

    def __init__(
        self, publisher_id: int, segments: tuple[Segment, ...], random_words: npt.NDArray[np.uint16]
    ) -> None:
        self.publisher_id = publisher_id
        self.segments = segments
        self.random_words = random_words
        self.count = sum(segment.count for segment in segments)

    def encode(self, fmt: str) -> bytes:
        """The batch as ``ulid`` or ``hex`` lines (column-wise, numpy); InvalidOptionError for another format."""
        if self.count <= SMALL_BATCH:  # per-ID formatting beats the column-wise encoder's fixed cost
            return scalar_lines(SCHEME.format, self.values(), fmt)
        if SCHEME.resolve_format(fmt) == "hex":
            return self._encode_hex()
        return self._encode_ulid()

    def _encode_ulid(self) -> bytes:
        count, words = self.count, self.random_words
        publisher = self.publisher_id << PUBLISHER_ID_SHIFT
        rows = _crockford.text_rows(
            [((encode_ulid(seg.timestamp_ms << TIMESTAMP_SHIFT | publisher) + "\n").encode(), seg.count)
             for seg in self.segments]
        )
        counters = _counter_table(self.publisher_id)
        _crockford.write_runs(rows, COUNTER_CHAR, [(counters, seg.first_counter, seg.count) for seg in self.segments])
        # Random bits 47..30 -> characters 16..19; 29..15 -> 20..22; 14..0 -> 23..25. Written left to right, so
        # the 4th byte of the write at 20 is overwritten by the write at 23, whose 4th byte is the newline.
        indices = _crockford.scratch("hlc-ulid-indices", RANDOM_WORDS * count, np.intp).reshape(RANDOM_WORDS, count)
        np.copyto(indices, words, casting="safe")
        head, top_bits = indices[0], _crockford.scratch("hlc-ulid-top-bits", count, np.intp)
        for word in (1, 2):
            np.right_shift(indices[word], WORD_TOP_SHIFT, out=top_bits)
            np.left_shift(top_bits, RANDOM_WORD_BITS + word - 1, out=top_bits)
            np.bitwise_or(head, top_bits, out=head)
        looked_up = _crockford.scratch("hlc-ulid-chars", count, "<u4")
        np.take(_random_head_table(self.publisher_id), head, out=looked_up, mode="wrap")
        _crockford.char_view(rows, RANDOM_HEAD_CHAR)[...] = looked_up
        groups = _random_group_table()
        for word, column in zip((1, 2), RANDOM_GROUP_CHARS):
            np.take(groups, indices[word], out=looked_up, mode="wrap")
            _crockford.char_view(rows, column)[...] = looked_up
        return rows.tobytes()

    def _encode_hex(self) -> bytes:
        rows = _crockford.text_rows(
            [((encode_hex(pack(seg.timestamp_ms, 0, self.publisher_id, 0)) + "\n").encode(), seg.count)
             for seg in self.segments]
        )
        hex4 = _crockford.hex4_table()
        _crockford.write_runs(rows, COUNTER_HEX_COLUMN, [(hex4, seg.first_counter, seg.count) for seg in self.segments])
        chunks = random_chunks(self.random_words)
        indices = _crockford.scratch("hlc-ulid-indices", chunks.size, np.intp).reshape(chunks.shape)
        np.copyto(indices, chunks, casting="safe")
        looked_up = _crockford.scratch("hlc-ulid-chars", self.count, "<u4")
        for chunk in range(RANDOM_WORDS):
            np.take(hex4, indices[chunk], out=looked_up, mode="wrap")
            _crockford.char_view(rows, RANDOM_HEX_COLUMN + chunk * HEX_CHUNK_DIGITS)[...] = looked_up
        return rows.tobytes()

    def values(self) -> list[int]:
        publisher = self.publisher_id << PUBLISHER_ID_SHIFT
        randoms = random_field(self.random_words)
        out: list[int] = []
        start = 0
        for seg in self.segments:
            base = seg.timestamp_ms << TIMESTAMP_SHIFT | publisher
            out.extend(
                base | counter << COUNTER_SHIFT | random
                for counter, random in zip(
                    range(seg.first_counter, seg.first_counter + seg.count), randoms[start : start + seg.count]
                )
            )
            start += seg.count
        return out

    @property
    def high_water(self) -> int:
        return self.segments[-1].timestamp_ms if self.count else -1


# --- generator ----------------------------------------------------------------------------------------------------


class HlcUlidGenerator(Generator):
    """Issues HLC-ULIDs for one publisher ID (SPEC_NOTES.md "HLC-ULID", the document's "How to Generate").

    For each batch the clock is read once (``now``, ms) and compared with the last logical millisecond used:
    ``now > last`` starts at counter 0 in ``now``; ``now == last`` continues with counter + 1; ``now < last`` (the
    clock stepped back, or logical time ran ahead) keeps ``last`` and continues with counter + 1. A batch of n takes
    n consecutive (ms, counter) slots; a counter passing 0xFFFF moves the logical millisecond to ``last + 1`` with
    counter 0 (the reference wraps; this never does). The generator never waits: it moves logical time instead.

    ``floor`` (ms, the high-water mark restored after a restart) makes logical time start above it. ``after``
    (see :meth:`generate`) is the HLC receive rule. ``max_drift_ms`` bounds how far ahead of this node's clock an
    ``after`` may pull logical time. Constructor arguments are validated here: ValueError naming the rule.

    ``stats.clock_rollbacks`` counts clock readings below the largest earlier reading (the wall clock stepping back),
    not logical time running ahead of the clock after a merge or a counter overflow.
    """

    def __init__(
        self,
        publisher_id: int,
        *,
        clock: Clock = time.time_ns,
        rng: RandomSource = os.urandom,
        floor: int = -1,
        max_drift_ms: int = MAX_DRIFT_MS_DEFAULT,
    ) -> None:
        if not 0 <= publisher_id <= PUBLISHER_ID_MAX:
            raise ValueError(f"publisher_id must be in 0..{PUBLISHER_ID_MAX}, got {publisher_id}")
        if not -1 <= floor < TIMESTAMP_MS_MAX:
            raise ValueError(f"floor must be in -1..{TIMESTAMP_MS_MAX - 1} milliseconds, got {floor}")
        if max_drift_ms < 0:
            raise ValueError(f"max_drift_ms must be >= 0, got {max_drift_ms}")
        self.publisher_id = publisher_id
        self.max_drift_ms = max_drift_ms
        self._clock = clock
        self._rng = rng
        self._last_ms = floor
        self._last_counter: int | None = None
        """Counter of the last slot issued in ``_last_ms``; None = nothing issued yet (start above the floor)."""
        self.stats = GeneratorStats()

    def generate(self, count: int, after: int | None = None, **options: Any) -> HlcUlidBatch:
        """Issue ``count`` (1 .. 2**24) HLC-ULIDs in consecutive (ms, counter) slots; never partial, never waits.

        ``after``: the packed integer of another HLC-ULID (received from elsewhere). The HLC receive rule merges its
        (ms, counter) into this node's clock, so every returned ID sorts after ``after`` (by bytes and by text).
        Raises InvalidOptionError for a bad count, an unknown option, an ``after`` that is not a packed HLC-ULID or
        whose timestamp is more than ``max_drift_ms`` ahead of this node's clock; OverflowError past the last
        48-bit millisecond (year 10889).
        """
        if options:
            raise InvalidOptionError(f"hlc-ulid takes only the option 'after', got {', '.join(sorted(options))}")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= BATCH_COUNT_MAX:
            raise InvalidOptionError(f"count must be in 1..{BATCH_COUNT_MAX} for hlc-ulid, got {count!r}")
        now_ns = self._clock()
        now_ms = now_ns // NANOSECS_IN_MILLISECS
        after_slot = None if after is None else self._check_after(after, now_ms)
        self.stats.observe_clock(now_ns, NANOSECS_IN_MILLISECS)

        # The document's local step.
        if now_ms > self._last_ms:
            ms, counter = now_ms, 0
        elif self._last_counter is None:
            ms, counter = self._last_ms + 1, 0  # restored floor: logical time starts above it
        else:
            ms, counter = self._last_ms, self._last_counter + 1
        # The HLC receive rule: l' = max(l, l_m, pt); the counter continues whichever of them l' came from.
        if after_slot is not None:
            after_ms, after_counter = after_slot
            if after_ms > ms:
                ms, counter = after_ms, after_counter + 1
            elif after_ms == ms:
                counter = max(counter, after_counter + 1)

        segments: list[Segment] = []
        remaining = count
        while remaining:
            if counter > COUNTER_MAX:
                self.stats.sequence_exhausted += 1
                ms, counter = ms + 1, 0
            taken = min(remaining, COUNTER_SLOTS - counter)
            segments.append(Segment(ms, counter, taken))
            remaining -= taken
            counter += taken
        if ms > TIMESTAMP_MS_MAX:
            raise OverflowError(f"HLC-ULID logical time would pass {TIMESTAMP_MS_MAX} ms (48 bits)")

        random_bytes = self._rng(RANDOM_BYTES_PER_ID * count)
        if len(random_bytes) != RANDOM_BYTES_PER_ID * count:
            raise ValueError(f"rng returned {len(random_bytes)} bytes, asked for {RANDOM_BYTES_PER_ID * count}")
        words = np.frombuffer(random_bytes, dtype=_RANDOM_WORD_DTYPE).reshape(RANDOM_WORDS, count)

        self._last_ms, self._last_counter = ms, counter - 1
        return HlcUlidBatch(self.publisher_id, tuple(segments), words)

    def _check_after(self, after: object, now_ms: int) -> tuple[int, int]:
        """``(timestamp_ms, counter)`` of a valid ``after``; InvalidOptionError naming the rule otherwise."""
        if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after <= PACKED_MAX:
            raise InvalidOptionError(f"after must be a packed HLC-ULID, an integer in 0..2**{PACKED_BITS}-1")
        after_ms, after_counter, _, _ = unpack(after)
        if after_ms - now_ms > self.max_drift_ms:
            raise InvalidOptionError(
                f"after is {after_ms - now_ms} ms ahead of this node's clock; the limit is "
                f"max_drift_ms={self.max_drift_ms}"
            )
        return after_ms, after_counter

    @property
    def high_water(self) -> int:
        """The last logical millisecond issued (or the floor), in ms."""
        return self._last_ms
