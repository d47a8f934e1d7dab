"""Snowflake IDs: 64-bit IDs of a time field, a worker ID and a sequence, in one of several layouts.

Follows docs/schemes/snowflake.md, Twitter's announcement of Snowflake, Discord's API
reference ("Snowflakes"), Instagram's sharded IDs and sony/sonyflake. Bit 63 is always 0 (signed 64-bit integers)::

     63 62                                        22 21                12 11                     0
    +--+--------------------------------------------+--------------------+-----------------------+
    | 0| time (41 bits): units since the epoch      | worker ID (10)     | sequence (12)         |  twitter, discord
    +-----------------------------------------------+--------------------+-----------------------+
    | time (41 bits, bit 63 = its top bit = 0)      | shard ID (13)      | sequence (10)         |  instagram
    +-----------------------------------------------+--------------------+-----------------------+
    | 0| time (39 bits), 10 ms units            | sequence (8) | machine ID (16)                  |  sonyflake
    +--+----------------------------------------+--------------+----------------------------------+
    | 0| time (T)                               | worker (W)   | sequence (S)      T + W + S = 63 |  custom
    +--+----------------------------------------+--------------+----------------------------------+

    layout      epoch (Unix ms)          unit    order and widths
    twitter     1288834974657            1 ms    time 41, worker 10, sequence 12
    discord     1420070400000            1 ms    time 41, worker 10 (5 worker + 5 process), sequence 12
    instagram   1314220021721            1 ms    time 41, worker 13 (shard), sequence 10
    sonyflake   1409529600000            10 ms   time 39, sequence 8, worker 16 (machine ID)
    custom:EPOCH_MS:UNIT_MS:T/W/S        as given: time T, worker W, sequence S

Instagram's widths add up to 64: its time field's top bit is bit 63, which is 0 in every snowflake, so its time
field holds 0 .. 2**40 - 1 (until 2046-06-27T17:00:49Z). The other layouts leave bit 63 out of every field.

Decode fields (every layout): ``layout`` (its name), ``timestamp_ms`` (Unix ms: epoch + time x unit), ``worker_id``,
``sequence``. Every value 0 .. 2**63 - 1 decodes in every layout. Text: unsigned ``decimal`` (canonical, no leading
zeros) and ``hex`` (16 lowercase digits). Parsing: all-digit input is always decimal; hex is 16 hex digits that
include a letter, or any hex digits after ``0x``; negative, bit 63 set or too wide is refused with the rule named.

The native timestamp (high-water marks, ``floor``) counts the layout's time units from the Unix epoch: the time
field + ``EPOCH_MS // UNIT_MS`` (Unix ms // unit for every named layout, whose epochs are whole units).
The generator and its numpy batches live in :mod:`app.schemes.snowflake.generator`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.errors import InvalidIdError
from app.schemes.base import (
    LayoutField,
    TextForms,
)

# --- layout -------------------------------------------------------------------------------------------------------

PACKED_BITS = 64
PACKED_BYTES = PACKED_BITS // 8
FIELD_BITS = PACKED_BITS - 1  # 63: bit 63 is always 0
PACKED_MAX = (1 << FIELD_BITS) - 1
"""The largest snowflake (2**63 - 1, the largest signed 64-bit integer)."""

TIME, WORKER, SEQUENCE = "time", "worker", "sequence"
ORDER_TIME_WORKER_SEQUENCE = (TIME, WORKER, SEQUENCE)
ORDER_TIME_SEQUENCE_WORKER = (TIME, SEQUENCE, WORKER)

TIMESTAMP_MS_LIMIT = 1 << 53
"""Every timestamp of a layout (epoch + time x unit) must stay below 2**53 ms, so JSON numbers keep it exact."""

NANOSECS_IN_MILLISECS = 1_000_000
BATCH_COUNT_MAX = 1 << 24
"""Most IDs one :meth:`SnowflakeGenerator.generate` call may be asked for."""
LOOKBACK_MS = 50
"""How far back (ms) a late batch may fill never-used time units (eight-byte's default lookback)."""

START_SPREAD_MAX = 100
"""The widest random start of a time unit's sequence (:attr:`Layout.start_spread`)."""

CUSTOM_PREFIX = "custom"
CUSTOM_SEPARATOR = ":"
CUSTOM_WIDTH_SEPARATOR = "/"
LAYOUT_RULE = "twitter, discord, instagram, sonyflake, js53 or custom:EPOCH_MS:UNIT_MS:T/W/S with T+W+S <= 63"
_ASCII_DIGITS = frozenset("0123456789")
_LAYOUT_TEXT_LEN_MAX = 64


@dataclass(frozen=True)
class Layout:
    """One snowflake layout: epoch (Unix ms), time unit (ms), field widths and their order (most significant first).

    ``order`` is ``("time", "worker", "sequence")`` or ``("time", "sequence", "worker")`` (sonyflake); time is
    always on top, so IDs sort by time. Build with :meth:`parse`; the constructor checks the rules too and raises
    ValueError naming the one broken.
    """

    name: str
    epoch_ms: int
    unit_ms: int
    time_bits: int
    worker_bits: int
    sequence_bits: int
    order: tuple[str, str, str] = ORDER_TIME_WORKER_SEQUENCE

    def __post_init__(self) -> None:
        if self.order not in (ORDER_TIME_WORKER_SEQUENCE, ORDER_TIME_SEQUENCE_WORKER):
            raise ValueError(
                f"a snowflake layout's order must be time, worker, sequence or time, sequence, worker, "
                f"got {', '.join(self.order)}"
            )
        if self.epoch_ms < 0:
            raise ValueError(f"EPOCH_MS must be >= 0 (Unix ms), got {self.epoch_ms}")
        if self.unit_ms < 1:
            raise ValueError(f"UNIT_MS must be >= 1, got {self.unit_ms}")
        if self.time_bits < 1 or self.worker_bits < 0 or self.sequence_bits < 0:
            raise ValueError(
                f"T must be >= 1 and W, S >= 0, got {self.time_bits}/{self.worker_bits}/{self.sequence_bits}"
            )
        total = self.total_bits
        if total > PACKED_BITS:
            raise ValueError(
                f"T+W+S must be at most {FIELD_BITS}, got {self.time_bits}+{self.worker_bits}+{self.sequence_bits} "
                f"= {total}"
            )
        if self.timestamp_ms(self.time_max) >= TIMESTAMP_MS_LIMIT:
            raise ValueError(
                f"EPOCH_MS + (2**T - 1) x UNIT_MS must be below 2**53 ms (exact in JSON), got "
                f"{self.timestamp_ms(self.time_max)}"
            )

    # -- parsing ---------------------------------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str) -> Layout:
        """The layout named ``text``: twitter, discord, instagram, sonyflake or ``custom:EPOCH_MS:UNIT_MS:T/W/S``
        (ASCII decimal numbers, T+W+S <= 63: fewer bits keep IDs below 2**(T+W+S), e.g. 2**53 for JavaScript's
        exact integers). Raises ValueError naming the rule broken."""
        named = NAMED_LAYOUTS.get(text)
        if named is not None:
            return named
        parts = text.split(CUSTOM_SEPARATOR)
        if len(text) > _LAYOUT_TEXT_LEN_MAX or len(parts) != 4 or parts[0] != CUSTOM_PREFIX:
            raise ValueError(f"snowflake layout must be {LAYOUT_RULE}, got {text!r}")
        widths = parts[3].split(CUSTOM_WIDTH_SEPARATOR)
        numbers = [parts[1], parts[2], *widths]
        if len(widths) != 3 or not all(number and set(number) <= _ASCII_DIGITS for number in numbers):
            raise ValueError(
                f"custom snowflake layout must be custom:EPOCH_MS:UNIT_MS:T/W/S with ASCII decimal "
                f"numbers, got {text!r}"
            )
        epoch_ms, unit_ms, time_bits, worker_bits, sequence_bits = (int(number) for number in numbers)
        if time_bits + worker_bits + sequence_bits > FIELD_BITS:
            raise ValueError(
                f"T+W+S must be at most {FIELD_BITS}, got {time_bits}+{worker_bits}+{sequence_bits} = "
                f"{time_bits + worker_bits + sequence_bits}"
            )
        name = f"{CUSTOM_PREFIX}:{epoch_ms}:{unit_ms}:{time_bits}/{worker_bits}/{sequence_bits}"
        return cls(name, epoch_ms, unit_ms, time_bits, worker_bits, sequence_bits)

    # -- derived values --------------------------------------------------------------------------------------------

    @property
    def widths(self) -> dict[str, int]:
        """``{"time": T, "worker": W, "sequence": S}``."""
        return {TIME: self.time_bits, WORKER: self.worker_bits, SEQUENCE: self.sequence_bits}

    @functools.cached_property
    def total_bits(self) -> int:
        """T + W + S: at most 63 (IDs below 2**(T+W+S)), or 64 for instagram (whose time field's top bit is bit 63,
        always 0)."""
        return self.time_bits + self.worker_bits + self.sequence_bits

    @functools.cached_property
    def shifts(self) -> dict[str, int]:
        """Bit position of each field's least significant bit."""
        shifts, position = {}, self.total_bits
        for field in self.order:
            position -= self.widths[field]
            shifts[field] = position
        return shifts

    @functools.cached_property
    def time_max(self) -> int:
        """The largest time field value: 2**T - 1, or 2**(T-1) - 1 when the field's top bit is bit 63."""
        return self.value_max >> (self.total_bits - self.time_bits)  # time is the top field

    @functools.cached_property
    def value_max(self) -> int:
        """The largest ID of the layout: 2**(T+W+S) - 1, at most 2**63 - 1 (js53: 2**53 - 1)."""
        return (1 << min(self.total_bits, FIELD_BITS)) - 1

    @functools.cached_property
    def worker_max(self) -> int:
        return (1 << self.worker_bits) - 1

    @functools.cached_property
    def sequence_max(self) -> int:
        return (1 << self.sequence_bits) - 1

    @functools.cached_property
    def ids_per_unit(self) -> int:
        """The cap: IDs per time unit per worker ID (2**S)."""
        return 1 << self.sequence_bits

    @functools.cached_property
    def start_spread(self) -> int:
        """How many first slots a new time unit may start at, chosen at random (0 = always slot 0).

        Only where the sequence is the ID's lowest field (every layout but sonyflake, whose low bits are the worker
        ID): ``min(100, 2**S // 16)`` rounded down to a multiple of 20 (Meituan Leaf's 0..99, Leaf#39), so ``id % 2``,
        ``% 4``, ``% 5`` and ``% 10`` of a unit's first ID are uniform and at most 1/32 of a unit's sequence is
        skipped (twitter, discord: 100 of 4,096, 1.2 % of the cap on average; instagram: 60 of 1,024, 2.9 %); none
        below 2**S = 320."""
        if not self.worker_above_sequence:
            return 0
        return min(START_SPREAD_MAX, self.ids_per_unit // 16) // 20 * 20

    @functools.cached_property
    def worker_above_sequence(self) -> bool:
        """True unless the sequence sits above the worker ID (sonyflake)."""
        return self.order == ORDER_TIME_WORKER_SEQUENCE

    @property
    def bits(self) -> tuple[int, int, int, int, int, tuple[str, str, str]]:
        """What fixes this layout's IDs, bit for bit: (epoch ms, unit ms, T, W, S, order). The name does not:
        ``custom:1288834974657:1:41/10/12`` is twitter's layout spelled another way."""
        return (self.epoch_ms, self.unit_ms, self.time_bits, self.worker_bits, self.sequence_bits, self.order)

    @functools.cached_property
    def key_name(self) -> str:
        """The layout as an etcd key / folder segment, by what fixes its bits (:attr:`bits`), whatever the
        spelling: the name of the named layout with the same bits, else ``custom-EPOCH-UNIT-T-W-S``. Claims and
        high-water marks are keyed by it, so two spellings of one layout share them."""
        for named in NAMED_LAYOUTS.values():
            if named.bits == self.bits:
                return named.name
        return (
            f"{CUSTOM_PREFIX}-{self.epoch_ms}-{self.unit_ms}-{self.time_bits}-{self.worker_bits}-{self.sequence_bits}"
        )

    @functools.cached_property
    def epoch_units(self) -> int:
        """``EPOCH_MS // UNIT_MS``: the native timestamp of time field 0."""
        return self.epoch_ms // self.unit_ms

    def timestamp_ms(self, time_units: int) -> int:
        """Unix ms of a time field value."""
        return self.epoch_ms + time_units * self.unit_ms

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "epoch_ms": self.epoch_ms,
            "unit_ms": self.unit_ms,
            "order": list(self.order),
            "widths": self.widths,
        }

    # -- codec -----------------------------------------------------------------------------------------------------

    def pack(self, time_units: int, worker_id: int, sequence: int) -> int:
        """The 63-bit value of the fields: time (units since the epoch), worker ID, sequence. ValueError naming the
        field out of range. Inverse of :meth:`unpack`."""
        for field, value, maximum in (
            (TIME, time_units, self.time_max),
            (WORKER, worker_id, self.worker_max),
            (SEQUENCE, sequence, self.sequence_max),
        ):
            if not 0 <= value <= maximum:
                raise ValueError(f"snowflake {field} must be in 0..{maximum} in layout {self.name}, got {value}")
        shifts = self.shifts
        return time_units << shifts[TIME] | worker_id << shifts[WORKER] | sequence << shifts[SEQUENCE]

    def unpack(self, value: int) -> tuple[int, int, int]:
        """``(time_units, worker_id, sequence)`` of a snowflake (0 .. 2**63 - 1, else ValueError)."""
        _check_packed(value)
        shifts = self.shifts
        return (
            value >> shifts[TIME] & self.time_max,
            value >> shifts[WORKER] & self.worker_max,
            value >> shifts[SEQUENCE] & self.sequence_max,
        )

    def fields(self) -> tuple[LayoutField, ...]:
        """The bit layout as :class:`LayoutField` rows, most significant first."""
        descriptions = {
            TIME: f"{self.unit_ms} ms units since {self.epoch_ms} (Unix ms)",
            WORKER: "worker ID: a leased node identity",
            SEQUENCE: "order within one time unit and worker ID",
        }
        top = min(self.total_bits, FIELD_BITS)
        reserved = "63" if top == FIELD_BITS else f"63..{top}"
        rows = [LayoutField("reserved", reserved, "always 0" + (" (signed 64-bit)" if top == FIELD_BITS else ""))]
        for field in self.order:
            low, width = self.shifts[field], self.widths[field]
            bits = f"{low + width - 1}..{low}" if width else "(none)"
            rows.append(
                LayoutField(
                    "timestamp_ms" if field == TIME else f"{field}_id" if field == WORKER else field,
                    bits,
                    descriptions[field],
                )
            )
        return tuple(rows)


YEAR_MS = 365.25 * 86_400_000


def check_layout(
    layout: Layout, *, rate: float, replicas: int, workers: int = 1, regions: int = 1, years: float, now_ms: int
) -> list[tuple[bool, str]]:
    """Whether ``layout`` holds a fleet issuing ``rate`` IDs/s in all over ``replicas`` nodes of ``workers`` worker
    IDs each, in each of ``regions`` regions, for ``years`` from ``now_ms`` (Unix ms): one (holds, sentence) per
    rule (time left, worker IDs, capacity; and, as information, whether IDs stay below 2**53)."""
    end_ms = layout.timestamp_ms(layout.time_max) + layout.unit_ms
    left = (end_ms - now_ms) / YEAR_MS
    needed = replicas * workers * regions
    slots = layout.worker_max + 1
    per_worker = layout.ids_per_unit * 1000 / layout.unit_ms
    capacity = replicas * workers * per_worker
    when = datetime.fromtimestamp(end_ms / 1000, UTC).strftime("%Y-%m-%d")
    return [
        (left >= years, f"time: the layout ends {when}, {left:.1f} years from now; {years:g} needed"),
        (
            needed <= slots,
            f"worker IDs: {replicas} replicas x {workers} worker IDs x {regions} region(s) = {needed} of {slots}",
        ),
        (
            rate <= capacity,
            f"capacity: {capacity:,.0f} IDs/s per region ({replicas} x {workers} worker IDs x {per_worker:,.0f}; even "
            f"shards skip {layout.start_spread / 2 / layout.ids_per_unit:.1%} on average); {rate:,.0f} needed",
        ),
        (
            True,
            f"JavaScript: every ID is below 2**{min(layout.total_bits, FIELD_BITS)}"
            + (" (exact in a double)" if layout.value_max < 1 << 53 else " (not exact in a double: keep it a string)"),
        ),
    ]


TWITTER = Layout("twitter", 1288834974657, 1, 41, 10, 12)
DISCORD = Layout("discord", 1420070400000, 1, 41, 10, 12)
INSTAGRAM = Layout("instagram", 1314220021721, 1, 41, 13, 10)
SONYFLAKE = Layout("sonyflake", 1409529600000, 10, 39, 16, 8, ORDER_TIME_SEQUENCE_WORKER)
JS53 = Layout("js53", 1735689600000, 1, 41, 5, 7)
"""Every ID below 2**53, so JavaScript's numbers (and JSON parsers built on doubles) hold it exactly: 41 bits of ms
from 2025-01-01T00:00:00Z (until 2094-09-07), 5 bits of worker ID (32), 7 of sequence (128 per ms: 128,000 IDs/s
per worker ID)."""
NAMED_LAYOUTS = {layout.name: layout for layout in (TWITTER, DISCORD, INSTAGRAM, SONYFLAKE, JS53)}


# --- codec: packed int <-> text -----------------------------------------------------------------------------------

HEX_LEN = 2 * PACKED_BYTES  # 16
DECIMAL_LEN_MAX = len(str(PACKED_MAX))  # 19
HEX_PREFIX = "0x"
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_HEX_LETTERS = frozenset("abcdefABCDEF")


def _check_packed(value: int) -> None:
    if not 0 <= value <= PACKED_MAX:
        raise ValueError(f"a snowflake must be in 0..2**{FIELD_BITS}-1, got {value}")


def encode_decimal(value: int) -> str:
    """The canonical text: the unsigned decimal, no leading zeros."""
    _check_packed(value)
    return str(value)


def encode_hex(value: int) -> str:
    """16 lowercase hex digits."""
    _check_packed(value)
    return f"{value:0{HEX_LEN}x}"


def _checked(value: int, text: str) -> int:
    if value >> FIELD_BITS > 1:
        raise InvalidIdError(f"snowflake ID is too wide: it must fit in 63 bits (at most {PACKED_MAX}), got {text}")
    if value > PACKED_MAX:
        raise InvalidIdError(f"snowflake ID must not have bit 63 set (it fits a signed 64-bit integer), got {text}")
    return value


def decode_decimal(text: str) -> int:
    """An unsigned decimal of ASCII digits, no leading zeros, at most 2**63 - 1; InvalidIdError naming the rule."""
    if not text or not set(text) <= _ASCII_DIGITS:
        raise InvalidIdError(f"snowflake decimal ID must contain only digits 0-9, got {text!r}")
    if len(text) > 1 and text[0] == "0":
        raise InvalidIdError("snowflake decimal ID must not have leading zeros")
    if len(text) > DECIMAL_LEN_MAX + 1:
        raise InvalidIdError(f"snowflake ID is too wide: at most {DECIMAL_LEN_MAX} decimal digits, got {len(text)}")
    return _checked(int(text), text)


def decode_hex(text: str) -> int:
    """16 hex digits (either case), or ``0x`` followed by 1..16 hex digits; InvalidIdError naming the rule."""
    digits = text[len(HEX_PREFIX) :] if text[: len(HEX_PREFIX)].lower() == HEX_PREFIX else None
    if digits is None and len(text) != HEX_LEN:
        raise InvalidIdError(
            f"snowflake hex ID must be exactly {HEX_LEN} hex digits (or 0x and hex digits), got {len(text)} characters"
        )
    body = text if digits is None else digits
    if not body:
        raise InvalidIdError("snowflake hex ID must have hex digits after 0x")
    for position, char in enumerate(body):
        if char not in _HEX_DIGITS:
            raise InvalidIdError(
                f"snowflake hex ID must contain only hex digits 0-9 a-f, got {char!r} at position "
                f"{position + (len(text) - len(body))}"
            )
    if len(body.lstrip("0")) > HEX_LEN:
        raise InvalidIdError(
            f"snowflake ID is too wide: at most {HEX_LEN} significant hex digits, got {len(body.lstrip('0'))}"
        )
    return _checked(int(body, 16), text)


def decode(text: str) -> int:
    """Parse a snowflake: all ASCII digits -> decimal; 16 hex digits with a letter, or ``0x`` + hex digits -> hex.

    Raises InvalidIdError naming the rule broken (negative, bit 63 set, too wide, alphabet, length).
    """
    if text.startswith("-"):
        raise InvalidIdError(f"snowflake ID must not be negative, got {text}")
    if text and set(text) <= _ASCII_DIGITS:
        return decode_decimal(text)
    if text[: len(HEX_PREFIX)].lower() == HEX_PREFIX or (len(text) == HEX_LEN and set(text) & _HEX_LETTERS):
        return decode_hex(text)
    if text and set(text) <= _HEX_DIGITS:
        raise InvalidIdError(
            f"snowflake hex ID must be exactly {HEX_LEN} hex digits (or 0x and hex digits), got {len(text)}"
        )
    bad = next((char for char in text if char not in _HEX_DIGITS), "")
    raise InvalidIdError(
        f"snowflake ID must be a decimal integer, {HEX_LEN} hex digits or 0x and hex digits, got {len(text)} "
        "characters" + (f" including {bad!r}" if bad else "")
    )


TEXT = TextForms("snowflake", decimal=encode_decimal, hex=encode_hex)
"""The text forms, canonical first: the scheme and its batches format through this table."""
