"""Snowflake IDs: 64-bit IDs of a time field, a worker ID and a sequence, in one of several layouts.

Follows STANDARD_SCHEMES.md "snowflake (64 bits, layouts)", Twitter's announcement of Snowflake, Discord's API
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
field holds 0 .. 2**40 - 1 (until 2046-06-28). The other layouts leave bit 63 out of every field.

Decode fields (every layout): ``layout`` (its name), ``timestamp_ms`` (Unix ms: epoch + time x unit), ``worker_id``,
``sequence``. Every value 0 .. 2**63 - 1 decodes in every layout. Text: unsigned ``decimal`` (canonical, no leading
zeros) and ``hex`` (16 lowercase digits). Parsing: all-digit input is always decimal; hex is 16 hex digits that
include a letter, or any hex digits after ``0x``; negative, bit 63 set or too wide is refused with the rule named.

The native timestamp (high-water marks, ``floor``) counts the layout's time units from the Unix epoch: the time
field + ``EPOCH_MS // UNIT_MS`` (Unix ms // unit for every named layout, whose epochs are whole units).
The generator and its numpy batches live in :mod:`app.schemes.snowflake_batch`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field, field_validator, model_validator

from app.errors import InvalidIdError, InvalidOptionError
from app.pool import IdentityPool
from app.schemes import time_order as order
from app.schemes.base import (
    Clock,
    Generator,
    LayoutField,
    RandomSource,
    Scheme,
    SchemeOption,
    grouped,
    idmint_pool,
    no_options,
)

if TYPE_CHECKING:
    from app.schemes.snowflake_batch import SnowflakeGenerator

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

    @property
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

    @property
    def time_max(self) -> int:
        """The largest time field value: 2**T - 1, or 2**(T-1) - 1 when the field's top bit is bit 63."""
        return self.value_max >> (self.total_bits - self.time_bits)  # time is the top field

    @property
    def value_max(self) -> int:
        """The largest ID of the layout: 2**(T+W+S) - 1, at most 2**63 - 1 (js53: 2**53 - 1)."""
        return (1 << min(self.total_bits, FIELD_BITS)) - 1

    @property
    def worker_max(self) -> int:
        return (1 << self.worker_bits) - 1

    @property
    def sequence_max(self) -> int:
        return (1 << self.sequence_bits) - 1

    @property
    def ids_per_unit(self) -> int:
        """The cap: IDs per time unit per worker ID (2**S)."""
        return 1 << self.sequence_bits

    @property
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

    @property
    def worker_above_sequence(self) -> bool:
        """True unless the sequence sits above the worker ID (sonyflake)."""
        return self.order == ORDER_TIME_WORKER_SEQUENCE

    @property
    def key_name(self) -> str:
        """The layout's name as an etcd key / folder segment: the name, or ``custom-EPOCH-UNIT-T-W-S``."""
        if self.name in NAMED_LAYOUTS:
            return self.name
        return (
            f"{CUSTOM_PREFIX}-{self.epoch_ms}-{self.unit_ms}-{self.time_bits}-{self.worker_bits}-{self.sequence_bits}"
        )

    @property
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


# --- settings -----------------------------------------------------------------------------------------------------


