"""Eight-byte IDs (LableOrg/java-uniqueid): 64-bit IDs of a millisecond timestamp, sequence, generator and cluster.

Follows docs/schemes/eight-byte.md and the reference's ``IDBuilder`` and its
tests (v4.7, 11-bit generator IDs)::

    TTTTTTTT TTTTTTTT TTTTTTTT TTTTTTTT TTTTTTTT TTSSSSSS GGGMGGGG GGGGCCCC

     63                                          22 21      16 15    13  12  11          4 3       0
    +----------------------------------------------+----------+--------+---+-------------+---------+
    | timestamp_ms (42 bits)                       | sequence | gen ID | M | gen ID      | cluster |
    |  SPREAD: bit-reversed over all 64 bits       | (6 bits) | 10..8  |   | 7..0        | ID (4)  |
    |  TIME_SEQUENTIAL: ts << 22                   |          |        |   |             |         |
    +----------------------------------------------+----------+--------+---+-------------+---------+

* timestamp: ms since the Unix epoch, 0 .. 0x3FFFFFFFFFF (2109-05-15). SPREAD (mode bit 0, the default) stores
  Java's ``Long.reverse(ts)``: bit i of the timestamp lands on bit 63 - i, so it fills bits 63..22 (bit order
  reversed, not byte order: the document's "reverse byte-order" contradicts the reference code and tests).
  TIME_SEQUENTIAL (mode bit 1) stores ``ts << 22``. Decoding reads bit 12 to know which.
* sequence: 0..63 within one millisecond and generator ID (64 IDs per ms per generator ID is the format's cap).
* generator ID: 0..2047 (11 bits), split around the mode bit. Every 64-bit value decodes: no reserved bits remain.
* cluster ID: 0..15, configuration.

Text: 16 lowercase hex digits (canonical; parsed in either case), unsigned decimal (alternate) and signed decimal
(``signed``: the decimal of the 8 bytes read as a two's-complement signed 64-bit integer, Java's ``long`` view,
which java-uniqueid's users store; it fits a BIGINT column where half of the unsigned decimals do not). A
16-character all-digit string is read as hex, so decimals of exactly 16 digits (10**15 .. 10**16 - 1) are only
written, never read back as decimal; decimals are read without leading zeros, and a leading ``-`` reads a negative
signed decimal (a non-negative one is the same text as the unsigned decimal). Packed order is only meaningful in
TIME_SEQUENTIAL mode: (timestamp, sequence) order.
"""

from __future__ import annotations

import enum

import numpy as np
import numpy.typing as npt

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes.base import (
    TextForms,
)
from app.schemes.packed import PackedInt

# --- layout -------------------------------------------------------------------------------------------------------

PACKED_BITS = 64
PACKED_BYTES = PACKED_BITS // 8
PACKED_MAX = (1 << PACKED_BITS) - 1

TIMESTAMP_BITS = 42
SEQUENCE_BITS = 6
GENERATOR_ID_BITS = 11
GENERATOR_ID_LOW_BITS = 8
GENERATOR_ID_HIGH_BITS = GENERATOR_ID_BITS - GENERATOR_ID_LOW_BITS
MODE_BITS = 1
CLUSTER_ID_BITS = 4

CLUSTER_ID_SHIFT = 0
GENERATOR_ID_LOW_SHIFT = CLUSTER_ID_SHIFT + CLUSTER_ID_BITS  # 4
MODE_SHIFT = GENERATOR_ID_LOW_SHIFT + GENERATOR_ID_LOW_BITS  # 12
GENERATOR_ID_HIGH_SHIFT = MODE_SHIFT + MODE_BITS  # 13
SEQUENCE_SHIFT = GENERATOR_ID_HIGH_SHIFT + GENERATOR_ID_HIGH_BITS  # 16
TIMESTAMP_SHIFT = SEQUENCE_SHIFT + SEQUENCE_BITS  # 22

