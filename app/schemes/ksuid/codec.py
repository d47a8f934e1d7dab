"""KSUID (segmentio/ksuid): 160-bit IDs of a 32-bit second timestamp and a 128-bit payload.

Follows docs/schemes/ksuid.md and the reference implementation
(``ksuid.go``, ``base62.go``; vectors from its README and ``ksuid_test.go``)::

    159                             128 127                                                           0
    +--------------------------------+---------------------------------------------------------------+
    | timestamp (32 bits)            | payload (128 bits)                                            |
    | seconds since 1,400,000,000    | 16 random bytes (CSPRNG), then +1 per ID within one second    |
    | (2014-05-13T16:53:20Z)         |                                                               |
    +--------------------------------+---------------------------------------------------------------+
    base62 (canonical): 27 characters 0-9A-Za-z, left-padded with '0', e.g. 0ujtsYcgvSTl8PAuAdqWYSMnLOv
    hex:                40 lowercase hex digits (read in either case), e.g. 0669f7efb5a1cd34b5f99d1154fb6853345c9735

* timestamp: the stored field counts seconds from the KSUID epoch; the decode field ``timestamp_s`` is Unix seconds
  (stored + 1,400,000,000), so valid Unix seconds are 1,400,000,000 .. 1,400,000,000 + 2**32 - 1 (year 2150).
* payload: decode field ``payload``, 32 lowercase hex digits (wider than 53 bits).
* Every 160-bit value is a KSUID. Base62 text above ``aWgEPTl1tmebfsQzFP4bxwgy80V`` (2**160 - 1) is refused.

Packed: ``(timestamp_s - EPOCH_S) << 128 | payload``: 20 bytes big-endian; packed order = text order = time order.

Generator (monotonic, like ulid's monotonic mode): each ID is the previous packed value + 1 (the reference's
``Next()``) while the clock stays in (or falls behind) the last second used; a new second draws 16 fresh random
bytes. A payload overflow carries into the timestamp (the second advances by one): issuing never fails for it.

The native timestamp unit (high-water marks, :attr:`KsuidGenerator.high_water`) is the Unix second. The numpy
batch encoders and the generator live in :mod:`app.schemes.ksuid.generator`.
"""

from __future__ import annotations

from app.errors import InvalidIdError
from app.schemes.base import (
    TextForms,
)
from app.schemes.packed import PackedInt

# --- layout -------------------------------------------------------------------------------------------------------

TIMESTAMP_BITS = 32
PAYLOAD_BITS = 128
PACKED_BITS = TIMESTAMP_BITS + PAYLOAD_BITS  # 160
PACKED_BYTES = PACKED_BITS // 8  # 20
PAYLOAD_BYTES = PAYLOAD_BITS // 8  # 16

PAYLOAD_SHIFT = 0
TIMESTAMP_SHIFT = PAYLOAD_SHIFT + PAYLOAD_BITS  # 128

PAYLOAD_MAX = (1 << PAYLOAD_BITS) - 1
PACKED_MAX = (1 << PACKED_BITS) - 1
EPOCH_S = 1_400_000_000
"""The KSUID epoch in Unix seconds (2014-05-13T16:53:20Z): stored timestamp 0."""
TIMESTAMP_S_MIN = EPOCH_S
TIMESTAMP_S_MAX = EPOCH_S + (1 << TIMESTAMP_BITS) - 1
"""The last Unix second a KSUID can hold (2150-06-19T23:21:35Z)."""

NANOSECS_IN_SECS = 1_000_000_000
BATCH_COUNT_MAX = 1 << 24
"""Most IDs one :meth:`KsuidGenerator.generate` call may be asked for."""

# --- text ---------------------------------------------------------------------------------------------------------

BASE62_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
BASE62_RADIX = len(BASE62_ALPHABET)  # 62
BASE62_LEN = 27
"""Characters of the canonical text: 62**27 > 2**160 > 62**26."""
BASE62_MAX_TEXT = "aWgEPTl1tmebfsQzFP4bxwgy80V"
"""The base62 text of 2**160 - 1, the largest KSUID."""
HEX_LEN = 2 * PACKED_BYTES  # 40

_BASE62_INDEX = {char: index for index, char in enumerate(BASE62_ALPHABET)}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


# --- codec: fields <-> packed int ---------------------------------------------------------------------------------


PACKED = PackedInt("KSUID", [("timestamp", TIMESTAMP_BITS), ("payload", PAYLOAD_BITS)])
"""The layout's range check, bytes and hex (the stored timestamp counts from ``EPOCH_S``: :func:`pack` maps it)."""


def pack(timestamp_s: int, payload: int) -> int:
    """Pack Unix seconds ``timestamp_s`` (1,400,000,000 .. 1,400,000,000 + 2**32 - 1) and a 128-bit ``payload``.

    Raises ValueError naming the field whose range is broken. Inverse of :func:`unpack`.
    """
    if not TIMESTAMP_S_MIN <= timestamp_s <= TIMESTAMP_S_MAX:
        raise ValueError(f"KSUID timestamp_s must be in {TIMESTAMP_S_MIN}..{TIMESTAMP_S_MAX}, got {timestamp_s}")
    if not 0 <= payload <= PAYLOAD_MAX:
        raise ValueError(f"KSUID payload must be in 0..2**{PAYLOAD_BITS}-1, got {payload}")
    return (timestamp_s - EPOCH_S) << TIMESTAMP_SHIFT | payload


