"""The eight-byte scheme: its settings and :class:`~app.schemes.base.Scheme` (``SCHEME``), over
:mod:`app.schemes.eight_byte.codec` and :mod:`app.schemes.eight_byte.generator`."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from app.errors import InvalidOptionError
from app.schemes import time_order as order
from app.schemes.base import (
    MARKS_KEY_PREFIX,
    Clock,
    Generator,
    LayoutField,
    PublicSplit,
    RandomSource,
    Scheme,
    SchemeOption,
    SchemeSettings,
    csprng,
    grouped,
)
from app.schemes.eight_byte.codec import (
    CLUSTER_ID_MAX,
    GENERATOR_ID_MAX,
    HEX_LEN,
    NANOSECS_IN_MILLISECS,
    PACKED_BITS,
    PACKED_BYTES,
    SEQUENCE_MAX,
    SEQUENCE_VALUES,
    TEXT,
    TIMESTAMP_MS_MAX,
    TIMESTAMP_SHIFT,
    Mode,
    decode,
    encode_hex,
    pack,
    unpack,
)
from app.schemes.eight_byte.generator import (
    EightByteGenerator,
)
from app.schemes.pool import IdentityPool

# --- scheme -------------------------------------------------------------------------------------------------------


class EightByteSettings(SchemeSettings):
    """Eight-byte settings (joined into :class:`app.settings.Settings`; env ``IDMINT_CLUSTER_ID``,
    ``IDMINT_EIGHT_BYTE_*``)."""

    cluster_id: int = Field(0, ge=0, le=CLUSTER_ID_MAX, description="Eight-byte cluster ID (0..15).")
    eight_byte_generator_id: int | None = Field(
        None, ge=0, le=GENERATOR_ID_MAX, description="Static eight-byte generator ID (0..2047); unset = claim one."
    )
    eight_byte_generators: int = Field(
        1,
        ge=1,
        le=GENERATOR_ID_MAX + 1,
        description="How many eight-byte generator IDs this node holds (each caps at 64 IDs/ms).",
    )
    eight_byte_lookback_ms: int = Field(
        50,
        ge=0,
        le=1000,
        description="Eight-byte: unused milliseconds up to this far back may be filled by a late batch (0..1000).",
    )
    eight_byte_pool: str = Field(
        "0-2047",
        description="Eight-byte generator IDs this node may claim, as LOW-HIGH within 0..2047.",
    )

    @field_validator("eight_byte_pool")
    @classmethod
    def _check_pool(cls, value: str) -> str:
        low, sep, high = value.partition("-")
        if not (
            sep
            and low.strip().isascii()
            and low.strip().isdigit()
            and high.strip().isascii()
            and high.strip().isdigit()
        ) or not (0 <= int(low) <= int(high) <= GENERATOR_ID_MAX):
            raise ValueError(f"eight_byte_pool must be LOW-HIGH with 0 <= LOW <= HIGH <= 2047, got {value!r}")
        return f"{int(low)}-{int(high)}"

    @property
    def eight_byte_pool_bounds(self) -> tuple[int, int]:
        """(LOW, HIGH) of :attr:`eight_byte_pool`, inclusive."""
        low, _, high = self.eight_byte_pool.partition("-")
        return int(low), int(high)

    @model_validator(mode="after")
    def _check_generators(self) -> Any:
        if self.eight_byte_generator_id is not None and self.eight_byte_generators != 1:
            raise ValueError(
                "eight_byte_generators must be 1 when eight_byte_generator_id is set statically, "
                f"got {self.eight_byte_generators}"
            )
        return self


class EightByteScheme(Scheme):
    """Eight-byte IDs: metadata, strict parser, hex/decimal text, field decoding (docs/schemes/eight-byte.md)."""

    name = "eight-byte"
    packed_bytes = PACKED_BYTES
    public_split = PublicSplit(family=2, bits=64)
    """The public form is a keyed permutation of all 64 bits (app.public)."""
    text_forms = TEXT
    rising_formats = {}
    """No form rises within one answer: a node holding several generator IDs hands out a millisecond's slots
    generator by generator, and the sequence bits sit above the generator bits (sequence 63 of the first generator
    ID, then sequence 0 of the next). Each generator ID's IDs do rise, in time_sequential mode:
    :attr:`identity_rising_formats`."""
    identity_fields = ("generator_id", "mode", "cluster_id")
    identity_rising_formats = {"hex": {"mode": ("time_sequential",)}, "decimal": {"mode": ("time_sequential",)}}
    """Spread (the default) bit-reverses the timestamp, so IDs of successive ticks scatter; ``signed`` puts negative
    values (a leading ``-``) in reverse order."""
    text_width = {"hex": HEX_LEN}
    timestamp_digits = 3
    native_unit_ns = NANOSECS_IN_MILLISECS
    timestamp_native_max = TIMESTAMP_MS_MAX
    layout = (
        LayoutField("timestamp_ms", "63..22", "ms since the Unix epoch; SPREAD: bit-reversed over all 64 bits"),
        LayoutField("sequence", "21..16", "0..63 per millisecond and generator ID"),
        LayoutField("generator_id", "15..13,11..4", "0..2047: bits 10..8 at 15..13, bits 7..0 at 11..4"),
        LayoutField("mode", "12", "0 = spread, 1 = time_sequential"),
        LayoutField("cluster_id", "3..0", "0..15"),
    )
    uniqueness = "identity"
    uniqueness_note = (
        "a generator ID (0..2047) leased within the cluster ID; regions slice the generator IDs, so cluster IDs and "
        "java-uniqueid's pool/<cluster>:<generator> claim keys keep their meaning"
    )
    reference = "LableOrg/java-uniqueid v4.7 (IDBuilder, Blueprint); docs/schemes/eight-byte.md"

    def parse(self, text: str) -> int:
        return decode(text)

    def fields(self, value: int) -> dict[str, Any]:
        """``{"timestamp_ms", "sequence", "generator_id", "cluster_id", "mode"}``; mode "spread"/"time_sequential"."""
        timestamp_ms, sequence, generator_id, cluster_id, mode = unpack(value)
        return {
            "timestamp_ms": timestamp_ms,
            "sequence": sequence,
            "generator_id": generator_id,
            "cluster_id": cluster_id,
            "mode": mode.label,
        }

    time_order_options: ClassVar[dict[str, str]] = {"mode": "time_sequential"}

    time_order_takes = ("mode",)

    def time_order(self, options: Mapping[str, str]) -> order.TimeOrder:
        """Eight-byte IDs in ``mode=time_sequential`` sort by their ms timestamp (the top 42 bits) in bigint (the
        signed form, Java's ``long``), bytea (8 bytes) and text (16 hex digits) columns. Raises
        InvalidOptionError for the spread mode (the default), whose bit-reversed timestamp does not sort."""
        if Mode.from_option(options.get("mode")) is Mode.SPREAD:
            raise InvalidOptionError(
                "eight-byte IDs in mode spread (the default) store their timestamp bit-reversed, so they do not "
                "sort by time in any column; bounds exist for mode=time_sequential"
            )
        storages = {order.BIGINT: order.bigint(signed=True), order.BYTEA: order.bytea(PACKED_BYTES)}
        storages[order.TEXT] = order.text("hex", encode_hex)
        return order.TimeOrder(
            TIMESTAMP_SHIFT,
            PACKED_BITS,
            0,
            Fraction(NANOSECS_IN_MILLISECS),
            TIMESTAMP_MS_MAX,
            storages,
            label="mode time_sequential",
            note="An ID's time can be up to the lookback (IDMINT_EIGHT_BYTE_LOOKBACK_MS, 50 ms by default) before it "
            "was issued (unused slots of the last milliseconds are filled first): to find rows by when they were "
            "created, start that much earlier. Spread-mode IDs in the same column fall inside at random: keep the "
            "modes in separate columns.",
        )

    def timestamp_ns(self, value: int) -> int | None:
        return unpack(value)[0] * NANOSECS_IN_MILLISECS

    title = "Eight-byte ID (java-uniqueid)"
    example = "cb54ecf2840a0015"
    settings_model = EightByteSettings
    options = (
        SchemeOption(
            "mode",
            "mode",
            "How the timestamp is stored: spread (bit-reversed, the default: IDs spread "
            "over the key space) or time_sequential (IDs sort by time).",
            choices=tuple(mode.label for mode in Mode),
        ),
    )
    captions = {
        "timestamp_ms": "Milliseconds since 1970-01-01 UTC (42 bits).",
        "sequence": "Counter within one millisecond for one generator: at most 64 IDs per ms.",
        "generator_id": "Generator ID (0..2047) of the node that made it, leased so no two nodes share one.",
        "cluster_id": "Cluster ID (0..15), set in the issuing node's configuration.",
        "mode": "Mode bit 0: the timestamp's bits are reversed so IDs spread evenly over keys (default); "
        "1: the timestamp sits in the top bits, so IDs sort by time.",
    }

    def parse_option(self, name: str, text: str) -> Any:
        """``mode``: its :class:`Mode` (after the default check of its choices), so the value a request's options
        hand the generator is the mode itself, parsed once per distinct query, not once per ID request."""
        value = super().parse_option(name, text)
        return Mode.from_option(value) if name == "mode" else value

    def identity_pool(self, settings: EightByteSettings) -> IdentityPool:
        """Generator IDs of the region's slice of 0..2047 (narrowed by ``IDMINT_EIGHT_BYTE_POOL``), claimed in
        java-uniqueid's layout ``pool/<cluster>:<id>`` (allowed clusters in the ``cluster-id`` key), marks at
        ``idmint/marks/eight-byte/<cluster>/<id>``.

        Regions slice the generator ID, not the cluster ID: the cluster ID stays the operator's (java-uniqueid
        deployments give it a meaning and list it in ``cluster-id``), and the claim keys stay java-uniqueid's, so
        its own nodes sharing the etcd still see ours. Raises ConfigError as :meth:`IdentityPool.build` does."""
        cluster = settings.cluster_id
        return IdentityPool.build(
            self.name,
            "generator_id",
            (0, GENERATOR_ID_MAX),
            region=settings.region,
            regions=settings.regions,
            pool=settings.eight_byte_pool_bounds,
            pool_setting="IDMINT_EIGHT_BYTE_POOL",
            static=settings.eight_byte_generator_id,
            static_setting="IDMINT_EIGHT_BYTE_GENERATOR_ID",
            claims=settings.eight_byte_generators,
            key_prefix=f"pool/{cluster}:",
            mark_prefix=f"{MARKS_KEY_PREFIX}{self.name}/{cluster}/",
            group=str(cluster),
            group_in_id=True,
            allowed_groups_key="cluster-id",
            reserved=settings.backfill_identities,
        )

    backfills: ClassVar[bool] = True
    backfill_identity: ClassVar[bool] = True

    def backfill_sequences(self, settings: EightByteSettings) -> int:
        """64: the format's cap per ms and generator ID."""
        return SEQUENCE_VALUES

    def backfill_value(
        self,
        settings: EightByteSettings,
        tick: int,
        identity: int,
        sequence: int,
        random: RandomSource,
        options: Mapping[str, Any],
    ) -> int:
        """The ID of generator ``identity`` in the node's cluster, sequence ``sequence`` at ms ``tick``, in the mode
        asked (default spread)."""
        return pack(tick, sequence, identity, settings.cluster_id, Mode.from_option(options.get("mode")))

    def new_generator(
        self,
        settings: EightByteSettings,
        identities: list[int],
        floor: int,
        clock: Clock,
        random: RandomSource = csprng,
    ) -> Generator:
        return EightByteGenerator(
            identities, settings.cluster_id, clock=clock, floor=floor, lookback_ms=settings.eight_byte_lookback_ms
        )

    def describe(self, settings: EightByteSettings) -> dict[str, Any]:
        return {"limits": {"ids_per_ms_per_generator_id": SEQUENCE_VALUES}}

    def node_info(self, settings: EightByteSettings, generator: Generator | None) -> dict[str, Any]:
        return {"cluster_id": settings.cluster_id}

    def words(self, fields: dict[str, Any]) -> dict[str, str]:
        mode = str(fields["mode"])
        return {
            "timestamp_ms": f"{grouped(fields['timestamp_ms'])} ms since the Unix epoch",
            "sequence": f"sequence {fields['sequence']} of 0..{SEQUENCE_MAX} in its millisecond",
            "generator_id": f"generator {fields['generator_id']} in cluster {fields['cluster_id']}",
            "cluster_id": f"cluster {fields['cluster_id']}",
            "mode": (
                "SPREAD: time stored bit-reversed"
                if mode == Mode.SPREAD.label
                else "TIME_SEQUENTIAL: time in the top bits"
                if mode == Mode.TIME_SEQUENTIAL.label
                else f"mode {mode}"
            ),
        }

    def summary(self, fields: dict[str, Any]) -> str:
        return f"{self.words(fields)['generator_id']}, sequence {fields['sequence']}, {str(fields['mode']).upper()}"


SCHEME = EightByteScheme()
