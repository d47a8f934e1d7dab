"""SIQ: 112-bit IDs made of a 1/65536-second timestamp, a shard, a domain hash, a counter and a type qualifier.

Follows docs/schemes/siq.md and the reference library (``yusurko/suou``, ``src/suou/iding.py``)::

    111                                     56 55      48 47                    16 15              w w-1     0
    +------------------------------------------+----------+-----------------------+-----------------+---------+
    |  timestamp = floor(unix_seconds * 65536) |  shard   |      domain hash      |     counter     | suffix  |
    |  40-bit seconds . 16-bit binary fraction | (8 bits) |       (32 bits)       |  (16 - w bits)  | (w bits)|
    +------------------------------------------+----------+-----------------------+-----------------+---------+
    storage form: the 14 bytes above, left-padded with two zero bytes to 16
    did form:     "did:siq:" + base32(crc32 as a 6-byte field + the 14 bytes), lowercase, first 3 chars ("aaa")
                  dropped: 29 characters (37 with the prefix)
    hex form:     28 lowercase hex digits        decimal form: the integer, no leading zeros

* timestamp: one native tick is 1/65536 s (~15.26 µs); seconds = tick >> 16, fraction = tick & 0xFFFF.
* domain hash: the last 4 bytes of SHA-256(domain), big-endian; ``''`` and ``'0'`` hash to 0.
* qualifier: a type code whose leading 1 only marks the suffix width w (3, 4 or 5); the suffix is the code mod
  2**w and the counter takes the 16 - w bits above it. The low bits decode without the marker: bit 0 = 1 means a
  3-bit suffix, low three bits ``110`` a 4-bit one, anything else a 5-bit one. This is a complete prefix code:
  every 16-bit pattern decodes, to one of the named types or to ``unassigned`` (codes 50, 58, 60).

The did form starts with the checksum, so only the hex form (and the packed bytes) sort like the IDs.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zlib
from typing import NamedTuple

from app.errors import InvalidIdError
from app.schemes.base import (
    TextForms,
)
from app.schemes.packed import PackedInt

# --- layout -------------------------------------------------------------------------------------------------------

BYTE_BITS = 8
HEX_DIGIT_BITS = 4
FRACTION_BITS = 16
SECONDS_BITS = 40
TICK_BITS = SECONDS_BITS + FRACTION_BITS  # 56
SHARD_BITS = 8
DOMAIN_HASH_BITS = 32
LOW_BITS = 16
"""The serial-and-qualifier field: ``counter << w | suffix``."""
PACKED_BITS = TICK_BITS + SHARD_BITS + DOMAIN_HASH_BITS + LOW_BITS  # 112
PACKED_BYTES = PACKED_BITS // BYTE_BITS  # 14
STORAGE_BYTES = 16
"""The storage form: the packed bytes left-padded with zero bytes."""

LOW_SHIFT = 0
DOMAIN_HASH_SHIFT = LOW_SHIFT + LOW_BITS  # 16
SHARD_SHIFT = DOMAIN_HASH_SHIFT + DOMAIN_HASH_BITS  # 48
TICK_SHIFT = SHARD_SHIFT + SHARD_BITS  # 56

TICK_MAX = (1 << TICK_BITS) - 1
FRACTION_MASK = (1 << FRACTION_BITS) - 1
SHARD_MAX = (1 << SHARD_BITS) - 1
DOMAIN_HASH_MAX = (1 << DOMAIN_HASH_BITS) - 1
LOW_MASK = (1 << LOW_BITS) - 1
PACKED_MAX = (1 << PACKED_BITS) - 1

TICKS_IN_SECS = 1 << FRACTION_BITS  # 65536
NANOSECS_IN_SECS = 1_000_000_000
NANOSECS_PER_TICK = NANOSECS_IN_SECS / TICKS_IN_SECS  # 15258.7890625

DOMAIN_HASH_BYTES = DOMAIN_HASH_BITS // BYTE_BITS

# --- qualifiers ---------------------------------------------------------------------------------------------------

QUALIFIERS: dict[str, tuple[int, int]] = {
    # w = 3: leaves (counter 13 bits)
    "content": (15, 3),
    "multi": (11, 3),
    "manytomany": (13, 3),
    "ternary": (9, 3),
    # w = 4 (counter 12 bits)
    "thread": (22, 4),
    "message": (30, 4),
    # w = 5 (counter 11 bits)
    "user": (32, 5),
    "tag": (34, 5),
    "group": (36, 5),
    "event": (40, 5),
    "channel": (42, 5),
    "invite": (44, 5),
    "application": (48, 5),
    "collection": (52, 5),
    "premium": (56, 5),
}
"""Qualifier name (the reference ``SiqType`` enum name, lowercase) -> (code, suffix width w)."""

UNASSIGNED = "unassigned"
UNASSIGNED_CODES = (50, 58, 60)
"""Structurally valid 5-bit codes the reference leaves unnamed; they decode as ``"unassigned"``."""

SUFFIX_WIDTHS = (3, 4, 5)
_QUALIFIER_BY_CODE = {code: name for name, (code, _width) in QUALIFIERS.items()}
_SUFFIX3_FLAG = 0b1
"""Low bit set: a 3-bit suffix."""
_SUFFIX4_PATTERN = 0b110
_SUFFIX4_PATTERN_MASK = 0b111
"""Low three bits 110: a 4-bit suffix. Anything else (bit 0 clear): a 5-bit suffix."""

# --- text ---------------------------------------------------------------------------------------------------------

DID_PREFIX = "did:siq:"
DID_PREFIX_LEN: int = len(DID_PREFIX)  # 8
CRC_FIELD_BYTES = 6
"""The CRC-32 is written as a 6-byte big-endian field (its top 16 bits are always zero)."""
DID_DROPPED_CHARS = 3
"""Leading base32 characters dropped from the did form: 15 bits of the CRC field, always zero ("aaa")."""
DID_BLOCK_BYTES = CRC_FIELD_BYTES + PACKED_BYTES  # 20 bytes = 160 bits = 32 base32 characters
BASE32_CHAR_BITS = 5
DID_BODY_LEN = DID_BLOCK_BYTES * BYTE_BITS // BASE32_CHAR_BITS - DID_DROPPED_CHARS  # 29
DID_LEN: int = DID_PREFIX_LEN + DID_BODY_LEN  # 37
DID_FIRST_CHAR_MAX = "p"
"""The first body character carries one more always-zero bit of the CRC field, so it is one of a..p."""
HEX_LEN: int = PACKED_BITS // HEX_DIGIT_BITS  # 28
DECIMAL_LEN_MAX = len(str(PACKED_MAX))  # 34

BASE32_ALPHABET = b"abcdefghijklmnopqrstuvwxyz234567"
"""RFC 4648 base32, lowercase (the did form's case)."""

_BASE32_RE = re.compile(r"[A-Za-z2-7]*")
_HEX_RE = re.compile(r"[0-9A-Fa-f]*")
_DECIMAL_RE = re.compile(r"[0-9]*")


# --- domain hash and qualifier codes -----------------------------------------------------------------------------


def domain_hash(domain: str) -> int:
    """The 32-bit domain hash: the last 4 bytes of SHA-256(domain), big-endian; ``''`` and ``'0'`` give 0.

    ``domain`` must be ASCII (write IDNs in their punycode form), as in the reference ``make_domain_hash``;
    raises ValueError otherwise. docs/schemes/siq.md "Layout", domain hash row.
    """
    if not domain or domain == "0":
        return 0
    if not domain.isascii():
        raise ValueError(f"SIQ domain must be ASCII (use the punycode form of an IDN), got {domain!r}")
    return int.from_bytes(hashlib.sha256(domain.encode("ascii")).digest()[-DOMAIN_HASH_BYTES:], "big")


def suffix_width(low: int) -> int:
    """The qualifier suffix width w (3, 4 or 5) encoded in the low bits of the 16-bit serial field."""
    if low & _SUFFIX3_FLAG:
        return 3
    if low & _SUFFIX4_PATTERN_MASK == _SUFFIX4_PATTERN:
        return 4
    return 5


def qualifier_width(code: int) -> int:
    """The suffix width w of a qualifier code (its leading 1 is the width marker).

    Raises ValueError naming the rule for a structurally invalid code: no marker at bit 3, 4 or 5, or a suffix
    that would decode to another width (7, 8, 17, 33, 38, 64...). Unassigned valid codes (50, 58, 60) pass.
    """
    width = code.bit_length() - 1
    if code < 0 or width not in SUFFIX_WIDTHS:
        raise ValueError(
            f"SIQ qualifier code must be in 8..63 (a 3-, 4- or 5-bit suffix after its marker bit), got {code}"
        )
    if suffix_width(code) != width:
        raise ValueError(
            f"SIQ qualifier code {code} is structurally invalid: its marker gives a {width}-bit suffix but the "
            f"suffix {code - (1 << width):0{width}b} decodes as {suffix_width(code)}-bit "
            "(bit 0 = 1: 3 bits; low bits 110: 4 bits; otherwise 5 bits)"
        )
    return width


def qualifier_name(code: int) -> str:
    """The qualifier's name for a structurally valid code, ``"unassigned"`` for 50, 58, 60 (ValueError otherwise)."""
    qualifier_width(code)
    return _QUALIFIER_BY_CODE.get(code, UNASSIGNED)


def decode_low(low: int) -> tuple[int, int]:
    """Split the 16-bit serial field into ``(counter, code)``; every pattern decodes. Inverse of :func:`encode_low`."""
    width = suffix_width(low)
    return low >> width, (1 << width) | (low & ((1 << width) - 1))


def encode_low(counter: int, code: int) -> int:
    """``counter << w | (code mod 2**w)``; ValueError for an invalid code or a counter over 16 - w bits."""
    width = qualifier_width(code)
    counter_max = (1 << (LOW_BITS - width)) - 1
    if not 0 <= counter <= counter_max:
        raise ValueError(f"SIQ counter must be in 0..{counter_max} for a {width}-bit qualifier, got {counter}")
    return counter << width | (code & ((1 << width) - 1))


# --- codec: fields <-> packed int ---------------------------------------------------------------------------------


class SiqParts(NamedTuple):
    """The fields of a SIQ: tick in 1/65536 s, shard 0..255, 32-bit domain hash, counter, qualifier code."""

    tick: int
    shard: int
    domain_hash: int
    counter: int
    code: int


PACKED = PackedInt(
    "SIQ", [("tick", TICK_BITS), ("shard", SHARD_BITS), ("domain_hash", DOMAIN_HASH_BITS), ("low", LOW_BITS)]
)
"""The layout's range check, bytes and hex (the low field holds counter and qualifier: :func:`pack` joins them)."""


def pack(tick: int, shard: int, domain_hash: int, counter: int, code: int) -> int:
    """Pack the fields into the 112-bit integer (inverse of :func:`unpack`).

    ``tick`` in 0..2**56-1 (floor(unix_seconds * 65536)), ``shard`` in 0..255, ``domain_hash`` in 0..2**32-1,
    ``code`` a structurally valid qualifier code (``QUALIFIERS[name][0]`` or 50/58/60), ``counter`` in
    0..2**(16-w)-1. Raises ValueError naming the field whose rule is broken.
    """
    if not 0 <= tick <= TICK_MAX:
        raise ValueError(f"SIQ tick must be in 0..{TICK_MAX} (1/65536 s since the Unix epoch), got {tick}")
    if not 0 <= shard <= SHARD_MAX:
        raise ValueError(f"SIQ shard must be in 0..{SHARD_MAX}, got {shard}")
    if not 0 <= domain_hash <= DOMAIN_HASH_MAX:
        raise ValueError(f"SIQ domain hash must be in 0..{DOMAIN_HASH_MAX}, got {domain_hash}")
    return _pack_prefix(tick, shard, domain_hash) | encode_low(counter, code)


def _pack_prefix(tick: int, shard: int, domain_hash: int) -> int:
    return tick << TICK_SHIFT | shard << SHARD_SHIFT | domain_hash << DOMAIN_HASH_SHIFT


def unpack(value: int) -> SiqParts:
    """Split a packed SIQ into its fields; ValueError unless ``0 <= value < 2**112``. Inverse of :func:`pack`."""
    PACKED.check(value)
    counter, code = decode_low(value & LOW_MASK)
    return SiqParts(
        value >> TICK_SHIFT,
        (value >> SHARD_SHIFT) & SHARD_MAX,
        (value >> DOMAIN_HASH_SHIFT) & DOMAIN_HASH_MAX,
        counter,
        code,
    )


def tick_from_ns(ns: int) -> int:
    """floor(ns * 65536 / 1e9): the tick (1/65536 s) holding an instant given in ns since the Unix epoch."""
    return (ns << FRACTION_BITS) // NANOSECS_IN_SECS


def ns_from_tick(tick: int) -> int:
    """The first whole nanosecond inside ``tick`` (ceil(tick * 1e9 / 65536)); ``tick_from_ns`` inverts it."""
    return -((-tick * NANOSECS_IN_SECS) >> FRACTION_BITS)


# --- codec: packed int <-> bytes ----------------------------------------------------------------------------------


to_bytes = PACKED.to_bytes
"""The 14 big-endian bytes of a packed SIQ."""
from_bytes = PACKED.from_bytes
"""The packed SIQ in 14 big-endian bytes; ValueError for any other length."""


def to_storage(value: int) -> bytes:
    """The 16-byte storage form: the 14 packed bytes left-padded with two zero bytes."""
    PACKED.check(value)
    return value.to_bytes(STORAGE_BYTES, "big")


def from_storage(data: bytes) -> int:
    """The packed SIQ in its 16-byte storage form; ValueError unless 16 bytes whose first two are zero."""
    if len(data) != STORAGE_BYTES:
        raise ValueError(f"a stored SIQ has to be exactly {STORAGE_BYTES} bytes long, got {len(data)}")
    if any(data[: STORAGE_BYTES - PACKED_BYTES]):
        raise ValueError(f"a stored SIQ must start with {STORAGE_BYTES - PACKED_BYTES} zero bytes (left padding)")
    return int.from_bytes(data, "big")


# --- codec: packed int <-> text -----------------------------------------------------------------------------------


_DID_CHARS = BASE32_ALPHABET.decode("ascii")
_DID_PAIR_BITS = 2 * BASE32_CHAR_BITS
_DID_PAIR_MASK = (1 << _DID_PAIR_BITS) - 1
DID_PAIRS = tuple(first + second for first in _DID_CHARS for second in _DID_CHARS)
"""The two base32 characters of every 10-bit value (index = the value)."""
_DID_WORD_BITS = 3 * _DID_PAIR_BITS  # 30
_DID_WORD_MASK = (1 << _DID_WORD_BITS) - 1


def encode_did(value: int) -> str:
    """``did:siq:`` + 29 lowercase base32 characters (reference ``Siq.to_did``): RFC 4648 base32 of the CRC-32
    as a 6-byte field and the 14 packed bytes, its first 3 characters (15 always-zero bits) dropped.

    Written as :func:`base64.b32encode` writes that block (``tests/schemes/test_siq.py`` checks every form it
    produces against ``base64.b32encode``, which :func:`decode_did` reads with), but from a table of character
    pairs: the 145 bits the 29 characters carry are the CRC-32 above the packed value, cut into one 5-bit
    character and 14 10-bit pairs, where the standard library's encoder is pure Python over 5-byte groups.
    Raises ValueError unless ``0 <= value < 2**112``.
    """
    block = zlib.crc32(to_bytes(value)) << PACKED_BITS | value  # 145 bits: 32 of CRC, 112 of ID, 1 zero on top
    top, a = block >> 4 * _DID_WORD_BITS, block >> 3 * _DID_WORD_BITS & _DID_WORD_MASK
    b, c, d = (
        block >> 2 * _DID_WORD_BITS & _DID_WORD_MASK,
        block >> _DID_WORD_BITS & _DID_WORD_MASK,
        block & _DID_WORD_MASK,
    )
    p, m = DID_PAIRS, _DID_PAIR_MASK
    return (
        f"{DID_PREFIX}{_DID_CHARS[top >> _DID_PAIR_BITS * 2]}{p[top >> _DID_PAIR_BITS & m]}{p[top & m]}"
        f"{p[a >> _DID_PAIR_BITS * 2]}{p[a >> _DID_PAIR_BITS & m]}{p[a & m]}"
        f"{p[b >> _DID_PAIR_BITS * 2]}{p[b >> _DID_PAIR_BITS & m]}{p[b & m]}"
        f"{p[c >> _DID_PAIR_BITS * 2]}{p[c >> _DID_PAIR_BITS & m]}{p[c & m]}"
        f"{p[d >> _DID_PAIR_BITS * 2]}{p[d >> _DID_PAIR_BITS & m]}{p[d & m]}"
    )


def decode_did(text: str) -> int:
    """Parse the did form strictly: prefix ``did:siq:`` (any case), 29 base32 characters (any case), first one
    a..p, CRC-32 verified. Returns the packed integer; raises InvalidIdError naming the rule broken.
    """
    if not text[:DID_PREFIX_LEN].isascii() or text[:DID_PREFIX_LEN].lower() != DID_PREFIX:
        raise InvalidIdError(f"SIQ did form must start with {DID_PREFIX!r}, got {text[:DID_PREFIX_LEN]!r}")
    body = text[DID_PREFIX_LEN:]
    if len(body) != DID_BODY_LEN:
        raise InvalidIdError(
            f"SIQ did form must have {DID_BODY_LEN} base32 characters after {DID_PREFIX!r}, got {len(body)}"
        )
    if not body.isascii() or _BASE32_RE.fullmatch(body) is None:
        bad = next(c for c in body if not (c.isascii() and _BASE32_RE.fullmatch(c)))
        raise InvalidIdError(f"SIQ did form must use the base32 alphabet a-z 2-7, got {bad!r}")
    if not "a" <= body[0].lower() <= DID_FIRST_CHAR_MAX:
        raise InvalidIdError(
            f"SIQ did form must start with a..{DID_FIRST_CHAR_MAX} after {DID_PREFIX!r} "
            f"(the checksum field holds 32 bits), got {body[0]!r}"
        )
    block = base64.b32decode("A" * DID_DROPPED_CHARS + body.upper())
    checksum = int.from_bytes(block[:CRC_FIELD_BYTES], "big")
    packed = block[CRC_FIELD_BYTES:]
    expected = zlib.crc32(packed)
    if checksum != expected:
        raise InvalidIdError(
            f"SIQ did form checksum mismatch: the CRC-32 field is {checksum:#010x}, the ID's CRC-32 is {expected:#010x}"
        )
    return int.from_bytes(packed, "big")


def encode_hex(value: int) -> str:
    """28 lowercase hex digits."""
    return PACKED.hex(value)


def decode_hex(text: str) -> int:
    """Parse exactly 28 hex digits, any case; raises InvalidIdError naming the rule broken."""
    if len(text) != HEX_LEN:
        raise InvalidIdError(f"SIQ hex form must be {HEX_LEN} hex digits long, got {len(text)}")
    if not text.isascii() or _HEX_RE.fullmatch(text) is None:
        raise InvalidIdError("SIQ hex form must contain only the hex digits 0-9 a-f")
    return int(text, 16)


def encode_decimal(value: int) -> str:
    """The packed integer in decimal, no leading zeros."""
    PACKED.check(value)
    return str(value)


def decode_decimal(text: str) -> int:
    """Parse a decimal SIQ: 1..34 ASCII digits, no leading zeros, below 2**112; InvalidIdError naming the rule.

    (A 28-digit string is read as the hex form by :meth:`SiqScheme.parse`; this function reads it as decimal.)
    """
    if not text or not text.isascii() or _DECIMAL_RE.fullmatch(text) is None:
        raise InvalidIdError("SIQ decimal form must contain only the digits 0-9")
    if len(text) > 1 and text[0] == "0":
        raise InvalidIdError("SIQ decimal form must not have leading zeros")
    if len(text) > DECIMAL_LEN_MAX or int(text) > PACKED_MAX:
        raise InvalidIdError(f"SIQ decimal form must be at most 2**{PACKED_BITS}-1 ({PACKED_MAX})")
    return int(text)


TEXT = TextForms("siq", did=encode_did, hex=encode_hex, decimal=encode_decimal)
"""The text forms, canonical first: the scheme and its batches format through this table."""