class SnowflakeSettings(BaseModel):
    """Snowflake settings, a mixin of :class:`app.settings.Settings` (env ``IDMINT_SNOWFLAKE_*``)."""

    snowflake_layout: str = Field(
        "twitter",
        description="Snowflake layout: twitter, discord, instagram, sonyflake or custom:EPOCH_MS:UNIT_MS:T/W/S "
        "(time T, worker W, sequence S bits; T+W+S = 63).",
    )
    snowflake_worker_id: int | None = Field(
        None, ge=0, description="Static snowflake worker ID (0..2**W-1 of the layout); unset = claim one."
    )
    snowflake_workers: int = Field(
        1, ge=1, description="How many snowflake worker IDs this node holds (each caps at 2**S IDs per time unit)."
    )
    snowflake_pool: str = Field(
        "", description="Snowflake worker IDs this node may claim, as LOW-HIGH within 0..2**W-1 ('' = all of them)."
    )

    @field_validator("snowflake_layout")
    @classmethod
    def _check_snowflake_layout(cls, value: str) -> str:
        try:
            return Layout.parse(value).name
        except ValueError as exc:
            raise ValueError(f"snowflake_layout must be {LAYOUT_RULE}, got {value!r}: {exc}") from None

    @field_validator("snowflake_pool")
    @classmethod
    def _check_snowflake_pool(cls, value: str) -> str:
        if not value.strip():
            return ""
        low, sep, high = value.partition("-")
        low, high = low.strip(), high.strip()
        if not (sep and low and high and set(low + high) <= _ASCII_DIGITS) or int(low) > int(high):
            raise ValueError(f"snowflake_pool must be LOW-HIGH with 0 <= LOW <= HIGH, got {value!r}")
        return f"{int(low)}-{int(high)}"

    @property
    def snowflake_layout_spec(self) -> Layout:
        """The node's :class:`Layout`."""
        return Layout.parse(self.snowflake_layout)

    @property
    def snowflake_pool_bounds(self) -> tuple[int, int]:
        """(LOW, HIGH) of the pool; the layout's whole range 0..2**W-1 when unset."""
        if not self.snowflake_pool:
            return 0, self.snowflake_layout_spec.worker_max
        low, _, high = self.snowflake_pool.partition("-")
        return int(low), int(high)

    @model_validator(mode="after")
    def _check_snowflake_combinations(self) -> Any:
        layout = self.snowflake_layout_spec
        low, high = self.snowflake_pool_bounds
        if high > layout.worker_max:
            raise ValueError(
                f"snowflake_pool must lie within 0..{layout.worker_max} (layout {layout.name}), "
                f"got {self.snowflake_pool!r}"
            )
        if self.snowflake_worker_id is not None:
            if self.snowflake_worker_id > layout.worker_max:
                raise ValueError(
                    f"snowflake_worker_id must be in 0..{layout.worker_max} (layout {layout.name}), "
                    f"got {self.snowflake_worker_id}"
                )
            if self.snowflake_workers != 1:
                raise ValueError(
                    "snowflake_workers must be 1 when snowflake_worker_id is set statically, "
                    f"got {self.snowflake_workers}"
                )
        elif self.snowflake_workers > high - low + 1:
            raise ValueError(
                f"snowflake_workers must be at most the pool's size ({high - low + 1}), got {self.snowflake_workers}"
            )
        return self


# --- scheme -------------------------------------------------------------------------------------------------------


