"""SIQ: 112-bit IDs made of a 1/65536-second timestamp, a shard, a domain hash, a counter and a type qualifier.

Follows SPEC_NOTES.md "SIQ, 112 bits" and the reference library (``yusurko/suou``, ``src/suou/iding.py``)::

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

import os
import base64
import functools
import hashlib
import re
import threading
import time
import zlib
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

import numpy as np
import numpy.typing as npt

from app.errors import InvalidIdError, InvalidOptionError
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
    Scheme,
)

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
DID_PREFIX_LEN = len(DID_PREFIX)  # 8
CRC_FIELD_BYTES = 6
"""The CRC-32 is written as a 6-byte big-endian field (its top 16 bits are always zero)."""
DID_DROPPED_CHARS = 3
"""Leading base32 characters dropped from the did form: 15 bits of the CRC field, always zero ("aaa")."""
DID_BLOCK_BYTES = CRC_FIELD_BYTES + PACKED_BYTES  # 20 bytes = 160 bits = 32 base32 characters
BASE32_CHAR_BITS = 5
DID_BODY_LEN = DID_BLOCK_BYTES * BYTE_BITS // BASE32_CHAR_BITS - DID_DROPPED_CHARS  # 29
DID_LEN = DID_PREFIX_LEN + DID_BODY_LEN  # 37
DID_FIRST_CHAR_MAX = "p"
"""The first body character carries one more always-zero bit of the CRC field, so it is one of a..p."""
HEX_LEN = PACKED_BITS // HEX_DIGIT_BITS  # 28
DECIMAL_LEN_MAX = len(str(PACKED_MAX))  # 34

BASE32_ALPHABET = b"abcdefghijklmnopqrstuvwxyz234567"
"""RFC 4648 base32, lowercase (the did form's case)."""
NEWLINE = 10

_BASE32_RE = re.compile(r"[A-Za-z2-7]*")
_HEX_RE = re.compile(r"[0-9A-Fa-f]*")
_DECIMAL_RE = re.compile(r"[0-9]*")


# --- domain hash and qualifier codes -----------------------------------------------------------------------------


def domain_hash(domain: str) -> int:
    """The 32-bit domain hash: the last 4 bytes of SHA-256(domain), big-endian; ``''`` and ``'0'`` give 0.

    ``domain`` must be ASCII (write IDNs in their punycode form), as in the reference ``make_domain_hash``;
    raises ValueError otherwise. SPEC_NOTES.md "SIQ", domain hash row.
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
    _check_packed(value)
    counter, code = decode_low(value & LOW_MASK)
    return SiqParts(
        value >> TICK_SHIFT,
        (value >> SHARD_SHIFT) & SHARD_MAX,
        (value >> DOMAIN_HASH_SHIFT) & DOMAIN_HASH_MAX,
        counter,
        code,
    )


def _check_packed(value: int) -> None:
    if not 0 <= value <= PACKED_MAX:
        raise ValueError(f"a packed SIQ must be in 0..2**{PACKED_BITS}-1, got {value}")


def tick_from_ns(ns: int) -> int:
    """floor(ns * 65536 / 1e9): the tick (1/65536 s) holding an instant given in ns since the Unix epoch."""
    return (ns << FRACTION_BITS) // NANOSECS_IN_SECS


def ns_from_tick(tick: int) -> int:
    """The first whole nanosecond inside ``tick`` (ceil(tick * 1e9 / 65536)); ``tick_from_ns`` inverts it."""
    return -((-tick * NANOSECS_IN_SECS) >> FRACTION_BITS)


# --- codec: packed int <-> bytes ----------------------------------------------------------------------------------


def to_bytes(value: int) -> bytes:
    """The 14 big-endian bytes of a packed SIQ."""
    _check_packed(value)
    return value.to_bytes(PACKED_BYTES, "big")


def from_bytes(data: bytes) -> int:
    """The packed SIQ in 14 big-endian bytes; ValueError for any other length."""
    if len(data) != PACKED_BYTES:
        raise ValueError(f"a SIQ has to be exactly {PACKED_BYTES} bytes long, got {len(data)}")
    return int.from_bytes(data, "big")


def to_storage(value: int) -> bytes:
    """The 16-byte storage form: the 14 packed bytes left-padded with two zero bytes."""
    _check_packed(value)
    return value.to_bytes(STORAGE_BYTES, "big")


def from_storage(data: bytes) -> int:
    """The packed SIQ in its 16-byte storage form; ValueError unless 16 bytes whose first two are zero."""
    if len(data) != STORAGE_BYTES:
        raise ValueError(f"a stored SIQ has to be exactly {STORAGE_BYTES} bytes long, got {len(data)}")
    if any(data[: STORAGE_BYTES - PACKED_BYTES]):
        raise ValueError(f"a stored SIQ must start with {STORAGE_BYTES - PACKED_BYTES} zero bytes (left padding)")
    return int.from_bytes(data, "big")


# --- codec: packed int <-> text -----------------------------------------------------------------------------------


def encode_did(value: int) -> str:
    """``did:siq:`` + 29 lowercase base32 characters (reference ``Siq.to_did``)."""
    packed = to_bytes(value)
    crc_field = zlib.crc32(packed).to_bytes(CRC_FIELD_BYTES, "big")
    body = base64.b32encode(crc_field + packed).decode("ascii").lower()
    return DID_PREFIX + body[DID_DROPPED_CHARS:]


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
    _check_packed(value)
    return f"{value:0{HEX_LEN}x}"


def decode_hex(text: str) -> int:
    """Parse exactly 28 hex digits, any case; raises InvalidIdError naming the rule broken."""
    if len(text) != HEX_LEN:
        raise InvalidIdError(f"SIQ hex form must be {HEX_LEN} hex digits long, got {len(text)}")
    if not text.isascii() or _HEX_RE.fullmatch(text) is None:
        raise InvalidIdError("SIQ hex form must contain only the hex digits 0-9 a-f")
    return int(text, 16)


def encode_decimal(value: int) -> str:
    """The packed integer in decimal, no leading zeros."""
    _check_packed(value)
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


# --- scheme -------------------------------------------------------------------------------------------------------


class SiqSettings(BaseModel):
    """SIQ settings (joined into :class:`app.settings.Settings`; env ``IDMINT_SIQ_*``)."""

    siq_shard: int | None = Field(None, ge=0, le=SHARD_MAX, description="Static SIQ shard (0..255); unset = claim one.")
    siq_domain: str = Field("", description="SIQ domain whose hash goes into every SIQ ('' = hash 0).")


QUALIFIER_WORDS = {
    "content": "a piece of content", "multi": "a multi-type object", "manytomany": "a many-to-many link",
    "ternary": "a ternary relation", "thread": "a thread", "message": "a message", "user": "a user", "tag": "a tag",
    "group": "a group", "event": "an event", "channel": "a channel", "invite": "an invite",
    "application": "an application", "collection": "a collection", "premium": "a premium item",
    UNASSIGNED: "a code no type has been given yet",
}
"""What each qualifier names, in words (the decode page)."""


class SiqScheme(Scheme):
    """SIQ: metadata, strict parser, did/hex/decimal text, field decoding (SPEC_NOTES.md "SIQ, 112 bits")."""

    name = "siq"
    packed_bytes = PACKED_BYTES
    formats = ("did", "hex", "decimal")
    text_width = {"did": DID_LEN, "hex": HEX_LEN}
    timestamp_digits = 6
    native_unit_ns = NANOSECS_PER_TICK
    layout = (
        LayoutField("seconds", "111..72", "whole seconds since the Unix epoch"),
        LayoutField("fraction", "71..56", "binary fraction of the second, in 1/65536 s (~15.26 µs)"),
        LayoutField("shard", "55..48", "node identity, 0..255"),
        LayoutField("domain_hash", "47..16", "last 4 bytes of SHA-256(domain), big-endian; '' or '0' -> 0"),
        LayoutField(
            "serial", "15..5",
            "per-qualifier counter: 11 bits for 5-bit qualifiers; reaches down to bit 4 (12 bits) for thread and "
            "message, bit 3 (13 bits) for content, multi, manytomany and ternary",
        ),
        LayoutField(
            "qualifier", "4..0",
            "type suffix, 3, 4 or 5 bits: bit 0 = 1 -> 3 bits; low bits 110 -> 4 bits; otherwise 5 bits",
        ),
    )
    identity = IdentitySpec("shard", 0, SHARD_MAX, draw="scan")
    reference = "SIQ (yusurko/suou src/suou/iding.py, https://yusur.moe/protocols/siq.html); SPEC_NOTES.md \"SIQ\""

    def parse(self, text: str) -> int:
        """did form (``did:siq:`` + 29 base32), 28 hex digits, or decimal; a 28-digit string is the hex form."""
        if text[:DID_PREFIX_LEN].isascii() and text[:DID_PREFIX_LEN].lower() == DID_PREFIX:
            return decode_did(text)
        if len(text) == HEX_LEN:
            return decode_hex(text)
        if text and text.isascii() and _DECIMAL_RE.fullmatch(text) is not None:
            return decode_decimal(text)
        raise InvalidIdError(
            f"SIQ must be {DID_PREFIX!r} + {DID_BODY_LEN} base32 characters, {HEX_LEN} hex digits, or a decimal "
            f"number below 2**{PACKED_BITS}; got {len(text)} characters that are none of these"
        )

    def format(self, value: int, fmt: str) -> str:
        fmt = self.resolve_format(fmt)
        if fmt == "did":
            return encode_did(value)
        if fmt == "hex":
            return encode_hex(value)
        return encode_decimal(value)

    def fields(self, value: int) -> dict[str, Any]:
        """``{"seconds", "fraction", "shard", "domain_hash", "serial", "qualifier"}``: ints, and the qualifier's
        name (or ``"unassigned"``); ``serial`` is the counter without the suffix."""
        parts = unpack(value)
        return {
            "seconds": parts.tick >> FRACTION_BITS,
            "fraction": parts.tick & FRACTION_MASK,
            "shard": parts.shard,
            "domain_hash": parts.domain_hash,
            "serial": parts.counter,
            "qualifier": _QUALIFIER_BY_CODE.get(parts.code, UNASSIGNED),
        }

    def timestamp_ns(self, value: int) -> int | None:
        """floor(tick * 1e9 / 65536) ns since the epoch."""
        return (unpack(value).tick * NANOSECS_IN_SECS) >> FRACTION_BITS

    def native_from_ns(self, ns: int) -> int:
        """Exact integer floor(ns * 65536 / 1e9) (the base class's float division can be off by one tick)."""
        return tick_from_ns(ns)

    title = "SIQ"
    example = "did:siq:gm24tg4ago5efqaaaab4gzymuoaaa"
    token_pattern = r"did:siq:[A-Za-z0-9]+"
    settings_model = SiqSettings
    options = (
        SchemeOption("type", "qualifier", "The qualifier: what kind of object the IDs name (default user).",
                     choices=tuple(QUALIFIERS)),
    )
    captions = {
        "seconds": "Whole seconds since 1970-01-01 UTC (40 bits).",
        "fraction": "Binary fraction of the second (16 bits): the tick is 1/65536 s.",
        "shard": "Shard (0..255) of the node that made it, leased so no two nodes share one.",
        "domain_hash": "Last 4 bytes of SHA-256 of the issuing domain name; 0 means no domain was set.",
        "serial": "Counter per qualifier within one tick of 1/65536 s.",
        "qualifier": "What kind of object the ID names: the low 3 to 5 bits.",
    }

    def identity_plan(self, settings: Any) -> IdentityPlan:
        """Shards 0..255 per domain: ``idmint/siq/<domain hash, 8 hex>/<shard>``."""
        return idmint_plan(self.name, "shard", 0, SHARD_MAX, group=f"{domain_hash(settings.siq_domain):08x}",
                           static=settings.siq_shard)

    def new_generator(self, settings: Any, identities: list[int], floor: int, clock: Clock,
                      random: RandomSource = os.urandom) -> Generator:
        return SiqGenerator(identities[0], settings.siq_domain, clock=clock, floor=floor)

    def node_info(self, settings: Any, generator: Generator | None) -> dict[str, Any]:
        return {"domain": settings.siq_domain, "domain_hash": domain_hash(settings.siq_domain)}

    def words(self, fields: dict[str, Any]) -> dict[str, str]:
        qualifier, fraction, dhash = fields["qualifier"], fields["fraction"], fields["domain_hash"]
        return {
            "seconds": f"{grouped(fields['seconds'])} s since the Unix epoch",
            "fraction": f"{fraction}/65536 s ≈ {fraction / 65.536:.3f} ms",
            "shard": f"shard {fields['shard']}",
            "domain_hash": "no domain (hash 0)" if dhash == 0 else f"domain hash {hex_word(dhash, 8)}",
            "serial": f'serial {fields["serial"]} among "{qualifier}" IDs of its tick',
            "qualifier": f'qualifier "{qualifier}": '
                         + QUALIFIER_WORDS.get(str(qualifier).lower(), "a type this page has no words for"),
        }

    def summary(self, fields: dict[str, Any]) -> str:
        return (f"{fields['qualifier']} #{fields['serial']} on shard {fields['shard']}, "
                f"{self.words(fields)['domain_hash']}")


SCHEME = SiqScheme()


# --- batch encoding: lookup tables (built once, lazily) -----------------------------------------------------------

WORD_BYTES = 8
"""Text is written 8 bytes at a time: one little-endian uint64 per row and (unaligned) column offset."""
CRC_BITS = 32
_CHAR_MASK = (1 << BASE32_CHAR_BITS) - 1
_THREE_CHAR_BITS = 3 * BASE32_CHAR_BITS  # 15
_THREE_CHAR_MASK = (1 << _THREE_CHAR_BITS) - 1
_HEX_DIGIT_MASK = (1 << HEX_DIGIT_BITS) - 1
_LOW_HEX_DIGITS = LOW_BITS // HEX_DIGIT_BITS  # 4
_DEC4 = 10_000
_DEC4_DIGITS = 4


@functools.cache
def crc32_position_table() -> npt.NDArray[np.uint32]:
    """(14, 256) uint32: the CRC-32 contribution of byte value b at position i of a 14-byte message.

    CRC-32 is affine over GF(2): for messages of equal length ``crc(m) = crc(base) ^ XOR_i T[i, m[i] ^ base[i]]``,
    with ``T[i, b] = crc32(one-hot(i, b)) ^ crc32(zeros)`` (zlib.crc32 over one-hot messages).
    """
    zeros = bytes(PACKED_BYTES)
    crc_zeros = zlib.crc32(zeros)
    table = np.empty((PACKED_BYTES, 1 << BYTE_BITS), dtype=np.uint32)
    for position in range(PACKED_BYTES):
        message = bytearray(zeros)
        for byte in range(1 << BYTE_BITS):
            message[position] = byte
            table[position, byte] = zlib.crc32(message) ^ crc_zeros
    return table


def crc32_rows(rows: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint32]:
    """zlib CRC-32 of every row of an (n, 14) uint8 array, column-wise with :func:`crc32_position_table`."""
    table = crc32_position_table()
    crc = np.full(rows.shape[0], zlib.crc32(bytes(PACKED_BYTES)), dtype=np.uint32)
    for position in range(PACKED_BYTES):
        crc ^= table[position].take(rows[:, position])
    return crc


@functools.cache
def _crc_low_table() -> npt.NDArray[np.uint32]:
    """(65536,) uint32: the CRC-32 contribution of every value of the serial field (packed bytes 12 and 13)."""
    table = crc32_position_table()
    high, low = table[PACKED_BYTES - 2], table[PACKED_BYTES - 1]
    return (high[:, None] ^ low[None, :]).ravel()


@functools.cache
def _alphabet() -> npt.NDArray[np.uint64]:
    return np.frombuffer(BASE32_ALPHABET, dtype=np.uint8).astype(np.uint64)


@functools.cache
def _three_chars(byte_offset: int) -> npt.NDArray[np.uint64]:
    """(32768,) uint64: the three base32 characters of a 15-bit value at bytes offset..offset+2 (little-endian)."""
    values = np.arange(1 << _THREE_CHAR_BITS, dtype=np.uint64)
    alphabet = _alphabet()
    word = np.zeros(1 << _THREE_CHAR_BITS, dtype=np.uint64)
    for char in range(3):
        index = (values >> np.uint64(BASE32_CHAR_BITS * (2 - char))) & np.uint64(_CHAR_MASK)
        word |= alphabet.take(index) << np.uint64(BYTE_BITS * (byte_offset + char))
    return word


@functools.cache
def _did_tail(nibble: int) -> npt.NDArray[np.uint64]:
    """(65536,) uint64 indexed by the serial field: bytes 3..7 = characters k28..k31 and the newline.

    k28 joins the domain hash's low ``nibble`` with serial bit 15; k29..k31 are serial bits 14..0.
    """
    values = np.arange(1 << LOW_BITS, dtype=np.uint64)
    k28 = _alphabet().take((values >> np.uint64(LOW_BITS - 1)) | np.uint64(nibble << 1))
    k29 = _three_chars(_TAIL_K29_BYTE).take(values & np.uint64(_THREE_CHAR_MASK))
    return k28 << np.uint64(BYTE_BITS * _TAIL_K28_BYTE) | k29 | np.uint64(NEWLINE << (BYTE_BITS * (WORD_BYTES - 1)))


@functools.cache
def _hex_tail() -> npt.NDArray[np.uint64]:
    """(65536,) uint64 indexed by the serial field: bytes 3..6 = its 4 lowercase hex digits, byte 7 = newline."""
    values = np.arange(1 << LOW_BITS, dtype=np.uint64)
    digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8).astype(np.uint64)
    word = np.full(1 << LOW_BITS, NEWLINE << (BYTE_BITS * (WORD_BYTES - 1)), dtype=np.uint64)
    for digit in range(_LOW_HEX_DIGITS):
        nibble = (values >> np.uint64(HEX_DIGIT_BITS * (_LOW_HEX_DIGITS - 1 - digit))) & np.uint64(_HEX_DIGIT_MASK)
        word |= digits.take(nibble) << np.uint64(BYTE_BITS * (_TAIL_CONST_BYTES + digit))
    return word


@functools.cache
def _dec4() -> npt.NDArray[np.uint64]:
    """(10000,) uint64: bytes 0..3 = the 4 zero-padded decimal digits of 0..9999."""
    text = "".join(f"{value:04d}" for value in range(_DEC4)).encode("ascii")
    return np.frombuffer(text, dtype="<u4").astype(np.uint64)


@functools.cache
def _serial_fields(code: int) -> npt.NDArray[np.intp]:
    """(2**(16-w),) intp, read-only: the serial field ``counter << w | suffix`` of every counter of ``code``."""
    width = qualifier_width(code)
    table = np.arange(1 << (LOW_BITS - width), dtype=np.intp) << width | (code & ((1 << width) - 1))
    table.flags.writeable = False
    return table


def _put_words(out: npt.NDArray[np.uint8], column: int, words: Any) -> None:
    """Write 8 bytes per row at ``out[:, column:column + 8]`` from uint64 ``words`` (little-endian byte order)."""
    out[:, column : column + WORD_BYTES].view("<u8")[:, 0] = words


def _word(data: bytes) -> int:
    """Up to 8 bytes as the little-endian integer that :func:`_put_words` writes back as those bytes."""
    return int.from_bytes(data, "little")


# Text layouts (columns of one row; every row ends with a newline):
#   did (38): 0..7 "did:siq:" | 8..10 k3..k5 = CRC bits 31..18 | 11..13 k6..k8 = CRC bits 17..3 |
#             14 k9 = CRC bits 2..0 + tick bits 55..54 | 15..32 k10..k27 = tick, shard, domain hash (one per tick) |
#             33 k28 = domain hash bits 3..0 + serial bit 15 | 34..36 k29..k31 = serial bits 14..0 | 37 newline
#   hex (29): 0..23 tick, shard, domain hash (one per tick) | 24..27 serial | 28 newline
# (k = the base32 character's index in the 32-character block; k0..k2 are the dropped "aaa".)
_DID_CRC_WORD = DID_PREFIX_LEN  # 8: k3..k9 and k10
_DID_K3_CRC_BITS = BASE32_CHAR_BITS - 1
"""k3's top bit is the CRC field's last always-zero bit; its other 4 bits are CRC bits 31..28."""
_DID_K3_SHIFT = CRC_BITS - (_DID_K3_CRC_BITS + 2 * BASE32_CHAR_BITS)  # 18: k3..k5 hold CRC bits 31..18
_DID_K6_BYTE = 3
_DID_K9_BYTE = 6
_DID_K10_BYTE = 7
_DID_K9_CRC_BITS = 3
_DID_K9_TICK_BITS = BASE32_CHAR_BITS - _DID_K9_CRC_BITS
_DID_CONST = _DID_CRC_WORD + WORD_BYTES  # 16: k11.. up to the tail word
_DID_TAIL_WORD = DID_LEN + 1 - WORD_BYTES  # 30: k25..k27 (domain hash) + k28..k31 + newline
_DID_K10 = 10
"""Index in the 32-character base32 block of k10, the first character fixed by the tick alone."""
_DID_TAIL_BLOCK_START = _DID_TAIL_WORD - DID_PREFIX_LEN + DID_DROPPED_CHARS  # k25
_NIBBLE_MASK = 0xF
_TAIL_CONST_BYTES = 3
"""Tail words (did, hex) begin with 3 constant characters (domain hash), then the serial's characters."""
_TAIL_K28_BYTE = _TAIL_CONST_BYTES
_TAIL_K29_BYTE = _TAIL_K28_BYTE + 1
_HEX_TAIL_WORD = HEX_LEN + 1 - WORD_BYTES  # 21
_DECIMAL_LOW = 10**12
"""Decimal batches split each value as ``high * 10**12 + low``; high is fixed per tick, low fits a uint64."""
_DECIMAL_LOW_DIGITS = 12
_DECIMAL_MID_BYTE = 5
"""The second word of the 12 low digits starts at digit 5: digits 5..11 and the newline."""


class _Scratch(threading.local):
    """Per-thread reusable output arrays, one per text form: a fresh 2.5 MB array costs more in page faults than
    the encoding, and the form's constant leading text (``did:siq:``) is written only once."""

    def __init__(self) -> None:
        self.arrays: dict[tuple[str, int], npt.NDArray[np.uint8]] = {}

    def rows(self, form: str, count: int, width: int, lead: bytes = b"") -> npt.NDArray[np.uint8]:
        """A (count, width) uint8 array whose rows start with ``lead``; valid until the next call for ``form``."""
        array = self.arrays.get((form, width)) if count <= SCRATCH_ROWS else None
        if array is None:
            array = np.empty((max(count, SCRATCH_ROWS), width), dtype=np.uint8)
            if lead:
                array[:, : len(lead)] = np.frombuffer(lead, dtype=np.uint8)
            if count <= SCRATCH_ROWS:
                self.arrays[(form, width)] = array
        return array[:count]


SCRATCH_ROWS = 1 << 16
"""Largest batch encoded in the reused per-thread array; larger ones get a fresh array."""
CHUNK_ROWS = 8192
"""Rows encoded per pass: keeps numpy's temporaries (8 bytes per row) small enough to be reused, not page-faulted."""
_scratch = _Scratch()


class SiqBatch(Batch):
    """SIQs issued together for one shard, domain and qualifier: runs ("segments") of consecutive counters, one per
    tick. Encoding is column-wise: the tick, shard and domain hash columns are computed once per segment; the
    checksum and serial columns come from lookup tables indexed by the 16-bit serial field (CRC-32 being affine,
    ``crc(id) = crc(segment prefix) ^ T[serial]``).
    """

    def __init__(self, shard: int, domain_hash: int, code: int, segments: list[tuple[int, int, int]]) -> None:
        """``segments``: (tick, first counter, count) runs in issue order; ``code``: the qualifier code."""
        self.shard = shard
        self.domain_hash = domain_hash
        self.code = code
        self.width = qualifier_width(code)
        self.segments = segments
        self.count = sum(count for _tick, _first, count in segments)

    # -- slow path -------------------------------------------------------------------------------------------------
    def values(self) -> list[int]:
        suffix = self.code & ((1 << self.width) - 1)
        out: list[int] = []
        for tick, first, count in self.segments:
            base = _pack_prefix(tick, self.shard, self.domain_hash) | suffix
            out.extend(base | counter << self.width for counter in range(first, first + count))
        return out

    @property
    def high_water(self) -> int:
        return self.segments[-1][0] if self.segments else -1

    # -- hot path --------------------------------------------------------------------------------------------------
    def encode(self, fmt: str) -> bytes:
        if self.count <= SMALL_BATCH:  # per-ID formatting beats the column-wise encoder's fixed cost
            return scalar_lines(SCHEME.format, self.values(), fmt)
        fmt = SCHEME.resolve_format(fmt)
        if not self.count:
            return b""
        if fmt == "did":
            width = DID_LEN
        elif fmt == "hex":
            width = HEX_LEN
        else:
            high_len = self._decimal_high_len()
            if high_len is None:
                return self._encode_decimal_slow()
            width = high_len + _DECIMAL_LOW_DIGITS
        out = _scratch.rows(fmt, self.count, width + 1, DID_PREFIX.encode("ascii") if fmt == "did" else b"")
        row = 0
        for chunk in self._chunks():
            rows = out[row : row + chunk.count]
            if fmt == "did":
                chunk._fill_did(rows)
            elif fmt == "hex":
                chunk._fill_hex(rows)
            else:
                chunk._fill_decimal(rows, width - _DECIMAL_LOW_DIGITS)
            row += chunk.count
        return out.tobytes()

    def _chunks(self) -> list[SiqBatch]:
        """This batch cut into batches of at most ``CHUNK_ROWS`` IDs (splitting segments where needed)."""
        if self.count <= CHUNK_ROWS:
            return [self]
        chunks: list[SiqBatch] = []
        segments: list[tuple[int, int, int]] = []
        room = CHUNK_ROWS
        for tick, first, count in self.segments:
            while count:
                taken = min(count, room)
                segments.append((tick, first, taken))
                first, count, room = first + taken, count - taken, room - taken
                if not room:
                    chunks.append(SiqBatch(self.shard, self.domain_hash, self.code, segments))
                    segments, room = [], CHUNK_ROWS
        if segments:
            chunks.append(SiqBatch(self.shard, self.domain_hash, self.code, segments))
        return chunks

    def _prefixes(self) -> list[int]:
        """The packed value with serial field 0 of every segment."""
        return [_pack_prefix(tick, self.shard, self.domain_hash) for tick, _first, _count in self.segments]

    def _low(self) -> npt.NDArray[np.intp]:
        """(count,) intp: the 16-bit serial field of every ID (intp: numpy's fast index type for ``take``).

        Read-only: a single segment's column is a view of a shared table.
        """
        table = _serial_fields(self.code)
        parts = [table[first : first + count] for _tick, first, count in self.segments]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _per_row(self, per_segment: list[int], dtype: type[np.integer[Any]]) -> Any:
        """A per-segment value for every row: a scalar for one segment, else a repeated (count,) column."""
        if len(self.segments) == 1:
            return dtype(per_segment[0])
        return np.repeat(np.array(per_segment, dtype=dtype), [count for *_, count in self.segments])

    def _put_text(self, out: npt.NDArray[np.uint8], column: int, per_segment: list[bytes]) -> None:
        """Write each segment's constant text (equal lengths, >= 8 bytes) at ``column``, 8 bytes at a time."""
        length = len(per_segment[0])
        for offset in [*range(0, length - WORD_BYTES, WORD_BYTES), length - WORD_BYTES]:
            words = [_word(text[offset : offset + WORD_BYTES]) for text in per_segment]
            if len(words) == 1:
                _put_words(out, column + offset, np.full(self.count, words[0], dtype=np.uint64))
            else:
                _put_words(out, column + offset, self._per_row(words, np.uint64))

    def _fill_did(self, out: npt.NDArray[np.uint8]) -> None:
        """Write every row of the did form after the ``did:siq:`` prefix (already in ``out``)."""
        crcs: list[int] = []
        k9_words: list[tuple[int, ...]] = []
        consts: list[bytes] = []
        block = b""
        for (tick, _first, _count), prefix in zip(self.segments, self._prefixes()):
            packed = prefix.to_bytes(PACKED_BYTES, "big")
            crcs.append(zlib.crc32(packed))
            block = base64.b32encode(bytes(CRC_FIELD_BYTES) + packed).lower()
            tick_bits = tick >> (TICK_BITS - _DID_K9_TICK_BITS)
            # the word's bytes 6..7 (k9, k10) for each value of the CRC's low 3 bits
            k9_words.append(tuple(
                BASE32_ALPHABET[crc_bits << _DID_K9_TICK_BITS | tick_bits] << (BYTE_BITS * _DID_K9_BYTE)
                | block[_DID_K10] << (BYTE_BITS * _DID_K10_BYTE)
                for crc_bits in range(1 << _DID_K9_CRC_BITS)
            ))
            consts.append(block[_DID_K10 + 1 : _DID_TAIL_BLOCK_START])
        low = self._low()
        crc32 = _crc_low_table().take(low)
        crc32 ^= self._per_row(crcs, np.uint32)
        crc = crc32.astype(np.intp)
        k9_index = crc & ((1 << _DID_K9_CRC_BITS) - 1)
        if len(set(k9_words)) > 1:  # k9, k10 hold tick bits 55..49: they change once in 2**33 seconds
            k9_index |= self._per_row(list(range(len(self.segments))), np.intp) << _DID_K9_CRC_BITS
        else:
            k9_words = k9_words[:1]
        crc_word = _three_chars(0).take(crc >> _DID_K3_SHIFT)
        crc_word |= _three_chars(_DID_K6_BYTE).take((crc >> _DID_K9_CRC_BITS) & _THREE_CHAR_MASK)
        crc_word |= np.array(k9_words, dtype=np.uint64).ravel().take(k9_index)
        tail_word = _did_tail(self.domain_hash & _NIBBLE_MASK).take(low)
        tail_word |= np.uint64(_word(block[_DID_TAIL_BLOCK_START : _DID_TAIL_BLOCK_START + _TAIL_CONST_BYTES]))
        _put_words(out, _DID_CRC_WORD, crc_word)
        self._put_text(out, _DID_CONST, consts)
        _put_words(out, _DID_TAIL_WORD, tail_word)

    def _fill_hex(self, out: npt.NDArray[np.uint8]) -> None:
        """Write every row of the hex form: tick, shard and domain hash digits per segment, then the serial's."""
        texts = [encode_hex(prefix).encode("ascii") for prefix in self._prefixes()]
        tail_word = _hex_tail().take(self._low())
        tail_word |= np.uint64(_word(texts[0][_HEX_TAIL_WORD : _HEX_TAIL_WORD + _TAIL_CONST_BYTES]))
        self._put_text(out, 0, [text[:_HEX_TAIL_WORD] for text in texts])
        _put_words(out, _HEX_TAIL_WORD, tail_word)

    def _decimal_high_len(self) -> int | None:
        """Digits above the low 12 when every ID has the same number (at least 8) and no segment carries across
        10**12 (all real IDs but ~1e-7 of segments); None sends the batch to ``"\\n".join(map(str, ...))``."""
        lengths = set()
        for prefix, (_tick, first, count) in zip(self._prefixes(), self.segments):
            high, low = divmod(prefix, _DECIMAL_LOW)
            if low + encode_low(first + count - 1, self.code) >= _DECIMAL_LOW:
                return None
            lengths.add(len(str(high)))
        high_len = lengths.pop()
        return high_len if not lengths and high_len >= WORD_BYTES else None

    def _fill_decimal(self, out: npt.NDArray[np.uint8], high_len: int) -> None:
        """Write every row of the decimal form: ``high_len`` digits per segment, then 12 zero-padded low digits."""
        highs: list[bytes] = []
        lows: list[int] = []
        for prefix in self._prefixes():
            high, low = divmod(prefix, _DECIMAL_LOW)
            highs.append(str(high).encode("ascii"))
            lows.append(low)
        low_column = self._low() + self._per_row(lows, np.intp)
        # four-digit groups; floor division by a scalar is fast in numpy, np.divmod is not
        top = low_column // (_DEC4 * _DEC4)
        rest = low_column - top * (_DEC4 * _DEC4)
        middle = rest // _DEC4
        bottom = rest - middle * _DEC4
        dec4 = _dec4()
        middle_digits = dec4.take(middle)
        first_word = dec4.take(top)
        first_word |= middle_digits << np.uint64(_DEC4_DIGITS * BYTE_BITS)
        second_word = middle_digits >> np.uint64((_DECIMAL_MID_BYTE - _DEC4_DIGITS) * BYTE_BITS)
        second_word |= dec4.take(bottom) << np.uint64((2 * _DEC4_DIGITS - _DECIMAL_MID_BYTE) * BYTE_BITS)
        second_word |= np.uint64(NEWLINE << (BYTE_BITS * (WORD_BYTES - 1)))
        self._put_text(out, 0, highs)
        _put_words(out, high_len, first_word)
        _put_words(out, high_len + _DECIMAL_MID_BYTE, second_word)

    def _encode_decimal_slow(self) -> bytes:
        return ("\n".join(map(str, self.values())) + "\n").encode("ascii")


# --- generator ----------------------------------------------------------------------------------------------------

SPIN_BUDGET_NS = 50_000
"""Most real time one :meth:`SiqGenerator.generate` call spends waiting for the clock to reach the next tick."""


class SiqGenerator(Generator):
    """Issues SIQs for one shard and domain (SPEC_NOTES.md "SIQ", generator errata fixed).

    One counter per qualifier, each remembering the tick it counts in; one shared last tick, updated after every
    ID. An ID is issued at tick ``t = max(now, last tick, floor + 1)``: a qualifier whose counter belongs to an
    older tick restarts at 0, one that already counts in ``t`` continues (so a clock that steps back keeps the last
    tick and continues the counter). IDs of different qualifiers differ in their suffix, so a tick may be shared;
    one qualifier's (tick, counter) pairs strictly increase, so no ID ever repeats. When a counter runs out (2**(16-w)
    per tick) the generator needs the clock in a later tick: it spins up to 50 µs of real time in total when that
    is close, otherwise it returns a partial batch and :meth:`wait_ns` says how long to wait.

    ``shard``: 0..255; ``domain``: ASCII domain name (``''``/``'0'`` -> hash 0); ``clock``: ns since the epoch;
    ``floor``: high-water mark in ticks (1/65536 s), -1 for none. Raises ValueError naming the rule broken.
    Clock rollbacks are counted when the clock reads below its highest earlier reading; issue
    ticks running ahead of the clock (a floor above it, or counters outpacing ticks) are not rollbacks.
    """

    def __init__(self, shard: int, domain: str, *, clock: Clock = time.time_ns, floor: int = -1) -> None:
        if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard <= SHARD_MAX:
            raise ValueError(f"shard must be an integer in 0..{SHARD_MAX}, got {shard!r}")
        if not isinstance(domain, str):
            raise ValueError(f"SIQ domain must be a string, got {type(domain).__name__}")
        if not -1 <= floor < TICK_MAX:
            raise ValueError(f"floor must be in -1..{TICK_MAX - 1} ticks (1/65536 s), got {floor}")
        self.shard = shard
        self.domain = domain
        self.domain_hash = domain_hash(domain)
        self._clock = clock
        self._floor = floor
        self._last_tick = -1
        """The last tick this generator issued an ID in (-1: none yet)."""
        self._counters: dict[int, tuple[int, int]] = {}
        """qualifier code -> (tick, next counter in that tick)."""
        self._blocked_tick = -1
        """The tick the last call waited for (it came back short), -1 if it was complete."""
        self.stats = GeneratorStats()

    @property
    def high_water(self) -> int:
        return max(self._floor, self._last_tick)

    def wait_ns(self) -> int:
        """Nanoseconds until the qualifier the last call ran out of can issue again (0 = now)."""
        if self._blocked_tick < 0:
            return 0
        return max(0, ns_from_tick(self._blocked_tick) - self._clock())

    def generate(self, count: int, **options: Any) -> SiqBatch:
        """Issue up to ``count`` SIQs of one ``qualifier`` (option, default ``"user"``).

        May return fewer (even 0) when the qualifier's counter is exhausted and the clock is not yet in the next
        tick after the spin budget (or is far behind the last tick: clock rollback). Raises InvalidOptionError for a
        count below 1, an unknown qualifier or another option; OverflowError past the last representable tick.
        """
        qualifier = options.pop("qualifier", "user")
        if options:
            raise InvalidOptionError(f"siq takes only the qualifier option, got {', '.join(sorted(options))}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidOptionError(f"count must be an integer >= 1 for siq, got {count!r}")
        if not isinstance(qualifier, str) or qualifier not in QUALIFIERS:
            raise InvalidOptionError(f"qualifier must be one of {', '.join(QUALIFIERS)} for siq, got {qualifier!r}")
        code, width = QUALIFIERS[qualifier]
        capacity = 1 << (LOW_BITS - width)

        segments: list[tuple[int, int, int]] = []
        remaining = count
        spin_deadline = -1
        self._blocked_tick = -1
        now_ns = self._clock()
        while True:
            now_tick = tick_from_ns(now_ns)
            self.stats.observe_clock(now_ns)

            tick = max(now_tick, self._last_tick, self._floor + 1)
            counter_tick, next_counter = self._counters.get(code, (-1, 0))
            first = next_counter if counter_tick == tick else 0
            if first < capacity:
                if tick > TICK_MAX:
                    raise OverflowError(f"SIQ timestamp would pass {TICK_MAX} ticks (2**40 seconds)")
                issued = min(remaining, capacity - first)
                segments.append((tick, first, issued))
                self._counters[code] = (tick, first + issued)
                self._last_tick = tick
                remaining -= issued
                if not remaining:
                    break
            # This qualifier's counter is exhausted in `tick`: it needs the clock in tick + 1 or later.
            self.stats.sequence_exhausted += 1
            target = tick + 1
            if ns_from_tick(target) - now_ns > SPIN_BUDGET_NS:
                self._blocked_tick = target
                break
            if spin_deadline < 0:
                spin_deadline = time.perf_counter_ns() + SPIN_BUDGET_NS
            while True:  # read the clock at least once, then until the next tick or the (real-time) budget's end
                now_ns = self._clock()
                if tick_from_ns(now_ns) >= target or time.perf_counter_ns() >= spin_deadline:
                    break
            if tick_from_ns(now_ns) < target:
                self._blocked_tick = target
                break
        return SiqBatch(self.shard, self.domain_hash, code, segments)
