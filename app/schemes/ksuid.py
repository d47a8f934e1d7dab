"""KSUID (segmentio/ksuid): 160-bit IDs of a 32-bit second timestamp and a 128-bit payload.

Follows STANDARD_SCHEMES.md "ksuid (github.com/segmentio/ksuid), 160 bits" and the reference implementation
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
batch encoders live in :mod:`app.schemes.ksuid_batch`.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import time_order as order
from app.schemes.base import (
    Clock,
    Generator,
    GeneratorStats,
    LayoutField,
    RandomSource,
    Scheme,
    no_options,
)

if TYPE_CHECKING:
    from app.schemes.ksuid_batch import KsuidBatch

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
    _check_packed(value)
    return (value >> TIMESTAMP_SHIFT) + EPOCH_S, value & PAYLOAD_MAX


def _check_packed(value: int) -> None:
    if not 0 <= value <= PACKED_MAX:
        raise ValueError(f"a packed KSUID must be in 0..2**{PACKED_BITS}-1, got {value}")


def to_bytes(value: int) -> bytes:
    """The 20 big-endian bytes of a packed KSUID (the reference's binary form)."""
    _check_packed(value)
    return value.to_bytes(PACKED_BYTES, "big")


def from_bytes(data: bytes) -> int:
    """The packed KSUID in 20 big-endian bytes; ValueError for any other length."""
    if len(data) != PACKED_BYTES:
        raise ValueError(f"a KSUID has to be exactly {PACKED_BYTES} bytes long, got {len(data)}")
    return int.from_bytes(data, "big")


# --- codec: packed int <-> text -----------------------------------------------------------------------------------


def encode_base62(value: int) -> str:
    """The canonical text: 27 base62 characters ``0-9A-Za-z``, left-padded with ``0`` (``base62.go``)."""
    _check_packed(value)
    chars = []
    for _ in range(BASE62_LEN):
        value, digit = divmod(value, BASE62_RADIX)
        chars.append(BASE62_ALPHABET[digit])
    return "".join(reversed(chars))


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
    _check_packed(value)
    return f"{value:0{HEX_LEN}x}"


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


# --- scheme -------------------------------------------------------------------------------------------------------


class KsuidScheme(Scheme):
    """KSUID: metadata, strict parser, base62/hex text, field decoding (STANDARD_SCHEMES.md "ksuid")."""

    name = "ksuid"
    packed_bytes = PACKED_BYTES
    formats = ("base62", "hex")
    text_width = {"base62": BASE62_LEN, "hex": HEX_LEN}
    timestamp_digits = 3
    native_unit_ns = NANOSECS_IN_SECS
    timestamp_native_max = TIMESTAMP_S_MAX
    layout = (
        LayoutField("timestamp", "159..128", "seconds since 1,400,000,000 (2014-05-13T16:53:20Z)"),
        LayoutField("payload", "127..0", "16 random bytes on a new second, then +1 per ID (monotonic)"),
    )
    identity = None
    uniqueness_note = "128 random payload bits per ID; no slice needed"
    reference = 'segmentio/ksuid (ksuid.go, base62.go); STANDARD_SCHEMES.md "ksuid"'

    # What the service learns from the scheme (app/schemes/base.py).
    title: ClassVar[str] = "KSUID (Segment)"
    example: ClassVar[str] = "0ujtsYcgvSTl8PAuAdqWYSMnLOv"
    captions: ClassVar[dict[str, str]] = {
        "timestamp_s": "Timestamp (Unix seconds)",
        "payload": "Payload (128 bits, hex)",
    }
    token_pattern: ClassVar[str | None] = r"(?<![0-9A-Za-z])(?:[0-9A-Za-z]{27}|[0-9A-Fa-f]{40})(?![0-9A-Za-z])"
    settings_model: ClassVar[Any] = None

    def parse(self, text: str) -> int:
        """base62 (27 characters) or hex (40); InvalidIdError naming the rule broken."""
        return decode(text)

    def format(self, value: int, fmt: str) -> str:
        """``base62`` (canonical) or ``hex`` text of a packed KSUID; InvalidOptionError for another format."""
        if self.resolve_format(fmt) == "hex":
            return encode_hex(value)
        return encode_base62(value)

    def fields(self, value: int) -> dict[str, Any]:
        """``{"timestamp_s": int (Unix seconds), "payload": 32 lowercase hex digits}``."""
        timestamp_s, payload = unpack(value)
        return {"timestamp_s": timestamp_s, "payload": f"{payload:0{PAYLOAD_BYTES * 2}x}"}

    def time_order(self, options: Mapping[str, str]) -> order.TimeOrder:
        """KSUIDs sort by their timestamp (whole seconds since 2014-05-13T16:53:20Z, the top 32 bits) in bytea
        (20 bytes) and text (base62) columns. Takes no options."""
        no_options(self.name, options)
        storages = {order.BYTEA: order.bytea(PACKED_BYTES), order.TEXT: order.text("base62", encode_base62)}
        return order.TimeOrder(
            TIMESTAMP_SHIFT,
            PACKED_BITS,
            EPOCH_S * NANOSECS_IN_SECS,
            Fraction(NANOSECS_IN_SECS),
            TIMESTAMP_S_MAX - EPOCH_S,
            storages,
            note="Coarse: KSUID timestamps are whole seconds, so the bounds hold the IDs of every whole second in "
            "[from, to); an ID made at 12:00:00.7 carries 12:00:00.",
        )

    def timestamp_ns(self, value: int) -> int:
        return unpack(value)[0] * NANOSECS_IN_SECS

    def new_generator(
        self,
        settings: Any,
        identities: list[int],
        floor: int,
        clock: Clock,
        random: RandomSource = ssl.RAND_bytes,
    ) -> KsuidGenerator:
        """A :class:`KsuidGenerator` (``identities`` is empty: no claim); ``floor`` in Unix seconds.

        ``random`` defaults to :func:`ssl.RAND_bytes` (OpenSSL's CSPRNG, reseeded after fork): measured 8x
        faster than :func:`os.urandom` for 4 KiB draws and 23x for 256 KiB (column-wise batches), about 2x
        slower for a 16-byte draw; both are cryptographically secure.
        """
        return KsuidGenerator(clock=clock, random=random, floor=floor)

    def describe(self, settings: Any) -> dict[str, Any]:
        return {"limits": {"timestamp_unit": "1 s", "ids_per_second": f"2**{PAYLOAD_BITS} (then the second advances)"}}

    def node_info(self, settings: Any, generator: Generator | None) -> dict[str, Any]:
        return {}

    def registration(self, generator: Generator) -> str | None:
        return None

    def with_decode_options(self, **options: str) -> KsuidScheme:
        """Self; InvalidOptionError for any option (ksuid has no decode options)."""
        if options:
            raise InvalidOptionError(f"ksuid takes no decode options, got {', '.join(sorted(options))}")
        return self


SCHEME = KsuidScheme()


# --- generator ----------------------------------------------------------------------------------------------------


class KsuidGenerator(Generator):
    """Issues monotonic KSUIDs (STANDARD_SCHEMES.md "ksuid", Generator).

    Per batch the clock is read (``now``, Unix seconds). ``now`` past the last second used: the first ID is
    ``(now, 16 fresh random bytes)``. Otherwise (same second, or the clock stepped back: a clock rollback, counted
    in :attr:`stats`) the first ID is the last packed value + 1. Within a batch each ID is the previous + 1; a payload
    passing 2**128 - 1 carries into the timestamp (counted as ``sequence_exhausted``), so issuing never fails
    for it and the IDs stay strictly increasing.

    ``floor`` (Unix seconds, the restored high-water mark): no ID is issued at or below it. While the clock is at
    or below the floor and nothing was issued yet, :meth:`generate` returns an empty batch and :meth:`wait_ns`
    says how long until the next second. ValueError for a floor out of range; OverflowError when the clock is
    before the KSUID epoch or the timestamp would pass 2150-06-19T23:21:35Z.
    """

    def __init__(self, *, clock: Clock = time.time_ns, random: RandomSource = os.urandom, floor: int = -1) -> None:
        if not (floor == -1 or TIMESTAMP_S_MIN - 1 <= floor <= TIMESTAMP_S_MAX):
            raise ValueError(f"floor must be -1 or in {TIMESTAMP_S_MIN - 1}..{TIMESTAMP_S_MAX} seconds, got {floor}")
        self._clock = clock
        self._random = random
        self._floor = floor
        self._last: int | None = None
        """The last packed value issued (None before the first)."""
        self.stats = GeneratorStats()

    def _last_second(self) -> int:
        if self._last is None:
            return self._floor
        return max(self._floor, (self._last >> TIMESTAMP_SHIFT) + EPOCH_S)

    def generate(self, count: int, **options: Any) -> KsuidBatch:
        """Issue ``count`` (1 .. 2**24) consecutive KSUIDs as a :class:`~app.schemes.ksuid_batch.KsuidBatch`.

        Returns an empty batch only while the clock is at or below the floor before the first ID. Raises
        InvalidOptionError for a bad count or any option (ksuid has none), OverflowError past the last second.
        """
        from app.schemes.ksuid_batch import KsuidBatch  # noqa: F811 (the batch module imports this one)

        if options:
            raise InvalidOptionError(f"ksuid takes no options, got {', '.join(sorted(options))}")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= BATCH_COUNT_MAX:
            raise InvalidOptionError(f"count must be in 1..{BATCH_COUNT_MAX} for ksuid, got {count!r}")
        now_ns = self._clock()
        self.stats.observe_clock(now_ns, NANOSECS_IN_SECS)
        now_s = now_ns // NANOSECS_IN_SECS
        if now_s > self._last_second():
            if now_s < TIMESTAMP_S_MIN:
                raise OverflowError(f"the clock ({now_s} s) is before the KSUID epoch ({EPOCH_S} s)")
            if now_s > TIMESTAMP_S_MAX:
                raise OverflowError(f"KSUID timestamp would pass {TIMESTAMP_S_MAX} s")
            drawn = self._random(PAYLOAD_BYTES)
            if len(drawn) != PAYLOAD_BYTES:
                raise ValueError(f"random returned {len(drawn)} bytes, asked for {PAYLOAD_BYTES}")
            first = pack(now_s, int.from_bytes(drawn, "big"))
            carried = False
        elif self._last is not None:
            first = self._last + 1
            carried = first >> TIMESTAMP_SHIFT != self._last >> TIMESTAMP_SHIFT
        else:
            return KsuidBatch(0, 0)  # the clock is at or below the floor: wait_ns() says how long
        last = first + count - 1
        if last > PACKED_MAX:
            raise OverflowError(f"KSUID timestamp would pass {TIMESTAMP_S_MAX} s")
        if carried or last >> TIMESTAMP_SHIFT != first >> TIMESTAMP_SHIFT:
            self.stats.sequence_exhausted += 1  # the payload ran past 2**128 - 1 and advanced the second
        self._last = last
        return KsuidBatch(first, count)

    def wait_ns(self) -> int:
        """0 once an ID was issued (the payload never runs out); before that, ns until the clock passes the floor."""
        if self._last is not None:
            return 0
        return max(0, (self._floor + 1) * NANOSECS_IN_SECS - self._clock())

    @property
    def high_water(self) -> int:
        """The Unix second of the last ID issued (or the floor)."""
        return self._last_second()
