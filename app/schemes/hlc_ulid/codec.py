"""HLC-ULID: a ULID whose 80 entropy bits carry a hybrid-logical-clock counter, a publisher ID and randomness.

Follows docs/schemes/hlc-ulid.md, the HLC-ULID document and its reference implementation
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
14..15 the publisher ID, 16..17 its low 2 bits and random bits 47..40, 18..20 random bits 39..25, 21..23 bits 24..10
and 24..25 bits 9..0. A batch writes characters 10..17 and 18..25 of each ID as two 8-byte words, each the OR of
table lookups (one per character group) whose entries hold the group's characters at their place in the word.

The random field is drawn as 7 bytes per ID from the CSPRNG, read as three planes of little-endian 16-bit words
``w0, w1, w2`` and a plane of bytes ``b`` (one of each per ID), and placed so that each character group is one
lookup of one plane's bits, with no bits gathered from several planes::

    random = b << 40 | (w0 & 0x7FFF) << 25 | (w1 & 0x7FFF) << 10 | (w2 & 0x3FF)

Every ID gets 48 fresh uniform bits; the other 8 drawn bits (the words' top bits, w2's top 6) are not used.
"""

from __future__ import annotations

from app.errors import InvalidIdError
from app.schemes import _crockford
from app.schemes.base import TextForms
from app.schemes.packed import PackedInt

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
"""Most IDs one :meth:`HlcUlidGenerator.generate` call issues (bounds the random draw: 7 bytes per ID)."""

# The random field is drawn as three 16-bit words and a byte per ID (see the module docstring for the placement).
RANDOM_WORDS = 3
RANDOM_WORD_BITS = 16
RANDOM_WORD_BYTES = RANDOM_WORD_BITS // 8
RANDOM_BYTES_PER_ID = RANDOM_WORDS * RANDOM_WORD_BYTES + 1  # 7: the words' planes, then the bytes' plane
RANDOM_HEAD_BITS = 8
"""Random bits 47..40 (characters 16..17, with the publisher ID's low 2 bits): the byte ``b``."""
RANDOM_HEAD_SHIFT = 40
RANDOM_TRIPLE_BITS = 15
"""Random bits of one 3-character group: w0's low 15 (bits 39..25, characters 18..20), w1's (bits 24..10, 21..23)."""
RANDOM_TRIPLE_MASK = (1 << RANDOM_TRIPLE_BITS) - 1
RANDOM_W0_SHIFT = 25
RANDOM_W1_SHIFT = 10
RANDOM_TAIL_BITS = 10
"""Random bits 9..0 (characters 24..25): w2's low 10."""
RANDOM_TAIL_MASK = (1 << RANDOM_TAIL_BITS) - 1
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

# ULID columns that vary inside a batch (see the module docstring): two 8-byte words per ID.
COUNTER_CHAR = 10
COUNTER_CHARS = 4
PUBLISHER_CHAR = 14
PUBLISHER_CHARS = 2
RANDOM_HEAD_CHAR = 16
RANDOM_HEAD_CHARS = 2
RANDOM_TRIPLE_CHARS = (18, 21)
CHARS_PER_TRIPLE = RANDOM_TRIPLE_BITS // _crockford.CHAR_BITS  # 3
RANDOM_TAIL_CHAR = 24
RANDOM_TAIL_CHARS = 2
WORD_CHARS = 8
"""Characters per 8-byte write: 10..17 (counter, publisher ID, random head) and 18..25 (random)."""
WORD_COLUMNS = (COUNTER_CHAR, COUNTER_CHAR + WORD_CHARS)  # 10, 18

# Hex columns that vary inside a batch.
COUNTER_HEX_COLUMN = HEX_SEPARATOR_POSITIONS[0] + 1  # 13
RANDOM_HEX_COLUMN = HEX_SEPARATOR_POSITIONS[2] + 1  # 23
HEX_CHUNK_DIGITS = 4
"""The random field's hex is written as three 4-digit chunks (bits 47..32, 31..16, 15..0)."""


# --- codec: fields <-> packed int ---------------------------------------------------------------------------------


PACKED = PackedInt(
    "HLC-ULID",
    [
        ("timestamp_ms", TIMESTAMP_BITS),
        ("counter", COUNTER_BITS),
        ("publisher_id", PUBLISHER_ID_BITS),
        ("random", RANDOM_BITS),
    ],
    article="an",
)
"""The layout: range check, pack/unpack, bytes and hex of a packed HLC-ULID."""


def pack(timestamp_ms: int, counter: int, publisher_id: int, random: int) -> int:
    """Pack the four fields into the 128-bit integer.

    ``timestamp_ms`` in 0 .. 2**48 - 1, ``counter`` and ``publisher_id`` in 0 .. 0xFFFF, ``random`` in
    0 .. 2**48 - 1. Raises ValueError naming the field whose range is broken. Inverse of :func:`unpack`.
    """
    return PACKED.pack(timestamp_ms, counter, publisher_id, random)


def unpack(value: int) -> tuple[int, int, int, int]:
    """Split a packed HLC-ULID into ``(timestamp_ms, counter, publisher_id, random)``.

    Raises ValueError unless ``0 <= value < 2**128``. Inverse of :func:`pack`.
    """
    PACKED.check(value)
    return (
        value >> TIMESTAMP_SHIFT,
        (value >> COUNTER_SHIFT) & COUNTER_MAX,
        (value >> PUBLISHER_ID_SHIFT) & PUBLISHER_ID_MAX,
        (value >> RANDOM_SHIFT) & RANDOM_MAX,
    )


# --- codec: packed int <-> bytes ----------------------------------------------------------------------------------


to_bytes = PACKED.to_bytes
"""The 16 big-endian bytes of a packed HLC-ULID."""
from_bytes = PACKED.from_bytes
"""The packed HLC-ULID in 16 big-endian bytes; ValueError for any other length."""


# --- codec: packed int <-> text -----------------------------------------------------------------------------------


def encode_ulid(value: int) -> str:
    """The canonical text: 26 uppercase Crockford base32 characters (ULID)."""
    PACKED.check(value)
    return _crockford.encode(value)


def decode_ulid(text: str) -> int:
    """Parse a ULID string with ULID rules: exactly 26 characters, any case, O->0, I/L->1, first character 0..7.

    Raises InvalidIdError naming the rule broken.
    """
    return _crockford.decode(text, _crockford.ULID)


def encode_hex(value: int) -> str:
    """The document's hyphenated hex ``TTTTTTTTTTTT-CCCC-PPPP-RRRRRRRRRRRR`` (12-4-4-12, 35 characters), lowercase."""
    digits = PACKED.hex(value)
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


TEXT = TextForms("hlc-ulid", ulid=encode_ulid, hex=encode_hex)
"""The text forms, canonical first: the scheme and its batches format through this table."""