class SnowflakeScheme(Scheme):
    """Snowflake IDs in one :class:`Layout`: metadata, strict parser, decimal/hex text, field decoding.

    The registry's instance uses the default layout (twitter); :meth:`configured` gives the node's layout and
    :meth:`with_decode_options` another one (``layout=``). STANDARD_SCHEMES.md "snowflake".
    """

    name = "snowflake"
    packed_bytes = PACKED_BYTES
    formats = ("decimal", "hex")
    text_width = {"hex": HEX_LEN}
    timestamp_digits = 3
    reference = (
        "Twitter Snowflake, Discord API reference (Snowflakes), Instagram sharded IDs, sony/sonyflake; "
        'STANDARD_SCHEMES.md "snowflake"'
    )

    uniqueness: ClassVar[str] = "identity"
    uniqueness_note: ClassVar[str] = (
        "a worker ID (0..2**W-1 of the layout) leased per node; regions slice the worker IDs (with Twitter's 5+5 "
        "bits and 2 or 32 regions, the slices follow the datacenter bits)"
    )
    title: ClassVar[str] = "Snowflake (Twitter, Discord, Instagram, Sonyflake, custom layouts)"
    example: ClassVar[str] = "175928847299117063"
    captions: ClassVar[dict[str, str]] = {
        "layout": "Layout",
        "timestamp_ms": "Timestamp (Unix ms)",
        "worker_id": "Worker ID",
        "sequence": "Sequence",
    }
    token_pattern: ClassVar[str | None] = (
        r"(?<![0-9A-Za-z+-])(?:0[xX][0-9A-Fa-f]{1,16}|[0-9A-Fa-f]{16}|[1-9][0-9]{14,18})(?![0-9A-Za-z])"
    )
    """Decimals of 15..19 digits (shorter numbers in free text are rarely IDs), 16 hex digits, 0x hex."""
    settings_model: ClassVar[type[BaseModel] | None] = SnowflakeSettings
    options: ClassVar[tuple[SchemeOption, ...]] = ()
    decode_options: ClassVar[tuple[SchemeOption, ...]] = (
        SchemeOption("layout", "layout", f"Snowflake layout to decode with: {LAYOUT_RULE} (default: the node's)."),
    )

    def __init__(self, layout: Layout = TWITTER) -> None:
        self.snowflake_layout = layout
        self.native_unit_ns = layout.unit_ms * NANOSECS_IN_MILLISECS  # type: ignore[misc]
        self.layout = layout.fields()  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"SnowflakeScheme({self.snowflake_layout.name!r})"

    def native_from_ns(self, ns: int) -> int:
        """ns since the Unix epoch -> native units (time field + EPOCH_MS // UNIT_MS), floor."""
        layout = self.snowflake_layout
        unit_ns = layout.unit_ms * NANOSECS_IN_MILLISECS
        return (ns - layout.epoch_ms * NANOSECS_IN_MILLISECS) // unit_ns + layout.epoch_units

    def parse(self, text: str) -> int:
        """Any text form (:func:`decode`), within the layout's bits (js53: below 2**53)."""
        value = decode(text)
        layout = self.snowflake_layout
        if value > layout.value_max:
            raise InvalidIdError(
                f"a {layout.name} snowflake must be below 2**{min(layout.total_bits, FIELD_BITS)} "
                f"(T+W+S = {layout.total_bits} bits), got {value}"
            )
        return value

    def format(self, value: int, fmt: str) -> str:
        if self.resolve_format(fmt) == "hex":
            return encode_hex(value)
        return encode_decimal(value)

    def fields(self, value: int) -> dict[str, Any]:
        """``{"layout": name, "timestamp_ms": Unix ms, "worker_id": int, "sequence": int}``."""
        layout = self.snowflake_layout
        time_units, worker_id, sequence = layout.unpack(value)
        return {
            "layout": layout.name,
            "timestamp_ms": layout.timestamp_ms(time_units),
            "worker_id": worker_id,
            "sequence": sequence,
        }

    def time_order(self, options: Mapping[str, str]) -> order.TimeOrder:
        """Snowflakes sort by their time field (always the top field) in bigint and text (16 hex digits) columns,
        in the node's layout or ``layout=``. Raises InvalidOptionError for another option or an unknown layout."""
        no_options(self.name, options, ("layout",))
        layout = self.with_decode_options(**options).snowflake_layout
        storages = {order.BIGINT: order.bigint(), order.TEXT: order.text("hex", encode_hex)}
        return order.TimeOrder(
            layout.shifts[TIME],
            FIELD_BITS,
            layout.epoch_ms * NANOSECS_IN_MILLISECS,
            Fraction(layout.unit_ms * NANOSECS_IN_MILLISECS),
            layout.time_max,
            storages,
            label=f"layout {layout.name}",
        )

    def timestamp_ns(self, value: int) -> int:
        layout = self.snowflake_layout
        return layout.timestamp_ms(layout.unpack(value)[0]) * NANOSECS_IN_MILLISECS

    def id_space_end_ns(self) -> int:
        """The layout's end: its epoch plus 2**T units (instagram: 2046-06-28; twitter: 2080-09-05)."""
        layout = self.snowflake_layout
        return (layout.timestamp_ms(layout.time_max) + layout.unit_ms) * NANOSECS_IN_MILLISECS

    # -- contract: settings, identity, generator ------------------------------------------------------------------

    def configured(self, settings: Any) -> SnowflakeScheme:
        """The scheme in the node's layout (``settings.snowflake_layout``)."""
        layout = Layout.parse(settings.snowflake_layout)
        return self if layout == self.snowflake_layout else SnowflakeScheme(layout)

    def with_decode_options(self, **options: str) -> SnowflakeScheme:
        """The scheme in another layout (``layout=``); InvalidOptionError naming the rule for a bad layout or any
        other option."""
        unknown = sorted(set(options) - {"layout"})
        if unknown:
            raise InvalidOptionError(f"snowflake takes only the layout decode option, got {', '.join(unknown)}")
        if "layout" not in options:
            return self
        try:
            layout = Layout.parse(options["layout"])
        except ValueError as exc:
            raise InvalidOptionError(f"layout must be {LAYOUT_RULE}, got {options['layout']!r}: {exc}") from None
        return self if layout == self.snowflake_layout else SnowflakeScheme(layout)

    def identity_pool(self, settings: Any) -> IdentityPool:
        """Worker IDs of the region's slice of 0..2**W-1 (narrowed by ``IDMINT_SNOWFLAKE_POOL``),
        ``snowflake_workers`` held at once, or the static ``snowflake_worker_id``; keys
        ``idmint/snowflake/<layout>/<id>``. The layout names the key space but is not carried in the ID (two layouts
        can give the same number), so fleets on different layouts still count as sharing the worker IDs."""
        layout = self.configured(settings).snowflake_layout
        return idmint_pool(
            self.name,
            "worker_id",
            (0, layout.worker_max),
            settings,
            group=layout.key_name,
            pool=settings.snowflake_pool_bounds,
            pool_setting="IDMINT_SNOWFLAKE_POOL",
            static=settings.snowflake_worker_id,
            static_setting="IDMINT_SNOWFLAKE_WORKER_ID",
            claims=settings.snowflake_workers,
        )

    def new_generator(
        self,
        settings: Any,
        identities: list[int],
        floor: int,
        clock: Clock,
        random: RandomSource = os.urandom,
    ) -> SnowflakeGenerator:
        """A generator for the node's layout and the worker IDs claimed; ``floor`` in native units."""
        from app.schemes.snowflake_batch import SnowflakeGenerator  # that module imports this one

        layout = self.configured(settings).snowflake_layout
        lookback_units = -(-LOOKBACK_MS // layout.unit_ms)
        return SnowflakeGenerator(
            layout, identities, clock=clock, floor=floor, lookback_units=lookback_units, random=random
        )

    def describe(self, settings: Any) -> dict[str, Any]:
        """``{"snowflake_layout": {...}, "limits": {"ids_per_unit_per_worker_id", "unit_ms", "worker_ids",
        "ids_per_second"}}`` for the node's layout and worker count (not "layout": that member of the
        ``/v1/schemes`` entry is the bit layout every scheme has)."""
        layout = self.configured(settings).snowflake_layout
        workers = settings.snowflake_workers
        return {
            "snowflake_layout": layout.describe(),
            "limits": {
                "ids_per_unit_per_worker_id": layout.ids_per_unit,
                "unit_ms": layout.unit_ms,
                "worker_ids": workers,
                "ids_per_second": layout.ids_per_unit * workers * 1000 // layout.unit_ms,
            },
        }

    def node_info(self, settings: Any, generator: Generator | None) -> dict[str, Any]:
        return {"layout": self.configured(settings).snowflake_layout.name}

    def registration(self, generator: Generator) -> str | None:
        return None

    def words(self, fields: dict[str, Any]) -> dict[str, str]:
        """``worker_id`` as "worker 421", ``sequence`` as "sequence 7 of 0..4095 in its unit", ``layout`` named."""
        layout = self.snowflake_layout
        return {
            "layout": f"layout {fields['layout']}",
            "timestamp_ms": f"{grouped(fields['timestamp_ms'])} ms since the Unix epoch",
            "worker_id": f"worker {fields['worker_id']}",
            "sequence": f"sequence {fields['sequence']} of 0..{layout.sequence_max} in its unit",
        }

    def summary(self, fields: dict[str, Any]) -> str:
        """ "worker 421, sequence 7 (twitter layout)"."""
        return f"worker {fields['worker_id']}, sequence {fields['sequence']} ({fields['layout']} layout)"


SCHEME = SnowflakeScheme()