TIMESTAMP_MS_MAX = (1 << TIMESTAMP_BITS) - 1
SEQUENCE_MAX = (1 << SEQUENCE_BITS) - 1
SEQUENCE_VALUES = 1 << SEQUENCE_BITS
"""IDs per millisecond per generator ID: the format's hard cap."""
GENERATOR_ID_MAX = (1 << GENERATOR_ID_BITS) - 1
CLUSTER_ID_MAX = (1 << CLUSTER_ID_BITS) - 1

TIMESTAMP_FIELD_MASK = TIMESTAMP_MS_MAX << TIMESTAMP_SHIFT
SEQUENCE_MASK = SEQUENCE_MAX
GENERATOR_ID_LOW_MASK = (1 << GENERATOR_ID_LOW_BITS) - 1
GENERATOR_ID_HIGH_MASK = (1 << GENERATOR_ID_HIGH_BITS) - 1
MODE_MASK = (1 << MODE_BITS) - 1
CLUSTER_ID_MASK = CLUSTER_ID_MAX

NANOSECS_IN_MILLISECS = 1_000_000

# --- text ---------------------------------------------------------------------------------------------------------

HEX_LEN = PACKED_BYTES * 2  # 16
DECIMAL_LEN_MAX = len(str(PACKED_MAX))  # 20

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_DECIMAL_DIGITS = frozenset("0123456789")


class Mode(enum.IntEnum):
    """The mode bit (bit 12): how the timestamp is stored. Names lowercased are the API's ``mode`` values."""

    SPREAD = 0
    """``Long.reverse(ts)``: consecutive IDs spread over the key space (the reference's default)."""
    TIME_SEQUENTIAL = 1
    """``ts << 22``: IDs sort by time."""

    @property
    def label(self) -> str:
        """``"spread"`` or ``"time_sequential"``."""
        return self.name.lower()

    @classmethod
    def from_option(cls, option: object) -> Mode:
        """The mode named ``option`` (``"spread"``, ``"time_sequential"``, a Mode, or None for SPREAD).

        Raises InvalidOptionError naming the allowed values.
        """
        if option is None:
            return cls.SPREAD
        if isinstance(option, cls):
            return option
        mode = _MODES.get(option) if isinstance(option, str) else None
        if mode is not None:
            return mode
        allowed = ", ".join(mode.label for mode in cls)
        raise InvalidOptionError(f"mode must be one of {allowed} for eight-byte, got {option!r}")


_MODES = {mode.label: mode for mode in Mode}
"""The API's mode names, each to its Mode."""


# --- codec: bit reversal ------------------------------------------------------------------------------------------


_BIT_REVERSED = bytes(int(f"{byte:08b}"[::-1], 2) for byte in range(256))
"""Every byte value with its 8 bits in reverse order (index = the byte)."""
_BIT_REVERSED_BYTES = np.frombuffer(_BIT_REVERSED, dtype=np.uint8)


def reverse_bits(value: int) -> int:
    """Java ``Long.reverse`` on a 64-bit unsigned value: bit i moves to bit 63 - i (its own inverse). The bytes in
    reverse order, each byte's bits reversed (OverflowError outside 0..2**64-1)."""
    return int.from_bytes(value.to_bytes(PACKED_BYTES, "little").translate(_BIT_REVERSED), "big")