def unpack(value: int) -> tuple[int, int]:
    """Split a packed KSUID into ``(timestamp_s, payload)``: Unix seconds and the 128-bit payload.

    Raises ValueError unless ``0 <= value < 2**160``. Inverse of :func:`pack`.
    """
    PACKED.check(value)
    return (value >> TIMESTAMP_SHIFT) + EPOCH_S, value & PAYLOAD_MAX


to_bytes = PACKED.to_bytes
"""The 20 big-endian bytes of a packed KSUID (the reference's binary form)."""
from_bytes = PACKED.from_bytes
"""The packed KSUID in 20 big-endian bytes; ValueError for any other length."""


# --- codec: packed int <-> text -----------------------------------------------------------------------------------


_PAIR_RADIX = BASE62_RADIX**2
_PAIRS = tuple(high + low for high in BASE62_ALPHABET for low in BASE62_ALPHABET)
"""The two base62 digits of every value below 62**2 (index = the value)."""
_QUAD_RADIX = _PAIR_RADIX**2
_OCTET_RADIX = _QUAD_RADIX**2
"""62**8: the 27 digits are 3 on top and three groups of 8, each two groups of 4, each two pairs."""


def encode_base62(value: int) -> str:
    """The canonical text: 27 base62 characters ``0-9A-Za-z``, left-padded with ``0`` (``base62.go``).

    Three divisions of the 160-bit value by 62**8, then small-int divisions into digit pairs read from a table,
    where the reference divides 27 times by 62 (``tests/schemes/test_ksuid.py`` checks one against the other).
    Raises ValueError unless ``0 <= value < 2**160``.
    """
    PACKED.check(value)
    rest, f = divmod(value, _OCTET_RADIX)
    top, e = divmod(rest, _OCTET_RADIX)
    top, d = divmod(top, _OCTET_RADIX)  # top < 62**3
    dh, dl = divmod(d, _QUAD_RADIX)
    eh, el = divmod(e, _QUAD_RADIX)
    fh, fl = divmod(f, _QUAD_RADIX)
    p, r = _PAIRS, _PAIR_RADIX
    return (
        f"{BASE62_ALPHABET[top // r]}{p[top % r]}{p[dh // r]}{p[dh % r]}{p[dl // r]}{p[dl % r]}"
        f"{p[eh // r]}{p[eh % r]}{p[el // r]}{p[el % r]}{p[fh // r]}{p[fh % r]}{p[fl // r]}{p[fl % r]}"
    )


def decode_base62(text: str) -> int:
    """Parse the 27-character base62 form (case-sensitive); InvalidIdError naming the rule broken.

    Refuses another length, a character outside ``0-9A-Za-z`` and a value above ``aWgEPTl1tmebfsQzFP4bxwgy80V``.
    """
    if len(text) != BASE62_LEN:
        raise InvalidIdError(f"KSUID base62 must be exactly {BASE62_LEN} characters long, got {len(text)}")
    value = 0
    for position, char in enumerate(text):
        digit = _BASE62_INDEX.get(char)
        if digit is None:
            raise InvalidIdError(
                f"KSUID base62 must contain only 0-9 A-Z a-z (case-sensitive), got {char!r} at position {position}"
            )
        value = value * BASE62_RADIX + digit
    if value > PACKED_MAX:
        raise InvalidIdError(f"KSUID base62 overflows 160 bits: the largest is {BASE62_MAX_TEXT}, got {text}")
    return value


def encode_hex(value: int) -> str:
    """40 lowercase hex digits."""
    return PACKED.hex(value)


def decode_hex(text: str) -> int:
    """Exactly 40 hex digits, either case; InvalidIdError naming the rule otherwise."""
    if len(text) != HEX_LEN:
        raise InvalidIdError(f"KSUID hex must be exactly {HEX_LEN} hex digits long, got {len(text)}")
    for position, char in enumerate(text):
        if char not in _HEX_DIGITS:
            raise InvalidIdError(f"KSUID hex must contain only hex digits 0-9 a-f, got {char!r} at position {position}")
    return int(text, 16)


def decode(text: str) -> int:
    """Parse either text form by its length: 27 base62 characters or 40 hex digits; InvalidIdError otherwise."""
    if len(text) == BASE62_LEN:
        return decode_base62(text)
    if len(text) == HEX_LEN:
        return decode_hex(text)
    raise InvalidIdError(
        f"KSUID must be {BASE62_LEN} base62 characters or {HEX_LEN} hex digits, got {len(text)} characters"
    )


TEXT = TextForms("ksuid", base62=encode_base62, hex=encode_hex)
"""The text forms, canonical first: the scheme and its batches format through this table."""
