"""The snowflake scheme: its settings and :class:`~app.schemes.base.Scheme` (``SCHEME``), over
:mod:`app.schemes.snowflake.codec` and :mod:`app.schemes.snowflake.generator`."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, ClassVar

from pydantic import BaseModel, Field, field_validator, model_validator

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import time_order as order
from app.schemes.base import (
    Clock,
    Generator,
    PublicSplit,
    RandomSource,
    Scheme,
    SchemeOption,
    SchemeSettings,
    csprng,
    grouped,
    idmint_pool,
)
from app.schemes.pool import IdentityPool
from app.schemes.snowflake.codec import (
    _ASCII_DIGITS,
    FIELD_BITS,
    HEX_LEN,
    LAYOUT_RULE,
    LOOKBACK_MS,
    NANOSECS_IN_MILLISECS,
    PACKED_BYTES,
    TEXT,
    TIME,
    TWITTER,
    Layout,
    decode,
    encode_hex,
)
from app.schemes.snowflake.generator import (
    SnowflakeGenerator,
)

# --- settings -----------------------------------------------------------------------------------------------------


class SnowflakeSettings(SchemeSettings):
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
    :meth:`with_decode_options` another one (``layout=``). docs/schemes/snowflake.md.
    """

    name = "snowflake"
    packed_bytes = PACKED_BYTES
    public_split = PublicSplit(family=1, bits=64)
    """The public form is a keyed permutation of all 64 bits (app.public)."""
    text_forms = TEXT
    rising_formats = {"hex": {}}
    identity_fields = ("worker_id",)
    identity_rising_formats = {"hex": {}, "decimal": {}}
    """Only hex rises: ``decimal`` has no fixed width (a new digit every power of ten), so it does not byte-sort."""
    text_width = {"hex": HEX_LEN}
    timestamp_digits = 3
    reference = (
        "Twitter Snowflake, Discord API reference (Snowflakes), Instagram sharded IDs, sony/sonyflake; "
        "docs/schemes/snowflake.md"
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

    time_order_takes = ("layout",)

    def time_order(self, options: Mapping[str, str]) -> order.TimeOrder:
        """Snowflakes sort by their time field (always the top field) in bigint and text (16 hex digits) columns,
        in the node's layout or ``layout=``. Raises InvalidOptionError for an unknown layout."""
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
            note=f"An ID's time can be up to the lookback ({LOOKBACK_MS} ms) before it was issued (unused slots of "
            "the last units are filled first): to find rows by when they were created, start that much earlier.",
        )

    def timestamp_ns(self, value: int) -> int:
        layout = self.snowflake_layout
        return layout.timestamp_ms(layout.unpack(value)[0]) * NANOSECS_IN_MILLISECS

    backfills: ClassVar[bool] = True
    backfill_identity: ClassVar[bool] = True

    def backfill_tick(self, ns: int) -> int:
        """The layout's unit holding ``ns``; InvalidOptionError before the layout's epoch or past its time field."""
        layout = self.snowflake_layout
        tick = self.native_from_ns(ns)
        if tick < layout.epoch_units:
            raise InvalidOptionError(
                f"snowflake IDs cannot hold a time before the scheme's epoch: layout {layout.name} begins at "
                f"{layout.epoch_ms} (Unix ms)"
            )
        if tick - layout.epoch_units > layout.time_max:
            raise InvalidOptionError(
                f"snowflake IDs cannot hold a time past the end of the scheme's ID space: layout {layout.name}'s "
                f"{layout.time_bits}-bit time field ends at {layout.timestamp_ms(layout.time_max + 1)} (Unix ms)"
            )
        return tick

    def backfill_sequences(self, settings: SnowflakeSettings) -> int:
        """2**S of the node's layout."""
        return self.configured(settings).snowflake_layout.ids_per_unit

    def backfill_value(
        self,
        settings: SnowflakeSettings,
        tick: int,
        identity: int,
        sequence: int,
        random: RandomSource,
        options: Mapping[str, Any],
    ) -> int:
        """The snowflake of worker ``identity``, sequence ``sequence`` at native tick ``tick``, in the node's layout."""
        layout = self.configured(settings).snowflake_layout
        return layout.pack(tick - layout.epoch_units, identity, sequence)

    def id_space_end_ns(self) -> int:
        """The layout's end: its epoch plus 2**T units (instagram: 2046-06-27T17:00:49Z; twitter: 2080-07-10)."""
        layout = self.snowflake_layout
        return (layout.timestamp_ms(layout.time_max) + layout.unit_ms) * NANOSECS_IN_MILLISECS

    # -- contract: settings, identity, generator ------------------------------------------------------------------

    def configured(self, settings: SnowflakeSettings) -> SnowflakeScheme:
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

    def identity_pool(self, settings: SnowflakeSettings) -> IdentityPool:
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
            reserved=settings.backfill_identities,
        )

    def identity_settings(self, settings: SnowflakeSettings) -> dict[str, Any]:
        """``{"layout": <the layout's key name>}``: what fixes its bits, whatever the spelling (a worker ID means
        other bits in another layout, and two layouts can give the same number)."""
        return {"layout": self.configured(settings).snowflake_layout.key_name}

    def new_generator(
        self,
        settings: SnowflakeSettings,
        identities: list[int],
        floor: int,
        clock: Clock,
        random: RandomSource = csprng,
    ) -> SnowflakeGenerator:
        """A generator for the node's layout and the worker IDs claimed; ``floor`` in native units."""
        layout = self.configured(settings).snowflake_layout
        lookback_units = -(-LOOKBACK_MS // layout.unit_ms)
        return SnowflakeGenerator(
            layout, identities, clock=clock, floor=floor, lookback_units=lookback_units, random=random
        )

    def describe(self, settings: SnowflakeSettings) -> dict[str, Any]:
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

    def node_info(self, settings: SnowflakeSettings, generator: Generator | None) -> dict[str, Any]:
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