def reverse_bits_array(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Vectorised :func:`reverse_bits`: bit-reverse every byte (lookup table), then reverse the byte order."""
    as_bytes = np.ascontiguousarray(values, dtype=np.uint64).view(np.uint8)
    return _BIT_REVERSED_BYTES[as_bytes].view(np.uint64).byteswap()


# --- codec: fields <-> packed int ---------------------------------------------------------------------------------


def _low_bits(generator_id: int, cluster_id: int) -> int:
    """Bits 15..0 except the mode bit: generator ID bits 10..8, 7..0 and the cluster ID."""
    return (
        (generator_id >> GENERATOR_ID_LOW_BITS) << GENERATOR_ID_HIGH_SHIFT
        | (generator_id & GENERATOR_ID_LOW_MASK) << GENERATOR_ID_LOW_SHIFT
        | cluster_id << CLUSTER_ID_SHIFT
    )


PACKED = PackedInt(
    "eight-byte ID",
    [
        ("timestamp", TIMESTAMP_BITS),
        ("sequence", SEQUENCE_BITS),
        ("generator_id_high", GENERATOR_ID_HIGH_BITS),
        ("mode", MODE_BITS),
        ("generator_id_low", GENERATOR_ID_LOW_BITS),
        ("cluster_id", CLUSTER_ID_BITS),
    ],
    article="an",
)
"""The layout's range check, bytes and hex (the timestamp's place depends on the mode: :func:`pack` places it)."""


def pack(timestamp_ms: int, sequence: int, generator_id: int, cluster_id: int, mode: Mode = Mode.SPREAD) -> int:
    """Pack the fields into the 64-bit integer, exactly as the reference's ``IDBuilder.build``.

    ``timestamp_ms`` in 0..0x3FFFFFFFFFF, ``sequence`` 0..63, ``generator_id`` 0..2047, ``cluster_id`` 0..15.
    Raises ValueError naming the field whose range is broken. Inverse of :func:`unpack`.
    """
    if not 0 <= timestamp_ms <= TIMESTAMP_MS_MAX:
        raise ValueError(f"eight-byte timestamp_ms must be in 0..{TIMESTAMP_MS_MAX}, got {timestamp_ms}")
    if not 0 <= sequence <= SEQUENCE_MAX:
        raise ValueError(f"eight-byte sequence must be in 0..{SEQUENCE_MAX}, got {sequence}")
    if not 0 <= generator_id <= GENERATOR_ID_MAX:
        raise ValueError(f"generator ID must be in 0..{GENERATOR_ID_MAX}, got {generator_id}")
    if not 0 <= cluster_id <= CLUSTER_ID_MAX:
        raise ValueError(f"cluster ID must be in 0..{CLUSTER_ID_MAX}, got {cluster_id}")
    mode = Mode(mode)
    if mode is Mode.SPREAD:
        timestamp_bits = reverse_bits(timestamp_ms)
    else:
        timestamp_bits = timestamp_ms << TIMESTAMP_SHIFT
    return timestamp_bits | sequence << SEQUENCE_SHIFT | mode << MODE_SHIFT | _low_bits(generator_id, cluster_id)


def unpack(value: int) -> tuple[int, int, int, int, Mode]:
    """Split a packed ID into ``(timestamp_ms, sequence, generator_id, cluster_id, mode)``.

    The mode bit (12) says whether the timestamp bits are reversed. Raises ValueError unless ``0 <= value < 2**64``.
    """
    PACKED.check(value)
    mode = Mode((value >> MODE_SHIFT) & MODE_MASK)
    if mode is Mode.SPREAD:
        timestamp_ms = reverse_bits(value & TIMESTAMP_FIELD_MASK)
    else:
        timestamp_ms = value >> TIMESTAMP_SHIFT
    generator_id = ((value >> GENERATOR_ID_HIGH_SHIFT) & GENERATOR_ID_HIGH_MASK) << GENERATOR_ID_LOW_BITS | (
        (value >> GENERATOR_ID_LOW_SHIFT) & GENERATOR_ID_LOW_MASK
    )
    return (
        timestamp_ms,
        (value >> SEQUENCE_SHIFT) & SEQUENCE_MASK,
        generator_id,
        (value >> CLUSTER_ID_SHIFT) & CLUSTER_ID_MASK,
        mode,
    )


# --- codec: packed int <-> bytes ----------------------------------------------------------------------------------


to_bytes = PACKED.to_bytes
"""The 8 big-endian bytes of a packed ID (the reference's ``byte[]``)."""
from_bytes = PACKED.from_bytes
"""The packed ID in 8 big-endian bytes; ValueError for any other length."""


# --- codec: packed int <-> text -----------------------------------------------------------------------------------


def encode_hex(value: int) -> str:
    """16 lowercase hex digits (canonical)."""
    return PACKED.hex(value)


def decode_hex(text: str) -> int:
    """Exactly 16 hex digits, either case; InvalidIdError naming the rule otherwise."""
    if len(text) != HEX_LEN:
        raise InvalidIdError(f"eight-byte hex ID must be exactly {HEX_LEN} hex digits long, got {len(text)}")
    for position, char in enumerate(text):
        if char not in _HEX_DIGITS:
            raise InvalidIdError(
                f"eight-byte hex ID must contain only hex digits 0-9 a-f, got {char!r} at position {position}"
            )
    return int(text, 16)


def encode_decimal(value: int) -> str:
    """The unsigned decimal form (no leading zeros)."""
    PACKED.check(value)
    return str(value)


def decode_decimal(text: str) -> int:
    """An unsigned decimal of 1..20 ASCII digits, no leading zeros, at most 2**64 - 1; InvalidIdError otherwise."""
    if not 1 <= len(text) <= DECIMAL_LEN_MAX:
        raise InvalidIdError(f"eight-byte decimal ID must be 1 to {DECIMAL_LEN_MAX} digits long, got {len(text)}")
    for position, char in enumerate(text):
        if char not in _DECIMAL_DIGITS:
            raise InvalidIdError(
                f"eight-byte decimal ID must contain only digits 0-9, got {char!r} at position {position}"
            )
    if len(text) > 1 and text[0] == "0":
        raise InvalidIdError("eight-byte decimal ID must not have leading zeros")
    value = int(text)
    if value > PACKED_MAX:
        raise InvalidIdError(f"eight-byte decimal ID must fit in 64 bits (at most {PACKED_MAX}), got {text}")
    return value


SIGNED_MIN = -(1 << (PACKED_BITS - 1))
"""The smallest signed form: ``-9223372036854775808`` (Java's ``Long.MIN_VALUE``)."""


def encode_signed(value: int) -> str:
    """The signed decimal of the packed value read as a two's-complement 64-bit integer (Java's ``long``)."""
    PACKED.check(value)
    return str(value - (1 << PACKED_BITS) if value >> (PACKED_BITS - 1) else value)


def decode_signed(text: str) -> int:
    """A negative signed decimal (``-`` then 1..19 digits, no leading zeros, at least -2**63) back to the packed
    value; InvalidIdError naming the rule otherwise. Non-negative signed decimals are read by
    :func:`decode_decimal` (the same text)."""
    digits = text[1:]
    if not text.startswith("-") or not 1 <= len(digits) <= len(str(SIGNED_MIN)) - 1:
        raise InvalidIdError(
            f"eight-byte signed ID must be '-' and 1 to {len(str(SIGNED_MIN)) - 1} digits, got {text!r}"
        )
    for position, char in enumerate(digits, start=1):
        if char not in _DECIMAL_DIGITS:
            raise InvalidIdError(
                f"eight-byte signed ID must contain only digits after '-', got {char!r} at position {position}"
            )
    if digits[0] == "0":
        raise InvalidIdError("eight-byte signed ID must not have leading zeros (nor be -0)")
    value = -int(digits)
    if value < SIGNED_MIN:
        raise InvalidIdError(
            f"eight-byte signed ID must fit in a signed 64-bit integer (at least {SIGNED_MIN}), got {text}"
        )
    return value + (1 << PACKED_BITS)


def decode(text: str) -> int:
    """Parse any text form: 16 hex digits (any case), an unsigned decimal, or a negative signed decimal.

    A 16-character string of digits only is read as hex (both forms are possible; hex is canonical). Any other
    all-digit string is decimal; anything else must be 16 hex digits. Raises InvalidIdError naming the rule broken.
    """
    if len(text) == HEX_LEN:
        return decode_hex(text)
    if text.startswith("-"):
        return decode_signed(text)
    if text and all(char in _DECIMAL_DIGITS for char in text):
        return decode_decimal(text)
    if text and all(char in _HEX_DIGITS for char in text):
        raise InvalidIdError(f"eight-byte hex ID must be exactly {HEX_LEN} hex digits long, got {len(text)}")
    bad = next((char for char in text if char not in _HEX_DIGITS), "")
    raise InvalidIdError(
        f"eight-byte ID must be {HEX_LEN} hex digits or an unsigned decimal integer, "
        f"got {len(text)} characters" + (f" including {bad!r}" if bad else "")
    )


TEXT = TextForms("eight-byte", hex=encode_hex, decimal=encode_decimal, signed=encode_signed)
"""The text forms, canonical first: the scheme and its batches format through this table."""
